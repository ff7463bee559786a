"""Row softmax: ``BM`` rows per tile, the whole row in registers.

Each tile loads ``BM`` rows of ``x`` (``tile_m`` is its first row), subtracts the row
maximum, exponentiates and divides by the row sum. The numerics are the tile
interpreter's: ``exp`` is the specified f32 exponential of
:mod:`tessera.numerics.transcendental.exp` and ``row_sum`` a pairwise tree in float64,
rounded once, so the result is the same bits on the CPU and in the PTX lowering.
"""

from __future__ import annotations

import numpy as np

import tessera as ts


@ts.kernel
def row_softmax(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32]):
    """``y[r] = softmax(x[r])`` for every row ``r``, ``BM`` rows per tile."""
    t = x[tile_m:tile_m + BM]
    e = ts.tile.exp(t - ts.tile.row_max(t)[:, None])
    y[tile_m:tile_m + BM] = e / ts.tile.row_sum(e)[:, None]


def reference(x: np.ndarray) -> np.ndarray:
    """Softmax of each row in float64."""
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    rng = np.random.default_rng(5)
    for (rows, cols), bm in [((64, 256), 4), ((32, 1024), 1), ((16, 64), 8)]:
        x = (3 * rng.standard_normal((rows, cols))).astype(np.float32)
        y = np.zeros_like(x)
        row_softmax(x, y, tile_shape=(bm,))
        err = np.abs(y - reference(x)).max()
        assert err < 4 * 2.0 ** -24 * cols, err  # a few f32 roundings of values <= 1
        print(f"row_softmax {rows}x{cols} BM={bm}: max error {err:.1e}")


if __name__ == "__main__":
    main()
