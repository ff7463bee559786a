"""Graph programs compiled end to end: the spec's attention, an MLP block, layernorm, a
pre-norm transformer block and the quick start's training step, each down the whole
stack (Graph -> Schedule -> Tile -> Target IR -> PTX).

Seeds: guide-ch2-programming-model.md 2.2 (``@graph.module("attention")``) and
overview-and-quickstart.md Example 3 (the training step: loss and gradient).

For each program ``ts.jit(f).lower(*args)`` fuses the graph into kernels
(docs/schedule.md). The script prints each kernel's name and grid, the first lines of
one kernel's Tile IR, and its PTX (``.ptx(target="sm_90a")``), or the reason a kernel
does not reach PTX yet. Then it checks the contract: the kernels in the tile simulator
(``backend="tile"``), and the lowered kernels in the Target IR interpreter
(``backend="target"``) where they lower, give the graph interpreter's bits.

Run: ``python examples/compiled_programs.py``
"""

from collections.abc import Callable
from typing import Any

import numpy as np

import tessera as ts
from tessera import graph, op
from tessera.errors import UnsupportedError


# --- guide-ch2-programming-model.md, 2.2 (as written) ----------------------------------
@graph.module("attention")
def attention(Q, K, V):
    S = op.matmul(Q, K.T)
    A = op.softmax(S)
    return op.matmul(A, V)


def mlp(x, w1, b1, w2, b2):
    return op.gelu(x @ w1 + b1) @ w2 + b2


def layernorm(x, g, b):
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = op.mean(d * d, axis=-1, keepdims=True)
    return d / op.sqrt(var + 1e-5) * g + b


def block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""
    h = layernorm(x, g1, b1)
    s = op.matmul(h @ wq, op.transpose(h @ wk, (1, 0))) * 0.125
    r = x + op.matmul(op.softmax(s), h @ wv) @ wo
    return r + mlp(layernorm(r, g2, b2), w1, c1, w2, c2)


# --- overview-and-quickstart.md, Example 3 (the graph part, x and y given) -------------
@ts.jit
@ts.autodiff
def train_step(x, y, W):
    """Training step with automatic gradient computation"""
    pred = ts.gemm(x, W)
    loss = ts.mse(pred, y)
    return loss


def _arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


D = 8
PROGRAMS: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "attention": (attention, _arrays((16, D), (16, D), (16, D))),
    "mlp": (mlp, _arrays((16, D), (D, 32), (32,), (32, D), (D,))),
    "layernorm": (layernorm, _arrays((16, 32), (32,), (32,))),
    "transformer block": (block, _arrays((16, D), (D,), (D,), (D, D), (D, D), (D, D), (D, D),
                                         (D,), (D,), (D, 4 * D), (4 * D,), (4 * D, D), (D,))),
    "training step": (ts.value_and_grad(train_step), _arrays((8, 16), (8, 4), (16, 4))),
}


def _bits(out: Any) -> list[bytes]:
    return [np.asarray(o).tobytes() for o in (out if isinstance(out, tuple) else (out,))]


def show(name: str, fn: Callable[..., Any], args: list[np.ndarray]) -> None:
    """One program down the stack: kernels, Tile IR, PTX, and the bit checks."""
    lowered = ts.jit(fn).lower(*args)
    kernels = lowered.kernels
    print(f"=== {name}: {len(kernels)} kernel(s)")
    for k in kernels:
        print(f"  {k.name}  grid {k.grid}")
    head = kernels[0].text.splitlines()
    print("  Tile IR of", kernels[0].name, f"({len(head)} lines):")
    for line in head[:6]:
        print("    " + line[:110])
    want = _bits(lowered.run(*args))
    assert _bits(lowered.run(*args, backend="tile")) == want, name
    print("  backend='tile': the graph interpreter's bits")
    try:
        ptx = lowered.ptx(target="sm_90a")
    except UnsupportedError as err:
        print("  PTX: not yet:", err.message.splitlines()[0][:150])
        return
    for kname, text in ptx.items():
        entry = next(line for line in text.splitlines() if ".entry" in line)
        print(f"  PTX {kname}: {len(text.splitlines())} lines, {entry.strip()}")
    assert _bits(lowered.run(*args, backend="target")) == want, name
    print("  backend='target' (the PTX's Target IR, interpreted): the same bits")


def main() -> None:
    for name, (fn, args) in PROGRAMS.items():
        show(name, fn, args)
    print("OK: every program compiled; the tile and target backends gave the graph's bits")


if __name__ == "__main__":
    main()
