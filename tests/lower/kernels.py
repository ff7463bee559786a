"""Small kernels for lowering tests (kernels are compiled from their source file)."""

from __future__ import annotations

import tessera as ts


@ts.kernel
def scale_unguarded(x: ts.Tensor["N", ts.f32]):
    """x[i] *= 3 with no bounds guard: correct only when exactly N tiles run."""
    i = ts.tile.linear_id()
    x[i] = x[i] * 3.0


@ts.kernel
def first_element(x: ts.Tensor["N", ts.f32]) -> ts.f32:
    """A scalar result (tile 0's value) from a launch of several CTAs."""
    return x[ts.tile.linear_id()] * 2.0
