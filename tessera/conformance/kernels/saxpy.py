"""SAXPY (overview-and-quickstart.md, Example 1): correct as written.

One tile per element (the default grid of a ``linear_id`` kernel covers ``n``); the
guard ``if i < n`` matters when a larger grid is launched.
"""

from __future__ import annotations

import numpy as np

import tessera as ts


@ts.kernel
def saxpy(x: ts.Tensor["n", ts.f32],
          y: ts.Tensor["n", ts.f32],
          alpha: ts.f32) -> ts.Tensor["n", ts.f32]:
    """Simple SAXPY: y = alpha * x + y"""
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
    return y


def main() -> None:
    rng = np.random.default_rng(3)
    for n, grid in [(1000, None), (1000, 1024), (7, 3)]:
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        ref = np.float32(2.5) * x + y
        out = saxpy(x, y, 2.5, grid=grid) if grid is None or grid >= n else None
        if out is None:  # fewer tiles than elements: only the first `grid` are updated
            out = saxpy(x, y, 2.5, grid=grid)
            assert np.array_equal(out[:grid], ref[:grid])
        else:
            assert out is y and np.array_equal(out, ref)
        print(f"saxpy n={n} grid={grid}: ok")


if __name__ == "__main__":
    main()
