"""Graph programs the Schedule → Tile generation is tested on."""

from __future__ import annotations

from typing import Any

import tessera as ts
from tessera import op


def chain(x: Any, y: Any, b: Any) -> Any:
    """Six elementwise ops with a row broadcast and a cast: one kernel."""
    z = op.exp(x * 2.0 - y) + b
    return op.maximum(z, 0.5).astype(ts.bf16)


def row_and_matrix(x: Any, b: Any) -> Any:
    """Two results of one kernel, one of which does not run over the rows."""
    c = op.relu(b * 3.0)
    return c, x * c


def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return op.gelu(x @ w1 + b1) @ w2 + b2


def layernorm(x: Any, g: Any, b: Any) -> Any:
    """Two exact row means, then the elementwise normalisation: one kernel."""
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def mlp_sin(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    """An MLP whose activation has no tile op."""
    return op.sin(x @ w1 + b1) @ w2 + b2


def softmax_rows(x: Any) -> Any:
    return op.softmax(x, axis=-1) * 2.0


def softmax_cos(x: Any) -> Any:
    """cos has no tile op that gives the graph's bits."""
    s = op.softmax(x, axis=-1)
    return op.cos(s)


def linear_relu(x: Any, w: Any, b: Any) -> Any:
    """A matmul with a bias and an activation as its epilogue: one kernel."""
    return op.relu(x @ w + b)


def long_rows(x: Any) -> Any:
    """Means over rows longer than a block: walked in blocks carrying exact sums."""
    return op.mean(x * x, axis=-1) + 1.0
