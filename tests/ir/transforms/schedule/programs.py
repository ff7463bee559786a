"""Graph programs the scheduler is tested on, with seeded example arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import tessera as ts
from tessera import op
from tessera.ir.core import Function


def attention(q: Any, k: Any, v: Any) -> Any:
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def attention_4d(q: Any, k: Any, v: Any) -> Any:
    s = op.matmul(q, op.transpose(k, (0, 1, 3, 2))) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def causal_where(q: Any, k: Any, v: Any, mask: Any) -> Any:
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125
    return op.matmul(op.softmax(op.where(mask, s, -1e9)), v)


def causal_additive(q: Any, k: Any, v: Any, bias: Any) -> Any:
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125 + bias
    return op.matmul(op.softmax(s), v)


def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return op.gelu(x @ w1 + b1) @ w2 + b2


def layernorm(x: Any, g: Any, b: Any) -> Any:
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = op.mean(d * d, axis=-1, keepdims=True)
    return d / op.sqrt(var + 1e-5) * g + b


def rmsnorm(x: Any, g: Any) -> Any:
    return x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def softmax(x: Any) -> Any:
    return op.softmax(x, axis=-1)


def chain(x: Any) -> Any:
    return op.exp(op.tanh(op.relu(x * 2.0 + 1.0) - 0.5)) / 3.0


def block(x: Any, g1: Any, b1: Any, wq: Any, wk: Any, wv: Any, wo: Any, g2: Any, b2: Any,
          w1: Any, c1: Any, w2: Any, c2: Any) -> Any:
    """A pre-norm transformer block: attention and an MLP, each with a residual."""
    h = layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    s = op.matmul(q, op.transpose(k, (1, 0))) * 0.125
    r = x + op.matmul(op.softmax(s), v) @ wo
    return r + mlp(layernorm(r, g2, b2), w1, c1, w2, c2)


def _arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _causal_mask(b: int, s: int) -> np.ndarray:
    return np.tril(np.ones((s, s), bool))[None].repeat(b, 0)


B, S, D, H = 4, 64, 32, 128
PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], list[Any]]]] = {
    "attention": (attention, lambda: _arrays((B, S, D), (B, S, D), (B, S, D))),
    "attention_4d": (attention_4d, lambda: _arrays((2, 2, S, D), (2, 2, S, D), (2, 2, S, D))),
    "causal_where": (causal_where,
                     lambda: [*_arrays((B, S, D), (B, S, D), (B, S, D)), _causal_mask(B, S)]),
    "causal_additive": (causal_additive, lambda: [
        *_arrays((B, S, D), (B, S, D), (B, S, D)),
        np.where(_causal_mask(B, S), 0.0, -1e9).astype(np.float32)]),
    "mlp": (mlp, lambda: _arrays((S, D), (D, H), (H,), (H, D), (D,))),
    "layernorm": (layernorm, lambda: _arrays((S, H), (H,), (H,))),
    "rmsnorm": (rmsnorm, lambda: _arrays((S, H), (H,))),
    "softmax": (softmax, lambda: _arrays((S, H))),
    "chain": (chain, lambda: _arrays((S, H))),
    "block": (block, lambda: _arrays((S, D), (D,), (D,), (D, D), (D, D), (D, D), (D, D), (D,),
                                     (D,), (D, 4 * D), (4 * D,), (4 * D, D), (D,))),
}
#: kernels after fuse, and the most the level promises for the transformer block
KERNELS = {"attention": 1, "attention_4d": 1, "causal_where": 1, "causal_additive": 1,
           "mlp": 2, "layernorm": 1, "rmsnorm": 1, "softmax": 1, "chain": 1, "block": 6}


def traced(name: str) -> tuple[Function, list[Any]]:
    """The Graph IR function of a program (after the jit's graph passes) and its args."""
    fn, make_args = PROGRAMS[name]
    args = make_args()
    jitted = ts.jit(fn)
    jitted.compile(*args)
    return jitted.last.function, args
