"""A sharded graph matmul on the NVL72 mesh, against NumPy and the one-device graph.

``Y = A @ B`` with A 8192x8192 and B 8192x1152 float32 on (dp=4, tp=9, pp=2), run as a
``@ts.jit`` graph program on DistTensors (sharding propagation, then the SPMD executor):

1. distributing A (rows over dp) and B (columns over tp) over the 72 devices and
   touching every shard;
2. fast mode (BLAS per block; 4 x 9 distinct blocks of 2048x8192 @ 8192x128, the pp
   replicas share them) against ``np.matmul(A, B)`` in the same run;
3. exact mode against the exact graph matmul of the same product on one device; the
   bits must be equal (asserted);
4. the contraction split instead (A columns and B rows over tp): the product is partial
   over tp and the inserted all_reduce adds the nine summands in rank order (fast), or
   completes the exact sum (exact, asserted equal to one device).

Medians of interleaved repeats. Usage:
``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/mesh_matmul.py [--repeats 5]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tessera as ts
from tessera import dist

MESH = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))
ROWS_COLS = (dist.ShardSpec(("row",), ("dp",)), dist.ShardSpec(("col",), ("tp",)))
CONTRACTION = (dist.ShardSpec(("col",), ("tp",)), dist.ShardSpec(("row",), ("tp",)))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def distribute(a: np.ndarray, b: np.ndarray, specs: tuple[Any, Any]) -> list[Any]:
    """Both operands on the mesh, every device's shard touched once."""
    out = [dist.from_numpy(x, mesh=MESH, layout=s) for x, s in zip((a, b), specs)]
    for t in out:
        for shard in t.shards:
            shard.reshape(-1)[:1].copy()
    return out


def medians(cases: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float],
                                                                        dict[str, Any]]:
    runs: dict[str, list[float]] = {k: [] for k in cases}
    last: dict[str, Any] = {}
    for _ in range(repeats):
        for name, fn in cases.items():
            sec, last[name] = timed(fn)
            runs[name].append(sec)
    return {k: statistics.median(v) for k, v in runs.items()}, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the fast cases")
    parser.add_argument("--exact-repeats", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8192, 8192), dtype=np.float32)
    b = rng.standard_normal((8192, 1152), dtype=np.float32)
    fast = ts.jit(lambda x, y: x @ y, mode="fast")
    exact = ts.jit(lambda x, y: x @ y)
    med, got = medians({"distribute": lambda: distribute(a, b, ROWS_COLS)}, args.repeats)
    A, B = got["distribute"]
    Ak, Bk = distribute(a, b, CONTRACTION)
    med2, out = medians({"np": lambda: np.matmul(a, b), "fast": lambda: fast(A, B),
                         "fast_k": lambda: fast(Ak, Bk)}, args.repeats)
    med.update(med2)
    err = np.max(np.abs(np.asarray(out["fast"]) - out["np"])) / np.max(np.abs(out["np"]))
    med3, ex = medians({"one": lambda: exact(a, b), "exact": lambda: exact(A, B),
                        "exact_k": lambda: exact(Ak, Bk)}, args.exact_repeats)
    med.update(med3)
    one = np.asarray(ex["one"])
    assert np.asarray(ex["exact"]).tobytes() == one.tobytes(), "exact bits differ"
    assert np.asarray(ex["exact_k"]).tobytes() == one.tobytes(), "exact bits differ (K)"
    print(f"Medians of {args.repeats} interleaved repeats (fast cases) and "
          f"{args.exact_repeats} (exact cases).\n")
    print("| case | median (s) | vs anchor | note |")
    print("| --- | ---: | ---: | --- |")
    rows = [
        ("distribute A (rows/dp) and B (cols/tp) over 72 devices", "distribute", None,
         "shards are views; goal <= 2 s"),
        ("np.matmul(A, B) f32", "np", "np", "anchor"),
        ("jit fast, A rows/dp x B cols/tp", "fast", "np",
         f"36 blocks, pp replicas shared; rel. err {err:.1e}; goal <= 1.3x"),
        ("jit fast, contraction over tp + all_reduce", "fast_k", "np",
         "9 summands added in rank order"),
        ("exact graph matmul on one device", "one", "one", "anchor"),
        ("jit exact, A rows/dp x B cols/tp", "exact", "one", "bitwise = one device"),
        ("jit exact, contraction over tp + all_reduce", "exact_k", "one",
         "bitwise = one device"),
    ]
    for label, key, anchor, note in rows:
        ratio = f"{med[key] / med[anchor]:.2f}x" if anchor else ""
        print(f"| {label} | {med[key]:.3f} | {ratio} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
