"""Kernel source -> PTX compile time of the sm_90a GEMM, Tessera against Triton.

Tessera: the ``gemm`` of ``examples/kernels/gemm.py`` (TMA + mbarrier + ``wgmma``
m64nNk16, bf16 in, f32 accumulate) compiled from a fresh ``@ts.kernel`` each
repetition, so nothing is cached: AST front end, Tile IR, lowering, Target IR checks
and PTX rendering. Triton: its matmul tutorial kernel compiled offline for
``GPUTarget("cuda", 90, 32)`` with a fresh cache per repetition, run by
``triton_compile.py`` in the Triton environment (``setup_triton_env.sh``); that column
is skipped with a note when the environment is missing. Both PTX files go through the
same ``ptxas -v -arch=sm_90a`` for registers, shared memory and spills.

Usage: ``python benchmarks/ptx_compile.py [--reps 9] [--json]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRITON_PY = HERE / ".env-triton" / "bin" / "python"
SHAPES = [(128, 128, 64), (64, 128, 64)]  # (BM, BN, BK), Triton's tutorial sizes


def gemm_source() -> Any:
    path = ROOT / "examples" / "kernels" / "gemm.py"
    spec = importlib.util.spec_from_file_location("_bench_gemm", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gemm.fn


def tessera_side(tile: tuple[int, int, int], reps: int) -> dict[str, Any]:
    fn = gemm_source()
    m, n, k = 1024, 1024, 1024
    a, b = np.zeros((m, k), ml_dtypes.bfloat16), np.zeros((k, n), ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    times, compiled = [], None
    for _ in range(reps + 1):  # the first compile warms imports and caches of Python
        start = time.perf_counter()
        compiled = ts.compile_kernel(ts.kernel(fn), a, b, c, tile_shape=tile, target="sm_90a")
        times.append(time.perf_counter() - start)
    assert compiled is not None
    stats = compiled.assemble().stats["gemm"]
    return {"median_s": statistics.median(times[1:]), "min_s": min(times[1:]),
            "first_s": times[0], "stages_s": compiled.seconds, "registers": stats.registers,
            "smem": stats.smem, "spill_stores": stats.spill_stores,
            "spill_loads": stats.spill_loads, "wgmma": "wgmma.mma_async" in compiled.ptx,
            "tma": "cp.async.bulk.tensor" in compiled.ptx}


def triton_side(tile: tuple[int, int, int], reps: int) -> dict[str, Any]:
    if not TRITON_PY.exists():
        return {"error": "no Triton environment (run benchmarks/setup_triton_env.sh)"}
    bm, bn, bk = tile
    cmd = [str(TRITON_PY), str(HERE / "triton_compile.py"), "--json", "--bm", str(bm),
           "--bn", str(bn), "--bk", str(bk), "--reps", str(reps), "--out", "f32", "--tma"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"error": (run.stderr or run.stdout)[-300:]}


def row(tile: tuple[int, int, int], t: dict[str, Any], tr: dict[str, Any]) -> str:
    name = "x".join(map(str, tile))
    ours = (f"{t['median_s'] * 1e3:.1f} ms | {t['registers']} / {t['spill_stores']} | "
            f"{t['smem']}")
    if "error" in tr:
        return f"| {name} | {ours} | skipped: {tr['error']} | — | — | — |"
    compile_s = tr["cold_compile_s"]["median"]
    ptxas = tr["ptxas"]
    smem = tr["triton_metadata"]["shared_bytes"]
    ratio = compile_s / t["median_s"]
    return (f"| {name} | {ours} | {compile_s * 1e3:.0f} ms | {ptxas['registers']} / "
            f"{ptxas['spill_stores_bytes']} | {smem} | {ratio:.0f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for tile in SHAPES:
        results.append((tile, tessera_side(tile, args.reps), triton_side(tile, args.reps)))
    if args.json:
        print(json.dumps([{"tile": t, "tessera": a, "triton": b} for t, a, b in results],
                         indent=1, default=str))
        return
    print("| BMxBNxBK | Tessera source->PTX | Tessera regs / spill bytes | Tessera smem | "
          "Triton source->PTX | Triton regs / spill bytes | Triton smem | Triton / Tessera |")
    print("|---|---|---|---|---|---|---|---|")
    for tile, t, tr in results:
        print(row(tile, t, tr))


if __name__ == "__main__":
    sys.exit(main())
