"""Mesh simulator benchmarks: a rack-sized all-reduce and distributing weight matrices.

1. all-reduce of 72 devices x 64 MB float32 in one process (``dist.all_reduce`` of a
   partial tensor over the whole NVL72 mesh), against two NumPy anchors measured in the
   same run: ``functools.reduce(np.add, shards)`` and an in-place sequential loop into
   one result. All three must give the same bits.
2. distributing an 8192x8192 and an 8192x1152 float32 matrix over a (dp=4, tp=9, pp=2)
   mesh and touching all 72 shards, against an anchor that gives every device a private
   copy of its shard (what a simulator without shared views must do).

Medians of interleaved repeats. Usage:
``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/mesh_collectives.py [--mb 64]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tessera import dist

MESH = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call takes, and its result."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def in_place(shards: list[np.ndarray]) -> np.ndarray:
    """The anchor of FACTS.md: a sequential reduce into one result array."""
    acc = shards[0].copy()
    for s in shards[1:]:
        np.add(acc, s, out=acc)
    return acc


def bench_all_reduce(mb: int, repeats: int) -> list[tuple[str, float, str]]:
    n = mb * (1 << 20) // 4
    base = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    shards = [base * np.float32(1.0 + i / 72.0) for i in range(72)]  # distinct data
    t = dist.from_shards(shards, mesh=MESH, partial=("dp", "tp", "pp"))
    runs: dict[str, list[float]] = {"dist": [], "reduce": [], "inplace": []}
    results: dict[str, np.ndarray] = {}
    for _ in range(repeats):
        for name, fn in (("dist", lambda: dist.all_reduce(t, ("dp", "tp", "pp")).shard(0)),
                         ("reduce", lambda: functools.reduce(np.add, shards)),
                         ("inplace", lambda: in_place(shards))):
            sec, results[name] = timed(fn)
            runs[name].append(sec)
    same = all(results[k].tobytes() == results["reduce"].tobytes() for k in results)
    assert same, "the all-reduce bits differ from functools.reduce"
    med = {k: statistics.median(v) for k, v in runs.items()}
    label = f"all-reduce 72 x {mb} MB f32"
    return [(f"{label}: dist.all_reduce", med["dist"], "bitwise = reduce"),
            (f"{label}: functools.reduce(np.add)", med["reduce"],
             f"{med['reduce'] / med['dist']:.2f}x the dist time"),
            (f"{label}: in-place np.add loop", med["inplace"],
             f"{med['inplace'] / med['dist']:.2f}x the dist time")]


def distribute(arrays: list[tuple[np.ndarray, dist.ShardSpec]], **kw: Any) -> int:
    """Distribute every array and touch each device's shard; return the bytes touched."""
    total = 0
    for a, spec in arrays:
        t = dist.from_numpy(a, mesh=MESH, layout=spec, **kw)
        total += sum(s.nbytes for s in t.shards)
    return total


def private_copies(arrays: list[tuple[np.ndarray, dist.ShardSpec]]) -> int:
    """The anchor: each of the 72 devices gets its own contiguous copy of its shard."""
    total = 0
    for a, spec in arrays:
        for sl in dist.shard_slices(a.shape, spec, MESH):
            total += np.ascontiguousarray(a[sl]).nbytes
    return total


def bench_distribute(repeats: int) -> list[tuple[str, float, str]]:
    rng = np.random.default_rng(1)
    arrays = [(rng.standard_normal((8192, 8192), dtype=np.float32),
               dist.ShardSpec(partition=("row", "col"), mesh_axes=("dp", "tp"))),
              (rng.standard_normal((8192, 1152), dtype=np.float32),
               dist.ShardSpec(partition=("col",), mesh_axes=("tp",)))]
    as_f64 = [(a.astype(np.float64), s) for a, s in arrays]
    cases = {"views": lambda: distribute(arrays),
             "copy": lambda: distribute(arrays, copy=True),
             "f64": lambda: distribute(as_f64, dtype="f32"),
             "private": lambda: private_copies(arrays)}
    runs: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            runs[name].append(timed(fn)[0])
    med = {k: statistics.median(v) for k, v in runs.items()}
    label = "distribute 8192² + 8192x1152 f32 over (4, 9, 2)"
    return [(f"{label}: from_numpy (shards are views)", med["views"], "all 72 shards touched"),
            (f"{label}: from_numpy(copy=True)", med["copy"], "one global copy"),
            (f"{label}: from f64 data, dtype=f32", med["f64"], "one conversion"),
            (f"{label}: anchor, 72 private shard copies", med["private"],
             f"{med['private'] / med['views']:.0f}x the view time")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=64, help="MB per device for all-reduce")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = bench_all_reduce(args.mb, args.repeats) + bench_distribute(args.repeats)
    print(f"| case (median of {args.repeats}) | seconds | note |")
    print("| --- | ---: | --- |")
    for name, sec, note in rows:
        print(f"| {name} | {sec:.3f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
