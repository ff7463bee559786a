"""Reductions over long rows: sums, means, mean squared errors and norms whose rows
one program does not hold, walked in blocks with exact accumulators (the ``blocked``
strategy), against the graph interpreter in the same run.

For each program: the schedule's strategy and launches; the graph interpreter and the
tile simulator (checked mode, every sanitizer on), medians of ``--repeats`` calls, with
a check that the bits are the same; the PTX of every kernel for ``--target`` (bytes, ms
from the Python function), and ptxas on it (seconds, spilled bytes). ``revisions.py``
runs this script against an older revision (which held these rows whole in one
program) beside the current tree. BLAS is pinned to one thread.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/long_reductions.py \\
        [--cases sum,mse] [--repeats 3] [--target sm_80] [--no-ptxas]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import tessera as ts
from tessera import op


def _layernorm(x: Any, g: Any) -> Any:
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g


def _inputs(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


#: name -> (function, label, argument shapes)
CASES: dict[str, tuple[Callable[..., Any], str, list[tuple[int, ...]]]] = {
    "sum": (lambda x: op.sum(x), "sum of 256 × 256", [(256, 256)]),
    "mse": (lambda x, y: op.mse(x, y), "mse of 256 × 256", [(256, 256), (256, 256)]),
    "mse_small": (lambda x, y: op.mse(x, y), "mse of 64 × 64", [(64, 64), (64, 64)]),
    "mean_rows": (lambda x: op.mean(x * x, axis=-1), "mean of x² over rows of 2^17",
                  [(4, 1 << 17)]),
    "layernorm": (_layernorm, "layernorm over rows of 2^15", [(4, 1 << 15), (1 << 15,)]),
}


def _median(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _bits(out: Any) -> bytes:
    return b"".join(np.asarray(t.array).tobytes()
                    for t in (out if isinstance(out, tuple) else (out,)))


def measure(name: str, repeats: int, target: str, ptxas: bool) -> dict[str, Any]:
    """One row of the table."""
    fn, label, shapes = CASES[name]
    args = _inputs(*shapes)
    lowered = ts.jit(fn).lower(*args)
    schedule = lowered.ir("schedule")
    row: dict[str, Any] = {
        "program": label, "launches": len(lowered.kernels),
        "strategy": ",".join(sorted({line.split('reduction = "')[1].split('"')[0]
                                     for line in schedule.splitlines()
                                     if 'reduction = "' in line})),
        "interp_ms": 1e3 * _median(lambda: lowered.run(*args), repeats),
        "tile_ms": 1e3 * _median(lambda: lowered.run(*args, backend="tile"), repeats),
        "bitwise": _bits(lowered.run(*args)) == _bits(lowered.run(*args, backend="tile")),
    }
    t = time.perf_counter()
    try:
        text = lowered.ptx(target=target)
    except ts.TesseraError as err:
        row["ptx"] = f"refused: {str(err).splitlines()[0][:60]}"
        return row
    row["ptx_ms"] = 1e3 * (time.perf_counter() - t)
    row["ptx_kb"] = sum(len(v) for v in text.values()) / 1024
    if ptxas:
        t = time.perf_counter()
        spills = 0
        for kernel in lowered.target(target).kernels:
            stats = kernel.assemble().stats[kernel.name]
            spills += stats.spill_stores + stats.spill_loads
        row["ptxas_s"] = time.perf_counter() - t
        row["spill_bytes"] = spills
    return row


def main(argv: list[str] | None = None) -> int:
    """Print the table for the selected cases."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--target", default="sm_80")
    p.add_argument("--no-ptxas", action="store_true")
    opts = p.parse_args(argv)
    print("| program | strategy | launches | interp (ms) | tile checked (ms) | tile / interp "
          f"| bitwise | PTX {opts.target} (KB) | to PTX (ms) | ptxas (s) | spilled bytes |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for name in opts.cases.split(","):
        r = measure(name, opts.repeats, opts.target, not opts.no_ptxas)
        ratio = r["tile_ms"] / r["interp_ms"]
        ptx = r.get("ptx") or f"{r['ptx_kb']:.0f} | {r['ptx_ms']:.0f}"
        ptx += f" | {r['ptxas_s']:.1f} | {r['spill_bytes']}" if "ptxas_s" in r else \
            (" | — | —" if "ptx" not in r else " | — | — | —")
        print(f"| {r['program']} | {r['strategy']} | {r['launches']} | {r['interp_ms']:.1f} | "
              f"{r['tile_ms']:.1f} | {ratio:.2f}× | {'yes' if r['bitwise'] else 'NO'} | {ptx} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
