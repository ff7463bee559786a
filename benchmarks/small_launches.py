"""Small tile-kernel launches, the kind a conformance suite is made of, against NumPy.

Two measures, each in one process with BLAS pinned to one thread:

1. a checked f32 tile GEMM (64x64x32 tiles, ``cp_async`` into shared memory, barriers,
   ``mma`` over K; the kernel of ``tile_kernels.py``) at 128^3, 256^3 and 512^3 against
   ``A @ B`` in float32, and the same in fast mode;
2. a repeated launch of an already-specialised small kernel: a 1024-element vector add
   in one 1024-element tile (checked), the fixed cost of a launch.

Times are medians of interleaved repeats (each variant runs a few untimed launches
first), and the ratios are also given between the best samples of each variant, which
a busy shared machine disturbs least (a preempted sample there costs milliseconds, as
much as a whole small launch); the launch cost is also given as the best of several
batches, for the same reason.

Usage: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/small_launches.py``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import runpy  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# the same kernels as the tile kernel benchmark (its module is a script, so it is run,
# not imported; its main() only runs as __main__)
_KERNELS = runpy.run_path(str(Path(__file__).with_name("tile_kernels.py")),
                          run_name="tile_kernels")
gemm = _KERNELS["gemm"]
vector_add = _KERNELS["vector_add"]
TILE = (64, 64, 32)


def _medians(variants: dict[str, Callable[[], object]],
             repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median and best seconds of each variant over interleaved repeats, after warm-up
    launches."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        for _ in range(3):
            fn()
    for _ in range(repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return ({name: statistics.median(s) for name, s in samples.items()},
            {name: min(s) for name, s in samples.items()})


def gemm_rows(sizes: list[int], repeats: int) -> list[str]:
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.zeros((n, n), np.float32)
        t, best = _medians({
            "checked": lambda a=a, b=b, c=c: gemm(a, b, c, tile_shape=TILE),
            "fast": lambda a=a, b=b, c=c: gemm(a, b, c, tile_shape=TILE, mode="fast"),
            "numpy": lambda a=a, b=b: a @ b,
        }, repeats)
        gemm(a, b, c, tile_shape=TILE)
        err = float(np.max(np.abs(c - (a.astype(np.float64) @ b.astype(np.float64)))))
        rows.append(f"| GEMM {n}³ f32, 64×64×32 | {t['checked'] * 1e3:.2f} | "
                    f"{t['fast'] * 1e3:.2f} | {t['numpy'] * 1e3:.3f} | "
                    f"{t['checked'] / t['numpy']:.1f}× | {t['fast'] / t['numpy']:.1f}× | "
                    f"{best['checked'] / best['numpy']:.1f}× | "
                    f"{best['fast'] / best['numpy']:.1f}× | {err:.1e} |")
    return rows


def launch_cost(batches: int, per_batch: int) -> tuple[float, float]:
    """(median, best) seconds per launch of the specialised 1024-element vector add."""
    x = np.ones(1024, np.float32)
    y = np.ones(1024, np.float32)
    out = np.zeros(1024, np.float32)
    for _ in range(20):
        vector_add(x, y, out, tile_shape=(1024,))
    per = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            vector_add(x, y, out, tile_shape=(1024,))
        per.append((time.perf_counter() - t0) / per_batch)
    assert np.array_equal(out, x + y)
    return statistics.median(per), min(per)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--sizes", type=int, nargs="*", default=[128, 256, 512])
    args = parser.parse_args()
    print("| case | checked (ms) | fast (ms) | A @ B (ms) | checked / NumPy | "
          "fast / NumPy | best checked / best NumPy | best fast / best NumPy | "
          "checked max \\|error\\| vs float64 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in gemm_rows(args.sizes, args.repeats):
        print(row)
    median, best = launch_cost(30, 50)
    print(f"\nRepeated launch of a specialised 1024-element vector add (checked): "
          f"median {median * 1e6:.1f} µs, best batch {best * 1e6:.1f} µs per launch")


if __name__ == "__main__":
    main()
