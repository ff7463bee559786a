"""Functions the explain tests make pages of (a file of their own: the tests find
their source lines by reading it)."""


from __future__ import annotations

import numpy as np

import tessera as ts

NOT_A_FUNCTION = 42


@ts.kernel
def saxpy(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32], alpha: ts.f32):
    i = ts.tile.linear_id()
    y[i] = alpha * x[i] + y[i]  # the linked line


def scaled_sum(a: ts.Tensor[4, 8, ts.f32], b: ts.Tensor[4, 8, ts.f32]):
    c = a * 2.0 + b
    return ts.sum(c, axis=1)


def saxpy_arguments(n: int = 16, group_size: int = 4) -> dict[str, object]:
    """Arguments of a saxpy launch of ``n // group_size`` groups."""
    x = np.arange(n, dtype=np.float32)
    return {"x": x, "y": np.ones(n, np.float32), "alpha": np.float32(2.0),
            "grid": n // group_size, "group_size": group_size}


def line_of(marker: str) -> int:
    """The line of this file that contains ``marker``."""
    with open(__file__) as f:
        return next(k for k, line in enumerate(f, 1) if marker in line)
