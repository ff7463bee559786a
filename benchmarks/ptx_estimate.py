"""Static performance estimates (H100 SXM) of the example GEMM and flash attention.

    .venv/bin/python benchmarks/ptx_estimate.py [--quick] [--verbose] [--triton]
        [--only gemm|attention]

Each kernel is compiled to Target IR exactly as a launch would specialise it, assembled
with ptxas for its register count when ptxas is installed (occupancy), and estimated by
``tessera.backend.ptx.estimate`` (docs/ptx-backend.md, "Static performance estimate").
The numbers are a model's, not measurements; rerun after the lowering changes to see
what the change should buy. ``--quick`` keeps the smaller shapes; ``--triton`` adds
Triton's sm_90a matmul, estimated from a census of its PTX text.
"""

from __future__ import annotations

import argparse
import json
import runpy
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.backend.ptx.estimate import estimate, estimate_census, format_estimate
from tessera.backend.ptx.estimate.ptx_text import ptx_census

ROOT = Path(__file__).resolve().parent.parent
BF16 = ml_dtypes.bfloat16


def example(name: str, fn: str) -> Any:
    return runpy.run_path(str(ROOT / "examples" / "kernels" / f"{name}.py"))[fn]


def registers(compiled: Any) -> int | None:
    """ptxas's register count, or None without ptxas."""
    try:
        return int(compiled.assemble().stats[compiled.name].registers)
    except Exception:
        return None


def gemm_cases(quick: bool) -> list[tuple[str, str, Any, tuple[Any, ...], dict[str, Any]]]:
    gemm = example("gemm", "gemm")
    cases = []
    for n in (4096,) if quick else (4096, 8192):
        a, b = np.zeros((n, n), BF16), np.zeros((n, n), BF16)
        c = np.zeros((n, n), np.float32)
        for target, tile in (("sm_90a", (128, 128, 64)), ("sm_90a", (64, 128, 64)),
                             ("sm_80", (128, 128, 32))):
            cases.append((f"GEMM bf16 {n}^3", target, gemm, (a, b, c),
                          {"tile_shape": tile, "_tile": "x".join(map(str, tile))}))
    return cases


def attention_cases(quick: bool) -> list[tuple[str, str, Any, tuple[Any, ...], dict[str, Any]]]:
    fa = example("flash_attention", "flash_attention")
    cases = []
    for d in (64,) if quick else (64, 128):
        q = np.zeros((16, 2048, d), BF16)
        for causal in (False, True):
            for target in ("sm_90a", "sm_80"):
                config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
                cases.append((f"flash attention BH=16 S=2048 D={d}"
                              + (" causal" if causal else ""), target, fa, (q, q, q),
                              {"is_causal": causal, "config": config, "_tile": "64x64"}))
        for target in ("sm_90a", "sm_80"):  # fast mode: the GPU's ex2.approx, no f64
            config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
            cases.append((f"flash attention BH=16 S=2048 D={d}, mode fast", target, fa,
                          (q, q, q), {"is_causal": False, "config": config, "mode": "fast",
                                      "_tile": "64x64"}))
        # one warpgroup against warp-specialised CTAs of a producer warpgroup and one or
        # two consumers (docs/ptx-backend.md, "Warp-specialised attention"), fast mode
        for causal in (False, True):
            name = f"flash attention BH=16 S=2048 D={d}" + (" causal" if causal else "")
            if causal:
                config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
                cases.append((f"{name}, mode fast", "sm_90a", fa, (q, q, q),
                              {"is_causal": True, "config": config, "mode": "fast",
                               "_tile": "64x64"}))
            for consumers in (1, 2):
                config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4 * (consumers + 1),
                              num_stages=2, warp_specialize=True)
                cases.append((f"{name}, mode fast, warp-specialised", "sm_90a", fa,
                              (q, q, q), {"is_causal": causal, "config": config,
                                          "mode": "fast", "_tile": f"{consumers}x64x64"}))
        for mode in ("checked", "fast"):  # sm_90a's K/V ring of three stages
            config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
            cases.append((f"flash attention BH=16 S=2048 D={d}, 3 stages"
                          + (", mode fast" if mode == "fast" else ""), "sm_90a", fa,
                          (q, q, q), {"is_causal": False, "config": config, "mode": mode,
                                      "_tile": "64x64"}))
    return cases


def run(case: tuple[str, str, Any, tuple[Any, ...], dict[str, Any]],
        verbose: bool) -> dict[str, Any]:
    name, target, kernel, args, launch = case
    launch = dict(launch)
    tile = launch.pop("_tile")
    compiled = ts.compile_kernel(kernel, *args, target=target, **launch)
    unique = sum(a.nbytes for a in args) * (2 if name.startswith("flash") else 1)
    est = estimate(compiled.kernel, registers=registers(compiled), unique_bytes=unique)
    if verbose:
        print(f"[{name}, {target}, tile {tile}]\n{format_estimate(est)}\n")
    return {"kernel": name, "target": target, "tile": tile, "us": est.seconds * 1e6,
            "tflops": est.tflops, "peak": est.percent_of_peak, "bound": est.bound,
            "ctas_per_sm": est.occupancy.ctas, "regs": est.registers or "?", **alone(est)}


def triton_rows(quick: bool, verbose: bool) -> list[dict[str, Any]]:
    """Triton's tensor-descriptor matmul (``triton_compile.py``, compiled offline for
    sm_90a in ``benchmarks/.env-triton``), estimated from a census of its PTX text. Its
    pipelining depth is taken from its ``num_stages`` (copies ``num_stages - 1``
    iterations ahead), which the text census cannot see."""
    python = ROOT / "benchmarks" / ".env-triton" / "bin" / "python"
    if not python.exists():
        print("(no benchmarks/.env-triton: Triton rows left out; "
              "bash benchmarks/setup_triton_env.sh creates it)")
        return []
    rows = []
    for tile in ((128, 128, 64), (64, 128, 64)):
        with tempfile.TemporaryDirectory() as tmp:
            ptx_path = Path(tmp) / "triton.ptx"
            cmd = [str(python), str(ROOT / "benchmarks" / "triton_compile.py"), "--json",
                   "--tma", "--out", "f32", "--reps", "1", "--cache-mode", "fresh-dir",
                   "--bm", str(tile[0]), "--bn", str(tile[1]), "--bk", str(tile[2]),
                   "--emit-ptx", str(ptx_path)]
            info = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                             check=True).stdout)
            if "error" in info:
                print(f"(Triton {tile}: {info['error']})")
                continue
            text = ptx_path.read_text()
        found = ptx_census(text)
        if found.iteration is None:
            continue
        found.iteration.async_waits = [info["config"]["num_stages"] - 1]
        found.iteration.async_commits = 1
        for n in (4096,) if quick else (4096, 8192):
            est = estimate_census(
                f"Triton matmul {n}^3", found.iteration, n // tile[2], found.rest,
                threads=found.threads, ctas=(n // tile[0]) * (n // tile[1]),
                shared=int(info["triton_metadata"]["shared_bytes"]),
                registers=info["ptxas"].get("registers"), unique_bytes=8 * n * n)
            if verbose:
                print(f"[{est.kernel}, tile {tile}]\n{format_estimate(est)}\n")
            rows.append({"kernel": f"GEMM bf16 {n}^3, Triton (PTX text census)",
                         "target": "sm_90a", "tile": "x".join(map(str, tile)),
                         "us": est.seconds * 1e6, "tflops": est.tflops,
                         "peak": est.percent_of_peak, "bound": est.bound,
                         "ctas_per_sm": est.occupancy.ctas, "regs": est.registers or "?",
                         **alone(est)})
    return rows


def alone(est: Any) -> dict[str, Any]:
    """One CTA's cycles per main-loop iteration with the SM to itself, and the copy
    latency it leaves exposed: what pipelining changes even where occupancy hides it."""
    p = est.loop_path
    return {"alone": f"{p.total:.0f}" if p else "-", "exposed": f"{p.exposed:.0f}" if p else "-"}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| kernel | target | tile | regs | CTAs/SM | cycles/iter, 1 CTA | exposed | "
           "est. time (µs) | est. TFLOP/s | % of peak | bound |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['kernel']} | {r['target']} | {r['tile']} | {r['regs']} | "
                   f"{r['ctas_per_sm']} | {r['alone']} | {r['exposed']} | {r['us']:.0f} | "
                   f"{r['tflops']:.0f} | {r['peak']:.1f} | {r['bound']} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller shapes only")
    parser.add_argument("--verbose", action="store_true", help="print every full estimate")
    parser.add_argument("--triton", action="store_true",
                        help="add Triton's offline sm_90a matmul (needs benchmarks/.env-triton)")
    parser.add_argument("--only", choices=("gemm", "attention"),
                        help="one family of kernels")
    args = parser.parse_args()
    cases = [] if args.only == "attention" else gemm_cases(args.quick)
    cases += [] if args.only == "gemm" else attention_cases(args.quick)
    rows = [run(c, args.verbose) for c in cases]
    if args.triton:
        rows += triton_rows(args.quick, args.verbose)
    print(table(rows))


if __name__ == "__main__":
    main()
