"""``process_chunks`` (programming-model-guide.md, "Tile Ranges and Iteration"), corrected.

As written the seed calls an undefined ``process`` (a compile error naming it and its
line) and every tile walks every chunk. Here ``process`` is a plain function (compiled into
the kernel), each group takes one chunk and its tiles stride through it.
"""

from __future__ import annotations

import numpy as np

import tessera as ts


def process(x):
    """The per-element work: any kernel code, inlined where it is called."""
    return x * x + 1.0


@ts.kernel
def process_chunks(input: ts.Tensor["N", ts.f32],
                   output: ts.Tensor["N", ts.f32]):
    CHUNK_SIZE = 128
    chunk_start = ts.tile.group_id() * CHUNK_SIZE
    chunk_end = min(chunk_start + CHUNK_SIZE, N)
    # Cooperative processing within the tile group
    for i in ts.tile.range(chunk_start + ts.tile.local_id(), chunk_end, ts.tile.group_size()):
        output[i] = process(input[i])


def main() -> None:
    rng = np.random.default_rng(4)
    for n in (1000, 128, 77):
        x = rng.standard_normal(n).astype(np.float32)
        out = np.zeros_like(x)
        process_chunks(x, out, grid=(n + 127) // 128, group_size=4)
        assert np.array_equal(out, x * x + np.float32(1.0))
        print(f"process_chunks n={n}: ok")


if __name__ == "__main__":
    main()
