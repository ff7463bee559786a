"""The Target IR interpreter's speed, against an older revision in the same run.

Times ``run_target`` (the interpreter alone: lowering, argument conversion and the
tile simulator's reference are not counted) on the lowered bf16 GEMM of
``tessera/conformance/kernels/gemm.py`` (128x128x64 tiles; 256^3, 512^3 and 1024^3,
sm_90a and sm_80), the flash attention example, SAXPY, and one third-party PTX
kernel (nvcc's ``reduce_tree`` from ``tests/ir/text/ptx/ptx_corpus/``, run through
``ts.ptx``). Each case runs in a fresh process per side, the older revision's first,
alternating case by case (the machine's load drifts); the older revision runs this
script against its own package from a temporary ``git worktree``
(:mod:`revisions`). BLAS is pinned to one thread. Every run checks its result.

Usage::

    .venv/bin/python benchmarks/target_interp.py [--before 1783cf2] [--rounds 1]
        [-k SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = "tests/ir/text/ptx/ptx_corpus/kernels_sm80.ptx"


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _timed(module: Any, name: str, spent: list[tuple[float, float]]) -> None:
    """Make every call of ``module.name`` add its (wall, CPU) seconds to ``spent``."""
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = _clock()
        try:
            return inner(*args, **kwargs)
        finally:
            now = _clock()
            spent.append((now[0] - wall, now[1] - cpu))
    setattr(module, name, timed)


def _gemm(n: int, target: str) -> Callable[[], None]:
    import ml_dtypes

    import tessera as ts
    from tessera.conformance.kernels import gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float32) @ b.astype(np.float32)

    def run() -> None:
        c = np.zeros((n, n), np.float32)
        ts.launch(gemm.gemm, None, (a, b, c), backend="target", target=target,
                  tile_shape=(128, 128, 64))
        assert np.allclose(c, want, rtol=1e-3, atol=1e-3)
    return run


def _flash(target: str) -> Callable[[], None]:
    import ml_dtypes

    import tessera as ts
    from tessera.conformance.kernels import flash_attention as fa

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 256, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)

    def run() -> None:
        ts.check_against_reference(fa.flash_attention, q, k, v, is_causal=True,
                                   backend="target", target=target, config=config)
    return run


def _saxpy(n: int) -> Callable[[], None]:
    import tessera as ts
    from tessera.conformance.kernels import saxpy

    rng = np.random.default_rng(2)
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)

    def run() -> None:
        y = y0.copy()
        ts.launch(saxpy.saxpy, None, (x, y, 2.5), backend="target", target="sm_90a")
        assert np.array_equal(y, np.float32(2.5) * x + y0)
    return run


def _ptx_reduce(n: int) -> Callable[[], None]:
    import tessera as ts

    kernel = ts.ptx.load(ROOT / CORPUS).kernel("reduce_tree")
    _timed(kernel, "run", SPENT)  # this interpreter's entry is the kernel's run
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    grid = n // 256

    def run() -> None:
        out = np.zeros(grid, np.float32)
        kernel.run(grid=grid, block=256, args=[x, out, np.int32(n)])
        assert np.allclose(out, x.reshape(grid, 256).sum(axis=1, dtype=np.float64),
                           rtol=1e-4, atol=1e-4)
    return run


CASES: dict[str, Callable[[], Callable[[], None]]] = {
    **{f"gemm bf16 {n}^3 {t}": (lambda n=n, t=t: _gemm(n, t))
       for t in ("sm_90a", "sm_80") for n in (256, 512, 1024)},
    "flash attention 2x256x64 causal sm_90a": lambda: _flash("sm_90a"),
    "flash attention 2x256x64 causal sm_80": lambda: _flash("sm_80"),
    "saxpy 2^18 sm_90a": lambda: _saxpy(1 << 18),
    "ptx corpus reduce_tree 2^18 (nvcc, sm_80)": lambda: _ptx_reduce(1 << 18),
}


#: (wall, CPU) seconds of each interpreter call of the case being measured
SPENT: list[tuple[float, float]] = []


def measure(case: str) -> tuple[float, float]:
    """(wall, CPU) seconds the interpreter spends in one run of ``case``."""
    import tessera.interp.target.runner as runner

    _timed(runner, "run_target", SPENT)
    run = CASES[case]()
    run()
    return sum(w for w, _ in SPENT), sum(c for _, c in SPENT)


def _side(tree: Path, case: str, env: dict[str, str]) -> tuple[float, float] | str:
    """Run ``case`` with ``tree``'s package in a fresh process: (wall, CPU) seconds,
    or the error."""
    script = tree / "benchmarks" / "target_interp.py"
    if not script.exists():  # the older revision has no copy of this script
        script.write_text(Path(__file__).read_text())
    done = subprocess.run([sys.executable, str(script), "--measure", case], cwd=script.parent,
                          env=dict(env, PYTHONPATH=str(tree)), capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            wall, cpu = json.loads(line)["seconds"]
            return float(wall), float(cpu)
    return f"failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"


def main(argv: list[str] | None = None) -> int:
    """Measure one case (``--measure``) or compare every selected case across revisions."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="1783cf2", help="the older revision")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("-k", dest="pattern", default="", help="only cases containing this")
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.measure:
        print(json.dumps({"case": opts.measure, "seconds": measure(opts.measure)}))
        return 0
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", TESSERA_PROGRESS="0")
    cases = [c for c in CASES if opts.pattern in c]
    print(f"| case | {opts.before} wall (s) | wall (s) | {opts.before} CPU (s) | CPU (s) "
          "| speed-up (CPU) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="tessera-before-") as tmp:
        old = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(old), opts.before], check=True)
        try:
            for case in cases:
                for _ in range(opts.rounds):
                    before, after = _side(old, case, env), _side(ROOT, case, env)
                    if isinstance(before, str) or isinstance(after, str):
                        print(f"| {case} | {before} | {after} | | | |", flush=True)
                        continue
                    print(f"| {case} | {before[0]:.3f} | {after[0]:.3f} | {before[1]:.3f} | "
                          f"{after[1]:.3f} | {before[1] / after[1]:.1f}x |", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
