"""Python function -> PTX compile time of graph functions, stage by stage.

Each repetition compiles from a fresh ``ts.jit`` (nothing cached): **trace** (Python to
Graph IR, with the graph pipeline's passes), **schedule** (Graph → Schedule IR),
**to_tile** (the generated ``tile.kernel`` functions and host program), **lower**
(Tile → Target IR), **verify** (the Target IR checks) and **render** (PTX text). Cases:

* an elementwise chain of eight ops over a 1024 × 1024 f32 tensor and a row vector
  (one kernel), to PTX;
* the MLPs ``relu(x @ W1 + b1) @ W2 + b2`` on fp8_e4m3 and ``gelu(x @ W1 + b1) @ W2 +
  b2`` on f32, as far as they get (the ``reached`` column names the stage, or the
  refusal that stopped it; both reach PTX, the fp8 one through the exact ``mma``).

Prints a Markdown table of medians (milliseconds). Usage:
``python benchmarks/compile_graph.py [--reps 9] [--target sm_90a] [--json]``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import tessera as ts  # noqa: E402
from tessera import op  # noqa: E402

STAGES = ("trace", "schedule", "to_tile", "lower", "verify", "render")


def chain(x, b):  # type: ignore[no-untyped-def]
    z = op.relu(x * 1.5 - b) + op.maximum(x, b) / (op.abs(x) + 1.0)
    return op.sqrt(op.abs(z)) * 0.25 - op.minimum(z, b)


def mlp_relu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1 + b1) @ w2 + b2


def mlp_gelu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w1 + b1) @ w2 + b2


def _mlp_args(fmt: Any, np_dtype: Any = None) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [(256, 512), (512, 1024), (1024,), (1024, 512), (512,)]
    if np_dtype is not None:
        return [rng.standard_normal(s).astype(np_dtype) for s in shapes]
    return [ts.Tensor(rng.standard_normal(s), fmt).array for s in shapes]


def compile_once(fn: Callable[..., Any], args: list[Any], target: str) -> tuple[dict[str, float],
                                                                                str]:
    """One compile from a fresh ``ts.jit``: seconds per stage reached, and how far it got."""
    t0 = time.perf_counter()
    lowered = ts.jit(fn).lower(*args)
    seconds = {"trace": time.perf_counter() - t0}
    try:
        lowered.tile  # noqa: B018  (schedules and generates)
    except ts.UnsupportedError as err:
        return seconds | _schedule_only(lowered), f"Schedule IR ({err.message[:60]}...)"
    seconds |= lowered.tile.seconds
    try:
        seconds |= lowered.target(target).seconds
    except ts.UnsupportedError as err:
        return seconds, f"Tile IR ({err.message[:60]}...)"
    return seconds, f"PTX, {len(lowered.kernels)} kernel(s)"


def _schedule_only(lowered: Any) -> dict[str, float]:
    from tessera.ir.transforms.schedule import schedule_module

    t0 = time.perf_counter()
    schedule_module(lowered.compiled.module)
    return {"schedule": time.perf_counter() - t0}


def measure(fn: Callable[..., Any], args: list[Any], target: str, reps: int) -> dict[str, Any]:
    runs, reached = [], ""
    for _ in range(reps + 1):  # the first warms Python's imports and caches
        seconds, reached = compile_once(fn, args, target)
        runs.append(seconds)
    runs = runs[1:]
    medians = {s: statistics.median(r[s] for r in runs) for s in STAGES if s in runs[0]}
    totals = [sum(r.values()) for r in runs]
    return {"stages_ms": {s: 1e3 * v for s, v in medians.items()},
            "total_ms": 1e3 * statistics.median(totals), "reached": reached}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--target", default="sm_90a")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    rng = np.random.default_rng(1)
    cases = {
        "elementwise chain 1024×1024 f32": (
            chain, [rng.standard_normal((1024, 1024)).astype(np.float32),
                    rng.standard_normal(1024).astype(np.float32)]),
        "MLP relu fp8_e4m3 256×512×1024×512": (mlp_relu, _mlp_args(ts.fp8_e4m3)),
        "MLP gelu f32 256×512×1024×512": (mlp_gelu, _mlp_args(None, np.float32)),
    }
    results = {name: measure(fn, args, opts.target, opts.reps)
               for name, (fn, args) in cases.items()}
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print(f"Graph function -> {opts.target} compile time, median of {opts.reps} fresh "
          "compiles (ms)\n")
    print("| case | " + " | ".join(STAGES) + " | total | reached |")
    print("|---|" + "---:|" * (len(STAGES) + 1) + "---|")
    for name, r in results.items():
        cells = [f"{r['stages_ms'][s]:.2f}" if s in r["stages_ms"] else "—" for s in STAGES]
        print(f"| {name} | " + " | ".join(cells) + f" | {r['total_ms']:.2f} | {r['reached']} |")


if __name__ == "__main__":
    main()
