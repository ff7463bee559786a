"""``tile_example`` (programming-model-guide.md, "Basic Tile Operations"): correct as
written. Each tile doubles one element with a read-modify-write (``*=``)."""

from __future__ import annotations

import numpy as np

import tessera as ts


@ts.kernel
def tile_example(data: ts.Tensor["N", ts.f32]):
    # Get tile identification
    tile_id = ts.tile.linear_id()
    group_id = ts.tile.group_id()
    lane_id = ts.tile.lane_id()

    # Tile-level operations
    if tile_id < N:
        # Each tile processes one element
        data[tile_id] *= 2.0


def main() -> None:
    data = np.arange(100, dtype=np.float32)
    tile_example(data)  # default grid: one tile per element
    assert np.array_equal(data, 2 * np.arange(100, dtype=np.float32))
    tile_example(data, grid=13, group_size=8)  # 104 tiles, the last 4 do nothing
    assert np.array_equal(data, 4 * np.arange(100, dtype=np.float32))
    print("tile_example: ok")


if __name__ == "__main__":
    main()
