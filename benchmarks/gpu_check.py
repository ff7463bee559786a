"""Tessera's PTX on a GPU: the example GEMM and flash attention against cuBLAS, SDPA
and Triton (run by ``make gpu-check`` with the GPU machine's python3).

Each kernel is compiled from its example (``examples/kernels``), assembled for the GPU
and timed with CUDA events around each launch (median of 20 after 3 warm-ups); then the
anchors run the same problem in the same process: ``torch.matmul`` on bf16 (cuBLAS),
``scaled_dot_product_attention`` (its flash backend), the Triton matmul of
``benchmarks/triton_compile.py`` (128x128x64 tiles, 3 stages, 8 warps) and the Triton
attention of ``benchmarks/triton_attention.py``. Tessera's output is checked against a
float64 product on the GPU within the kernel's accumulation bound. Each configuration
runs in its own process under a time limit, so a kernel that hangs or faults the GPU
context costs only its own row. ``--dry`` compiles and assembles every configuration on
the CPU only (no GPU, no torch): a configuration that fails there would fail on the
device.

    python benchmarks/gpu_check.py [--dry] [--only gemm|attention] [--json PATH]
                                   [--markdown PATH] [--limit S] [--start N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tessera.frontend.kernel.backends.compile import (  # noqa: E402
    compile_kernel,
    launch_result,
    target_arguments,
)
from tessera.frontend.kernel.backends.launch import on_device  # noqa: E402

BF16 = ml_dtypes.bfloat16
GEMMS = [  # (target, M=N=K, tile, launch configuration), the most telling first
    ("sm_90a", 8192, (128, 128, 64), {}),
    # persistent CTAs (one an SM, each walking its tiles) beside one CTA a tile
    ("sm_90a", 4096, (128, 128, 64), {"persistent": True}),
    ("sm_90a", 8192, (128, 128, 64), {"persistent": True}),
    # the CTAs in C order, as before grouped order (bands of 8 tile rows) was the default
    ("sm_90a", 8192, (128, 128, 64), {"group_m": 1}),
    # two consumer warpgroups taking turns at named barriers (FlashAttention-3 sec. 3.1)
    ("sm_90a", 8192, (128, 128, 64), {"schedule": "pingpong"}),
    ("sm_90a", 8192, (128, 256, 64), {}),
    ("sm_90a", 8192, (256, 128, 64), {"schedule": "pingpong"}),
    ("sm_90a", 4096, (128, 128, 64), {}), ("sm_90a", 8192, (256, 128, 64), {}),
    ("sm_90a", 8192, (128, 128, 64), {"num_warps": 12}),
    ("sm_80", 4096, (128, 128, 32), {}),
    ("sm_90a", 8192, (128, 128, 64), {"tma_store": False}),
    ("sm_90a", 8192, (128, 256, 64), {"tma_store": False}),
    ("sm_90a", 4096, (128, 256, 64), {}), ("sm_90a", 4096, (64, 128, 64), {}),
]
ATTENTIONS = [  # (target, B*H, S, D, block, causal, mode[, launch configuration])
    # FlashAttention-3's order (S_m and P_{m-1} V_{m-1} issued together, the softmax of
    # S_m beside the product) against the overlapped order (S_{m+1} ahead), side by side:
    # 2 consumer warpgroups of 64 query rows, P of a 64x128 block in registers
    ("sm_90a", 16, 4096, 128, 64, False, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "defer_pv": "fa3"}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "BLOCK_N": 128}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "schedule": "pingpong", "defer_pv": "fa3"}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 64, 64, False, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "defer_pv": "fa3"}),
    ("sm_90a", 16, 4096, 64, 64, False, "fast", {"num_warps": 12, "BLOCK_N": 128}),
    # causal: the query tiles read different numbers of key blocks
    ("sm_90a", 16, 4096, 128, 64, True, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "defer_pv": "fa3"}),
    ("sm_90a", 16, 4096, 128, 64, True, "fast", {"num_warps": 12, "BLOCK_N": 128}),
    ("sm_90a", 16, 4096, 64, 64, False, "fast",
     {"num_warps": 12, "BLOCK_N": 128, "schedule": "pingpong", "defer_pv": "fa3"}),
    # 64x64 blocks: FlashAttention-3's order, two blocks an iteration, the default
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "defer_pv": "fa3"}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "unroll": 2}),
    ("sm_90a", 16, 4096, 128, 64, True, "fast", {"num_warps": 12, "BLOCK_N": 128,
                                                 "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 64, 64, True, "fast", {"num_warps": 12, "BLOCK_N": 128}),
    # P V deferred a block with the next S (64x64 blocks; timed slower, not the default)
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "defer_pv": True}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 4, "defer_pv": True}),
    # 64x64 blocks, the order's default: warp-specialised (FlashAttention-3's CTA): 2
    # consumer warpgroups of 64 query rows and a producer warpgroup
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12}),
    ("sm_90a", 16, 4096, 128, 64, True, "fast", {"num_warps": 12}),
    ("sm_90a", 16, 4096, 64, 64, False, "fast", {"num_warps": 12}),
    ("sm_90a", 16, 4096, 64, 64, True, "fast", {"num_warps": 12}),
    # the two consumers take turns issuing S = Q K^T (FlashAttention-3's ping-pong)
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 64, 64, False, "fast", {"num_warps": 12, "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 128, 64, True, "fast", {"num_warps": 12, "schedule": "pingpong"}),
    # one warpgroup per CTA, and checked mode (correctly rounded exp)
    ("sm_90a", 16, 4096, 128, 64, False, "fast"), ("sm_90a", 16, 4096, 64, 64, False, "fast"),
    ("sm_90a", 16, 4096, 128, 64, True, "checked", {"num_warps": 12}),
    ("sm_90a", 16, 4096, 128, 64, False, "checked", {"num_warps": 12, "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 64, 64, True, "fast"), ("sm_90a", 16, 4096, 128, 64, True, "fast"),
    ("sm_90a", 16, 4096, 64, 64, False, "checked"),
    ("sm_90a", 16, 4096, 128, 64, True, "checked"),
    ("sm_80", 16, 4096, 64, 64, False, "fast"),
    ("sm_90a", 16, 4096, 64, 64, True, "fast", {"num_warps": 12, "schedule": "pingpong"}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 12, "num_stages": 3}),
    ("sm_90a", 16, 4096, 128, 64, False, "fast", {"num_warps": 8, "warp_specialize": True}),
]
# GEMMs and attentions alternate in groups, so a run cut off by its time limit has
# measured the leading rows of both
#: after this many configurations in a row without a result the rest are skipped
HUNG_IN_A_ROW = 3
JOBS = [("gemm", g) for g in GEMMS[:4]] + [("attention", a) for a in ATTENTIONS[:6]] \
    + [("gemm", g) for g in GEMMS[4:8]] + [("attention", a) for a in ATTENTIONS[6:14]] \
    + [("gemm", g) for g in GEMMS[8:]] + [("attention", a) for a in ATTENTIONS[14:]]


def example(name: str) -> Any:
    """The module of a corrected seed kernel (``examples/kernels/NAME.py`` runs it)."""
    return importlib.import_module(f"tessera.conformance.kernels.{name}")


def example_module(path: Path) -> Any:
    """A Python file imported as a module, once."""
    name = f"_bench_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _compiled(kernel: Any, args: tuple[Any, ...], target: str, mode: str = "checked",
              **launch: Any) -> tuple[Any, dict]:
    t0 = time.perf_counter()
    compiled = compile_kernel(kernel, *args, target=target, mode=mode, **launch)
    t1 = time.perf_counter()
    stats = compiled.assemble().stats[kernel.name]
    t2 = time.perf_counter()
    # the CPU half of on_device(): the launch's own arguments must be accepted
    target_arguments(compiled, kernel.specialise(tuple(args), dict(launch))[0].runtime)
    return compiled, {"compile_s": round(t1 - t0, 3), "ptxas_s": round(t2 - t1, 3),
                      "registers": stats.registers, "spill_bytes": stats.spill_stores,
                      "smem": stats.smem, "grid": list(compiled.grid), "block": compiled.block,
                      "epilogue": compiled.kernel.attrs.get("epilogue", "")}


def run_gemm(target: str, n: int, tile: tuple[int, int, int], config: dict[str, Any],
             dry: bool) -> dict[str, Any]:
    gemm = example("gemm").gemm
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), np.float32).astype(BF16)
    b = rng.standard_normal((n, n), np.float32).astype(BF16)
    c = np.zeros((n, n), np.float32)
    row: dict[str, Any] = {"kernel": "gemm bf16->f32", "target": target, "shape": f"{n}^3",
                           "tile": "x".join(map(str, tile)) + "".join(
                               f" {k}={v}" for k, v in config.items())}
    launch: dict[str, Any] = {"tile_shape": tile, **({"config": config} if config else {})}
    compiled, info = _compiled(gemm, (a, b, c), target, **launch)
    row.update(info)
    if dry:
        return row
    import torch

    with on_device(compiled, gemm, (a, b, c), launch) as device:
        timing = device.time()
        device.run()
    flops = 2.0 * n ** 3
    row["tessera_ms"] = round(timing.median * 1e3, 4)
    row["tessera_tflops"] = round(flops / timing.median / 1e12, 1)
    ta, tb = (torch.from_numpy(x.view(np.uint16).astype(np.int32)).cuda() for x in (a, b))
    ta, tb = ((x << 16).view(torch.float32).to(torch.bfloat16) for x in (ta, tb))
    row["cublas_ms"] = round(_torch_time(lambda: torch.matmul(ta, tb)) * 1e3, 4)
    row["cublas_tflops"] = round(flops / (row["cublas_ms"] * 1e-3) / 1e12, 1)
    triton_ms = _triton_matmul_ms(ta, tb)
    if triton_ms is not None:
        row["triton_ms"] = round(triton_ms * 1e3, 4)
        row["triton_tflops"] = round(flops / triton_ms / 1e12, 1)
    exact = ta.double() @ tb.double()
    bound = (n * 2.0 ** -24 / (1 - n * 2.0 ** -24) + 2.0 ** -24) * (ta.double().abs()
                                                                       @ tb.double().abs())
    err = (torch.from_numpy(c).cuda().double() - exact).abs()
    row["within_bound"] = bool((err <= bound).all())
    row["max_rel_err"] = float((err / exact.abs().clamp_min(1e-30)).max())
    return row


def run_attention(target: str, bh: int, seq: int, d: int, block: int, causal: bool,
                  mode: str, extra: dict[str, Any] | None = None, *,
                  dry: bool) -> dict[str, Any]:
    fa = example("flash_attention").flash_attention
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((bh, seq, d), np.float32).astype(BF16) for _ in range(3))
    config = {"BLOCK_M": block, "BLOCK_N": block, "num_warps": 4, "num_stages": 2,
              **(extra or {})}
    row: dict[str, Any] = {"kernel": f"flash attention bf16, {mode}"
                           + (", causal" if causal else ""),
                           "target": target, "shape": f"BH={bh} S={seq} D={d}",
                           "tile": f"{config['BLOCK_M']}x{config['BLOCK_N']}" + "".join(
                               f" {k}={v}" for k, v in (extra or {}).items()
                               if k != "BLOCK_N")}
    launch = {"is_causal": causal, "config": config}
    compiled, info = _compiled(fa, (q, k, v), target, mode=mode, **launch)
    row.update(info)
    row["kv_ring"] = compiled.kernel.attrs.get("kv_ring", "")
    if dry:
        return row
    import torch
    import torch.nn.functional as F

    with on_device(compiled, fa, (q, k, v), launch) as device:
        timing = device.time()
        device.run()
    out = torch.from_numpy(np.asarray(launch_result(compiled, device.prep, device.out),
                                      np.float32)).cuda().double()
    flops = 4.0 * bh * seq * seq * d / (2 if causal else 1)
    row["tessera_ms"] = round(timing.median * 1e3, 4)
    row["tessera_tflops"] = round(flops / timing.median / 1e12, 1)
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)[None]
                  for x in (q, k, v))
    row["sdpa_ms"] = round(_torch_time(
        lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)) * 1e3, 4)
    row["sdpa_tflops"] = round(flops / (row["sdpa_ms"] * 1e-3) / 1e12, 1)
    triton_ms = _triton_attention_ms(tq[0], tk[0], tv[0], causal)
    if triton_ms is not None:
        row["triton_ms"] = round(triton_ms * 1e3, 4)
        row["triton_tflops"] = round(flops / triton_ms / 1e12, 1)
    sq, sk, sv = (x[0].double() for x in (tq, tk, tv))
    scores = sq @ sk.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool,
                                                device="cuda").tril(), -math.inf)
    exact = torch.softmax(scores, -1) @ sv
    # one bf16 rounding of the output (|out| <= max|v|) plus f32 softmax arithmetic
    bound = 2.0 ** -8 * float(sv.abs().max()) + 1e-4
    row["max_abs_err"] = float((out - exact).abs().max())
    row["within_bound"] = row["max_abs_err"] <= bound
    return row


def _triton_matmul_ms(a: Any, b: Any) -> float | None:
    """Seconds per launch of the Triton matmul on bf16 ``a @ b`` (f32 out), or None
    where Triton is not installed."""
    try:
        import torch
        import triton
    except ImportError:
        return None
    kernel = example_module(ROOT / "benchmarks" / "triton_compile.py").matmul_kernel
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=torch.float32, device="cuda")
    grid = (triton.cdiv(m, 128) * triton.cdiv(n, 128),)

    def run() -> None:
        kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                     GROUP_SIZE_M=8, num_stages=3, num_warps=8)

    return _torch_time(run)


def _triton_attention_ms(q: Any, k: Any, v: Any, causal: bool) -> float | None:
    """Seconds per launch of ``benchmarks/triton_attention.py``, or None without Triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    attention = example_module(ROOT / "benchmarks" / "triton_attention.py").attention
    return _torch_time(lambda: attention(q, k, v, causal))


def _torch_time(fn: Any, repeat: int = 20, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return float(np.median(times))


def run_job(index: int, dry: bool) -> dict[str, Any]:
    """One configuration of :data:`JOBS`; an exception becomes the row's ``error``."""
    kind, params = JOBS[index]
    fn = run_gemm if kind == "gemm" else run_attention
    try:
        return fn(*params, dry=dry)
    except Exception as exc:  # one failing configuration must not hide the others
        error = f"{type(exc).__name__}: {exc}"[:600]
        return {"kernel": kind, "params": repr(params), "error": error}


def run_isolated(index: int, dry: bool, limit: float) -> dict[str, Any]:
    """:func:`run_job` in a child process that is killed after ``limit`` seconds (a
    kernel that never finishes, or a fault that poisons the CUDA context, stays there)."""
    kind, params = JOBS[index]
    cmd = [sys.executable, __file__, "--job", str(index)] + (["--dry"] if dry else [])
    began = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"kernel": kind, "params": repr(params), "error": f"no result in {limit:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        return {"kernel": kind, "params": repr(params),
                "error": f"exit {done.returncode}: {done.stderr[-500:]}"}
    # the process's whole time (start-up, data, compile, anchors): what the run's limit pays
    return {**json.loads(lines[-1]), "wall_s": round(time.perf_counter() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="compile and assemble only")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--limit", type=float, default=90.0,
                        help="seconds allowed to each configuration (default 90)")
    parser.add_argument("--only", choices=("gemm", "attention"),
                        help="run only this kind of configuration")
    parser.add_argument("--match", help="run only configurations whose parameters' text "
                        "matches this regular expression (e.g. \"'sm_90a', 8192\")")
    parser.add_argument("--start", type=int, default=0,
                        help="skip the configurations before this index (a later run "
                             "goes on where a cut-off one stopped)")
    parser.add_argument("--job", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.job is not None:
        print(json.dumps(run_job(opts.job, opts.dry)), flush=True)
        return
    rows: list[dict[str, Any]] = []
    for index in range(opts.start, len(JOBS)):
        if opts.only and JOBS[index][0] != opts.only:
            continue
        if opts.match and not re.search(opts.match, repr(JOBS[index][1])):
            continue
        if len(rows) >= HUNG_IN_A_ROW and all(
                r.get("error", "").startswith(("no result", "skipped"))
                for r in rows[-HUNG_IN_A_ROW:]):
            # a GPU that stopped finishing kernels would spend the limit on every row
            rows.append({"kernel": JOBS[index][0], "params": repr(JOBS[index][1]),
                         "error": f"skipped: {HUNG_IN_A_ROW} configurations in a row "
                                  "gave no result"})
        else:
            rows.append(run_isolated(index, opts.dry, opts.limit))
        print(json.dumps(rows[-1]), flush=True)
        if opts.json:  # rewritten after each row: a cut-off run keeps what it measured
            Path(opts.json).write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    print(table)
    if opts.markdown:
        Path(opts.markdown).write_text(table + "\n")


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table: TFLOP/s of Tessera and its anchors, and checks."""
    head = ("| kernel | target | shape | tile | Tessera TFLOP/s | cuBLAS / SDPA TFLOP/s "
            "| Triton TFLOP/s | regs | spills | output checked |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r['params']} | error: {r['error'][:120]} "
                         "| | | | | | | |")
            continue
        anchor = r.get("cublas_tflops", r.get("sdpa_tflops", "—"))
        check = {True: "within bound", False: "OUTSIDE bound"}.get(r.get("within_bound"), "—")
        lines.append(f"| {r['kernel']} | {r['target']} | {r['shape']} | {r['tile']} "
                     f"| {r.get('tessera_tflops', '—')} | {anchor} "
                     f"| {r.get('triton_tflops', '—')} | {r['registers']} "
                     f"| {r['spill_bytes']} | {check} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
