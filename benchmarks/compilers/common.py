"""The programs of ``schedule_counts.py``, their arguments, and the measuring harness
shared by every compiler's script.

Only NumPy besides the standard library, so that each compiler's script, running in its
own environment, builds the same arguments: a program name maps to a list of ``(shape,
dtype)`` pairs, ``dtype`` one of ``"float32"`` and ``"bool"`` (the causal mask). The
programs themselves are written once per framework, after these definitions (float32
throughout):

* ``attention``: ``softmax(Q Kᵀ · 0.125) V``, Q, K and V of shape (B·H, S, d);
* ``attention_4d``: the same on (B, H, S, d) inputs;
* ``causal_where``: the scores masked by ``where(mask, s, -1e9)`` before the softmax;
* ``causal_additive``: the scores plus an additive mask (0 or -1e9);
* ``mlp``: ``gelu(x @ W1 + b1) @ W2 + b2`` (GELU in its tanh form);
* ``layernorm``: ``(x - mean) / sqrt(var + 1e-5) * g + b`` over rows;
* ``softmax``: a row softmax;
* ``chain``: six elementwise ops, ``exp(relu(x * 2 + 1) - 0.5) / 3``;
* ``block``: a pre-norm transformer block (layernorm, single-head attention, output
  projection, residual, layernorm, MLP, residual) on a (S, D) sequence.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: attention sizes: batch·heads, sequence, head dim
BH, S, D = 4, 256, 64
#: the transformer block: sequence, model width, MLP width
BLOCK_S, BLOCK_D, BLOCK_H = 256, 64, 256

_F = "float32"
_QKV = [((BH, S, D), _F)] * 3
_BD, _BH = BLOCK_D, BLOCK_H

PROGRAMS: dict[str, list[tuple[tuple[int, ...], str]]] = {
    "attention": _QKV,
    "attention_4d": [((2, BH // 2, S, D), _F)] * 3,
    "causal_where": [*_QKV, ((BH, S, S), "bool")],
    "causal_additive": [*_QKV, ((BH, S, S), _F)],
    "mlp": [((256, 512), _F), ((512, 1024), _F), ((1024,), _F), ((1024, 512), _F),
            ((512,), _F)],
    "layernorm": [((1024, 1024), _F), ((1024,), _F), ((1024,), _F)],
    "softmax": [((4096, 1024), _F)],
    "chain": [((1024, 1024), _F)],
    "block": [((BLOCK_S, _BD), _F), ((_BD,), _F), ((_BD,), _F), ((_BD, _BD), _F),
              ((_BD, _BD), _F), ((_BD, _BD), _F), ((_BD, _BD), _F), ((_BD,), _F),
              ((_BD,), _F), ((_BD, _BH), _F), ((_BH,), _F), ((_BH, _BD), _F), ((_BD,), _F)],
}

#: how each program is described in the tables
TITLES = {
    "attention": f"attention, 3-D (B·H={BH}, S={S}, d={D})",
    "attention_4d": f"attention, 4-D (2×{BH // 2}×{S}×{D})",
    "causal_where": "causal attention, `where` mask",
    "causal_additive": "causal attention, additive mask",
    "mlp": "MLP gelu(x@W1+b1)@W2+b2, 256×512×1024",
    "layernorm": "layernorm 1024² with scale and bias",
    "softmax": "row softmax 4096×1024",
    "chain": "six elementwise ops on 1024²",
    "block": f"pre-norm transformer block (S={BLOCK_S}, D={BLOCK_D}, MLP {BLOCK_H})",
}



def arrays(name: str) -> list[np.ndarray]:
    """Seeded arguments of program ``name``: normal float32 values; the mask of
    ``causal_where`` is causal (keys up to the query's row), the additive mask of
    ``causal_additive`` is 0 there and -1e9 elsewhere."""
    rng = np.random.default_rng(7)
    out = []
    for shape, dtype in PROGRAMS[name]:
        if dtype == "bool":
            out.append(np.broadcast_to(np.tri(shape[-1], dtype=bool), shape).copy())
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    if name == "causal_additive":
        out[-1] = np.where(np.tri(S, dtype=bool), 0.0, -1e9).astype(np.float32)[None] \
            .repeat(BH, 0)
    return out


def transformer_block(layernorm: Callable[..., Any], attention: Callable[..., Any],
                      mlp: Callable[..., Any]) -> Callable[..., Any]:
    """The pre-norm transformer block of the programs (attention and an MLP, each with a
    residual), built from one framework's layernorm, attention and MLP."""
    def block(x: Any, g1: Any, b1: Any, wq: Any, wk: Any, wv: Any, wo: Any, g2: Any,
              b2: Any, w1: Any, c1: Any, w2: Any, c2: Any) -> Any:
        h = layernorm(x, g1, b1)
        r = x + attention(h @ wq, h @ wk, h @ wv) @ wo
        return r + mlp(layernorm(r, g2, b2), w1, c1, w2, c2)
    return block


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call took, and what it returned."""
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def first_and_warm(call: Callable[[], Any], warm_repeats: int = 3) -> dict[str, float]:
    """The first call (compile and run), the median of ``warm_repeats`` later calls,
    and their difference, the compile time."""
    first, _ = timed(call)
    warm = statistics.median(timed(call)[0] for _ in range(warm_repeats))
    return {"first_s": first, "warm_s": warm, "compile_s": max(first - warm, 0.0)}


def child_main(measure: Callable[[str], dict[str, Any]], version: str) -> None:
    """A compiler's script: ``SCRIPT PROGRAM`` prints one JSON object, ``measure``'s
    answer for PROGRAM with the compiler's version; ``SCRIPT --version`` prints the
    version alone. Errors are answered as ``{"error": ...}``, never a traceback."""
    arg = sys.argv[1] if len(sys.argv) > 1 else "--version"
    if arg == "--version":
        print(json.dumps({"version": version}))
        return
    try:
        row = measure(arg)
    except Exception as err:  # reported in the table, the other programs go on
        row = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    print(json.dumps({"program": arg, "version": version, **row}), flush=True)
