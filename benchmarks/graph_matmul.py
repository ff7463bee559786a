"""Graph-level matmul through the interpreter against ``np.matmul``, in one run.

Cases: f32 x f32 and bf16 @accum(f32) inputs, each in exact mode (the default: the
exact product rounded once, bitwise reproducible) and fast mode (BLAS sgemm, labelled
non-bitwise), against ``np.matmul`` in float32 on the same values. BLAS is pinned to
one thread before NumPy is imported. Prints a Markdown table of medians and ratios.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/graph_matmul.py [--size 1024]
"""

from __future__ import annotations

import os

# Must happen before NumPy loads OpenBLAS: one thread, so timings are comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from tessera.interp import run_function  # noqa: E402
from tessera.ir.core import Block, Builder, Function  # noqa: E402
from tessera.ir.dialects import graph as graph_ir  # noqa: E402
from tessera.ir.types import TensorType  # noqa: E402


def matmul_function(n: int, element: str) -> Function:
    """``graph.func @mm(a, b) { return matmul(a, b) }`` on n x n tensors of ``element``."""
    t = TensorType((n, n), element)
    block = Block()
    a, b = block.add_arg(t, "a"), block.add_arg(t, "b")
    builder = Builder(block)
    (c,) = builder.create(graph_ir.MatMul(), [a, b])
    builder.create(graph_ir.Return(), [c])
    return Function("mm", block, [c.type])


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    a32, b32 = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    a16, b16 = (x.astype(ml_dtypes.bfloat16) for x in (a32, b32))
    a16f, b16f = (x.astype(np.float32) for x in (a16, b16))
    f32_fn, bf16_fn = matmul_function(n, "f32"), matmul_function(n, "bf16 @accum(f32)")
    cases: dict[tuple[str, str], Callable[[], object]] = {
        ("f32", "np.matmul"): lambda: np.matmul(a32, b32),
        ("f32", "exact"): lambda: run_function(f32_fn, [a32, b32]),
        ("f32", "fast"): lambda: run_function(f32_fn, [a32, b32], mode="fast"),
        ("bf16 @accum(f32)", "np.matmul"): lambda: np.matmul(a16f, b16f),
        ("bf16 @accum(f32)", "exact"): lambda: run_function(bf16_fn, [a16, b16]),
        ("bf16 @accum(f32)", "fast"): lambda: run_function(bf16_fn, [a16, b16], mode="fast"),
    }
    for fn in cases.values():  # warm up: first touch of memory, BLAS buffers
        fn()
    times: dict[tuple[str, str], list[float]] = {key: [] for key in cases}
    for _ in range(args.repeats):  # interleaved, so load changes hit every case alike
        for key, fn in cases.items():
            times[key].append(timed(fn))
    med = {key: statistics.median(ts) for key, ts in times.items()}
    print(f"graph.matmul {n}x{n}x{n}, median of {args.repeats}, OPENBLAS_NUM_THREADS=1, "
          f"numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores\n")
    print("| inputs | mode | median (ms) | vs np.matmul f32 |")
    print("|---|---|---:|---:|")
    for (inputs, mode), t in med.items():
        ratio = t / med[(inputs, "np.matmul")]
        print(f"| {inputs} | {mode} | {t * 1e3:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
