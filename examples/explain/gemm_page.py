"""The explain page of the tensor-core GEMM (the quick-start's Example 2, corrected).

Writes build/explain/gemm.html (or the path given): the kernel's source, Tile IR,
Target IR and PTX linked line by line, the tile map of a 128x128x64 launch with
64x64x32 tiles (each group owns one 64x64 block of C and reads a row block of A and a
column block of B, one K slice per barrier phase), ptxas's statistics and the static
estimate.

Run: ``python examples/explain/gemm_page.py [out.html]``
"""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

from tessera.conformance.kernels.gemm import gemm
from tessera.explain import write_page


def main(out: str = "build/explain/gemm.html") -> Path:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    return write_page(gemm, out, A=a, B=b, C=c, tile_shape=(64, 64, 32))


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
