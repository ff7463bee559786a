"""Compiled int8 matmuls under ``backend="target"``: the seconds to lower a program for
each PTX target and the seconds the Target IR interpreter takes to run it, with a
check that it gives the graph interpreter's bits.

Programs: the int8 MLP ``relu(x@W1+b1)@W2+b2`` (256x512x1024, values over the whole
int8 range, ``benchmarks/compilers/tessera_side.py``), a plain 256x512x256 int8
matmul and a 100x50x70 one (one tile, rounded up past every edge where the tiles are
the tensor cores'). Each program is traced afresh; "lower" is ``.target(t)`` (the tile
program again where the lowering wants other tiles, lowering, checks, PTX text), "run"
one ``run(..., backend="target")`` after it. Whether the PTX holds the integer
tensor-core instruction is printed beside. Run it against an older revision in the same
sitting with ``revisions.py REV int8_matmuls``. BLAS is pinned to one thread.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/int8_matmuls.py [--targets sm_80,sm_90a]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))


def _matmul(x: Any, w: Any) -> Any:
    return x @ w


def programs() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
    """Each program's function and arguments, by row label."""
    from benchmarks.compilers import tessera_side

    rng = np.random.default_rng(11)

    def ints(*shape: int) -> np.ndarray:
        return rng.integers(-128, 128, shape).astype(np.int8)

    mlp = "mlp_relu_int8"
    return {
        "MLP relu(x@W1+b1)@W2+b2, int8, 256×512×1024":
            (tessera_side.FUNCTIONS[mlp], tessera_side.arguments(mlp)),
        "matmul, int8, 256×512×256": (_matmul, [ints(256, 512), ints(512, 256)]),
        "matmul, int8, 100×50×70 (edge tiles)": (_matmul, [ints(100, 50), ints(50, 70)]),
    }


def _bits(out: Any) -> list[bytes]:
    leaves = out if isinstance(out, tuple) else (out,)
    return [np.asarray(t.array).tobytes() for t in leaves]


def measure(fn: Callable[..., Any], args: list[np.ndarray], target: str) -> tuple[
        float, float, bool]:
    """(lower seconds, run seconds, tensor cores in the PTX of every kernel that
    multiplies) of ``fn`` on ``target``."""
    import tessera as ts
    from tessera.ir.core import walk
    from tessera.ir.dialects.tile.compute import Mma

    lowered = ts.jit(fn).lower(*args)
    want = _bits(lowered.run(*args))
    t0 = time.perf_counter()
    program = lowered.target(target)
    t1 = time.perf_counter()
    got = _bits(lowered.run(*args, backend="target", target=target))
    t2 = time.perf_counter()
    if got != want:
        raise AssertionError(f"{target}: the Target IR interpreter differs from the graph's")
    # (split-K's combine adds the slices' partial sums: it has no products)
    cores = all(".s32.s8.s8" in k.ptx for k in program.kernels
                if any(isinstance(i.op, Mma) for i in walk(k.compiled.tile.body)))
    return t1 - t0, t2 - t1, cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="sm_80,sm_90a")
    opts = parser.parse_args()
    print("| program | target | lower (s) | run (s) | tensor cores |")
    print("| --- | --- | ---: | ---: | --- |")
    for label, (fn, args) in programs().items():
        for target in opts.targets.split(","):
            lower, run, cores = measure(fn, args, target)
            print(f"| {label} | {target} | {lower:.2f} | {run:.2f} | "
                  f"{'yes' if cores else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
