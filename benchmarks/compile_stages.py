"""CPU time of each stage from a Python function to PTX, on the programs of
``schedule_counts.py`` (``compilers/common.py``: attention, the GELU MLP, the pre-norm
transformer block...).

Each repetition compiles from a fresh ``ts.jit`` (nothing cached) with
``ts.jit(f).lower(*args).ptx(target=...)``, after one unrecorded compile of the
program: **trace** (Python to Graph IR), **schedule**, **to_tile**, **retile** (the
tile program generated again with the exact matmuls' smaller tiles,
``to_tile.exact_tiles.exact_tiled``; 0 where the package does not time it),
**lower**, **verify** and **render**, summed over the kernels, and the **total**
(process CPU time of the whole compile, which also holds what no stage counts). The
machine is shared, so the stages are timed on the process's CPU clock: the script
points ``time.perf_counter``, which the package times its stages with, at
``time.process_time`` before importing ``tessera``. Prints a Markdown table of medians
(milliseconds), with the kernels' count and PTX lines.

Usage: ``python benchmarks/compile_stages.py [--programs attention,block] [--reps 5]
[--target sm_90a]``; ``revisions.py OLD compile_stages`` compares with an older
revision, alternating (this script is copied into the older tree).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

time.perf_counter = time.process_time  # CPU seconds for every stage the package times

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compilers.common import TITLES  # noqa: E402
from compilers.tessera_side import FUNCTIONS, arguments  # noqa: E402

import tessera as ts  # noqa: E402

STAGES = ("trace", "schedule", "to_tile", "retile", "lower", "verify", "render")
DEFAULT = "attention,attention_4d,causal_additive,mlp,block"


def compile_once(name: str, target: str) -> tuple[dict[str, float], int, int]:
    """CPU seconds by stage of one fresh compile of ``name``, its kernels and PTX lines."""
    fn, args = FUNCTIONS[name], arguments(name)
    t0 = time.process_time()
    lowered = ts.jit(fn).lower(*args)
    seconds = {"trace": time.process_time() - t0}
    seconds |= lowered.tile.seconds
    program = lowered.target(target)
    seconds |= program.seconds
    seconds["retile"] = getattr(program, "retile_seconds", 0.0)
    ptx = lowered.ptx(target=target)
    seconds["total"] = time.process_time() - t0
    return seconds, len(program.kernels), sum(str(v).count("\n") for v in ptx.values())


def measure(name: str, target: str, reps: int) -> dict[str, Any]:
    compile_once(name, target)  # imports and first-use caches
    runs = [compile_once(name, target) for _ in range(reps)]
    medians = {s: 1e3 * statistics.median(r[0].get(s, 0.0) for r in runs)
               for s in (*STAGES, "total")}
    return {"ms": medians, "kernels": runs[0][1], "lines": runs[0][2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=DEFAULT)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--target", default="sm_90a")
    opts = parser.parse_args()
    print(f"Python function -> {opts.target} PTX, CPU ms, median of {opts.reps} fresh "
          "compiles\n")
    print("| program | kernels | PTX lines | " + " | ".join(STAGES) + " | total |")
    print("|---|---:|---:|" + "---:|" * (len(STAGES) + 1))
    for name in opts.programs.split(","):
        r = measure(name, opts.target, opts.reps)
        cells = [f"{r['ms'][s]:.1f}" for s in (*STAGES, "total")]
        print(f"| {TITLES.get(name, name)} | {r['kernels']} | {r['lines']} | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
