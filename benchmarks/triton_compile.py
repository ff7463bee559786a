"""Offline compile time of Triton's tutorial-style matmul for sm_90a, kernel source to PTX.

The reference column for Tessera's own source-to-PTX time of its sm_90a GEMM. Runs in the
Triton environment (``benchmarks/setup_triton_env.sh`` creates ``benchmarks/.env-triton``).
No GPU or driver is needed: given an explicit ``GPUTarget("cuda", 90, 32)``,
``triton.compile`` never asks ``triton.runtime.driver`` for the current device, and
nothing here loads the result (that is what would need the driver).

    benchmarks/.env-triton/bin/python benchmarks/triton_compile.py --json
    benchmarks/.env-triton/bin/python benchmarks/triton_compile.py --bm 64 --bn 128 --json

It prints one JSON object: the first compile in the process (it pays for MLIR and LLVM
set-up), then the median and min of ``--reps`` cold compiles, each with a fresh
``TRITON_CACHE_DIR`` and ``TRITON_ALWAYS_COMPILE`` (Triton's compile listener confirms
that none was a cache hit; one deliberate cache hit is timed for contrast); the split
among Triton's stages; which instructions Triton chose (wgmma, TMA, cp.async); ``ptxas
-v`` statistics of that PTX; and versions. Anything that fails gives an ``error`` field.

Triton's pipeline ends with a ``cubin`` stage that runs its bundled ptxas. A stage hook
replaces that stage with a stub, so the timed work ends at PTX text, as Tessera's does;
ptxas then runs separately (``$PTXAS``, else the one in the project's ``.venv``).

``stages`` (ms, medians) holds Triton's own per-stage times from its compile listener
(``frontend`` is the cache key plus AST -> TTIR) and, from wrapping the LLVM binding calls,
how ``llir`` and ``ptx`` split: MLIR passes, MLIR -> LLVM module, LLVM O3, NVPTX codegen.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parents[1]

# Keep 3.9's default (FP fusion on) without its warning that the default will change.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
_t0 = time.perf_counter()
try:
    import triton
    import triton.language as tl
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError as exc:
    # Started by another interpreter (the project's .venv, run_all.py): hand over to the
    # Triton environment if it exists, else answer in JSON all the same.
    TRITON_PYTHON = REPO / "benchmarks/.env-triton/bin/python"
    # (both venvs link to one base interpreter, so compare by a marker, not by path)
    if TRITON_PYTHON.exists() and "TRITON_COMPILE_REEXEC" not in os.environ:
        os.environ["TRITON_COMPILE_REEXEC"] = "1"
        os.execv(str(TRITON_PYTHON), [str(TRITON_PYTHON), __file__, *sys.argv[1:]])
    print(json.dumps({"error": f"cannot import triton ({exc}); run with "
                      "benchmarks/.env-triton/bin/python (benchmarks/setup_triton_env.sh)"}))
    sys.exit(1)
IMPORT_S = time.perf_counter() - _t0


@triton.jit
def grouped_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_SIZE_M: tl.constexpr):
    """This program's (tile row, tile column) of C. Programs walk C in column strips
    GROUP_SIZE_M tiles tall so that neighbouring programs share rows of A and columns
    of B in L2."""
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group_tiles = GROUP_SIZE_M * tiles_n
    group_row0 = (pid // group_tiles) * GROUP_SIZE_M
    group_rows = min(tiles_m - group_row0, GROUP_SIZE_M)
    tile_m = group_row0 + (pid % group_tiles) % group_rows
    tile_n = (pid % group_tiles) // group_rows
    return tile_m, tile_n


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    """C = A @ B with pointer loads: one BLOCK_M x BLOCK_N tile of C per program."""
    tile_m, tile_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
    # Rows and columns past the edge wrap around (their results are masked at the
    # store), so only the K tail needs a load mask.
    rows = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - step * BLOCK_K
        a = tl.load(a_tile, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_tile, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_tile = c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    inside = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=inside)


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr):
    """The same tiling through device-side tensor descriptors (TMA on sm_90): the
    hardware zero-fills out-of-bounds boxes, so no masks are needed."""
    tile_m, tile_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([tile_m * BLOCK_M, step * BLOCK_K])
        b = b_desc.load([step * BLOCK_K, tile_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([tile_m * BLOCK_M, tile_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def make_source(args: argparse.Namespace) -> ASTSource:
    """The kernel specialised as a JIT launch on contiguous, 16-byte aligned bf16 tensors
    with M, N, K multiples of 16 would be: unit strides become the constant 1 and the
    other integers and pointers carry ``tt.divisibility = 16`` (what Triton's JIT
    derives from such arguments; without it the loads would not vectorise)."""
    fn = matmul_tma_kernel if args.tma else matmul_kernel
    c_type = "*fp32" if args.out == "f32" else "*bf16"
    sig: dict[str, str] = {}
    consts: dict[str, int] = {"BLOCK_M": args.bm, "BLOCK_N": args.bn, "BLOCK_K": args.bk,
                              "GROUP_SIZE_M": args.group_m}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ("stride_ak", "stride_bn", "stride_cn"):
            sig[name], consts[name] = "constexpr", 1
        elif name.endswith("_ptr"):
            sig[name] = c_type if name == "c_ptr" else "*bf16"
        else:
            sig[name] = "i32"
    aligned = [["tt.divisibility", 16]]
    attrs = {(i,): aligned for i, name in enumerate(fn.arg_names) if sig[name] != "constexpr"}
    return ASTSource(fn, sig, consts, attrs)


class StopAtPtx:
    """Stage hook: replaces Triton's ``cubin`` stage with a stub, so a compile ends at
    PTX. ``triton.compile`` calls the hook twice: with no arguments for a cache-key
    suffix, then from ``add_stages`` with the stage table to edit."""

    def __call__(self, *args: Any) -> Any:
        if not args:
            return "stop-at-ptx", "stop-at-ptx"
        stages = args[1]
        stages["cubin"] = lambda src, metadata: b""  # CompiledKernel wants some binary
        return None


class LlvmTimer:
    """Times the LLVM calls inside the ``llir`` and ``ptx`` stages (MLIR's LLVM dialect to
    an LLVM module, the O3 pipeline, NVPTX code generation) by wrapping the functions of
    the ``llvm`` binding module the NVIDIA backend calls through."""

    WRAPPED: ClassVar[dict[str, str]] = {
        "to_module": "llir.to_llvm_module", "optimize_module": "llir.llvm_O3",
        "translate_to_asm": "ptx.nvptx_codegen"}

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        from triton.backends.nvidia import compiler as nvidia_compiler

        llvm = nvidia_compiler.llvm
        for func, label in self.WRAPPED.items():
            setattr(llvm, func, self._timed(getattr(llvm, func), label))

    def _timed(self, func: Any, label: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self.ms[label] = (time.perf_counter() - start) * 1e3
        return wrapper

    def take(self) -> dict[str, float]:
        """The timings of the last compile, and reset."""
        out, self.ms = self.ms, {}
        return out


class Listener:
    """Collects Triton's per-compile timing record (µs) and cache-hit flag."""

    def __init__(self, llvm_timer: LlvmTimer | None) -> None:
        self.records: list[dict[str, Any]] = []
        self.llvm_timer = llvm_timer

    def __call__(self, *, src: Any, metadata: Any, metadata_group: Any, times: Any,
                 cache_hit: bool) -> None:
        stages = {"frontend": times.ir_initialization / 1e3}  # cache key + AST -> TTIR
        stages.update({name: us / 1e3 for name, us in times.lowering_stages})
        stages["store"] = times.store_results / 1e3
        stages.pop("cubin", None)  # the stub
        if self.llvm_timer is not None:
            llvm_ms = self.llvm_timer.take()
            if "llir" in stages and len(llvm_ms) == len(LlvmTimer.WRAPPED):
                # the rest of llir: the MLIR pipeline TritonGPU -> LLVM dialect, printing
                stages["llir.mlir_passes"] = (stages["llir"] - llvm_ms["llir.to_llvm_module"]
                                              - llvm_ms["llir.llvm_O3"])
            stages.update(llvm_ms)
        self.records.append({"cache_hit": cache_hit, "stages_ms": stages})


def compile_once(args: argparse.Namespace, fresh_dir: bool) -> tuple[float, Any]:
    """One ``triton.compile`` to PTX, wall time in seconds (perf_counter)."""
    if fresh_dir:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(dir=args.workdir)
    src = make_source(args)
    options = {"num_warps": args.warps, "num_stages": args.stages, "enable_fp_fusion": True}
    start = time.perf_counter()
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    return time.perf_counter() - start, kernel


def find_ptxas() -> str:
    """``$PTXAS``, else the ptxas of the project's ``.venv`` (nvidia-cuda-nvcc wheel)."""
    if os.environ.get("PTXAS"):
        return os.environ["PTXAS"]
    probe = "from cuda.pathfinder import find_nvidia_binary_utility as f; print(f('ptxas'))"
    out = subprocess.run([str(REPO / ".venv/bin/python"), "-c", probe], capture_output=True,
                         text=True, check=True, timeout=60)
    path = out.stdout.strip()
    if not path or path == "None":
        raise FileNotFoundError("the project's .venv has no ptxas (nvidia-cuda-nvcc wheel)")
    return path


def ptxas_stats(ptx: str, workdir: str) -> dict[str, Any]:
    """``ptxas -v`` of the PTX for sm_90a, with the flags Triton's own cubin stage uses
    (``-lineinfo --regAllocOptLevel=2``; ``--fmad=false`` only with FP fusion off)."""
    try:
        ptxas = find_ptxas()
        version = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                                 check=True).stdout
        src = Path(workdir) / "kernel.ptx"
        src.write_text(ptx)
        cmd = [ptxas, "-lineinfo", "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a",
               str(src), "-o", str(src.with_suffix(".cubin"))]
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - start
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"ptxas unavailable: {exc}"}
    log = run.stdout + run.stderr
    if run.returncode != 0:
        return {"error": f"ptxas failed ({run.returncode}): {log[-2000:]}"}

    def grab(pattern: str) -> int | None:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else None

    release = re.search(r"release ([\d.]+), (V[\d.]+)", version)
    return {
        "path": ptxas, "version": " ".join(release.groups()) if release else version.strip(),
        "args": cmd[1:5], "wall_s": round(wall, 4),
        "registers": grab(r"Used (\d+) registers"),
        # Triton's shared memory is dynamic (.extern .shared global_smem[]), which ptxas
        # does not count: this is static smem only (absent from the log means 0).
        "smem_static_bytes": grab(r"(\d+) bytes smem") or 0,
        "spill_stores_bytes": grab(r"(\d+) bytes spill stores"),
        "spill_loads_bytes": grab(r"(\d+) bytes spill loads"),
        "stack_frame_bytes": grab(r"(\d+) bytes stack frame"),
        "barriers": grab(r"used (\d+) barriers"),
    }


def ptx_features(ptx: str) -> dict[str, Any]:
    """What Triton chose, read off the PTX text."""
    isa = re.search(r"^\.version (\S+)", ptx, re.M)
    target = re.search(r"^\.target (\S+)", ptx, re.M)
    return {
        "isa_version": isa.group(1) if isa else None,
        "target": target.group(1) if target else None,
        "bytes": len(ptx), "lines": ptx.count("\n"),
        "wgmma": "wgmma.mma_async" in ptx,
        "wgmma_shapes": sorted(set(re.findall(r"wgmma\.mma_async\.\S*?\.(m\d+n\d+k\d+\S*)", ptx))),
        "wgmma_count": ptx.count("wgmma.mma_async"),
        "tma": "cp.async.bulk.tensor" in ptx,
        "cp_async": len(re.findall(r"cp\.async\.c[ag]\.", ptx)),
        "mbarrier": "mbarrier." in ptx,
        "mma_sync": "mma.sync" in ptx,
    }


def summarise(records: list[dict[str, Any]]) -> dict[str, float]:
    """Median of each stage over the timed compiles, in ms."""
    names = records[0]["stages_ms"].keys()
    return {n: round(statistics.median(r["stages_ms"][n] for r in records), 2) for n in names}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the JSON reports."""
    try:
        llvm_timer: LlvmTimer | None = LlvmTimer()
    except (ImportError, AttributeError, TypeError):  # binding layout changed: skip
        llvm_timer = None
    listener = Listener(llvm_timer)
    knobs.compilation.listener = listener
    knobs.runtime.add_stages_inspection_hook = StopAtPtx()
    always = args.cache_mode in ("always", "both")
    fresh = args.cache_mode in ("fresh-dir", "both")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(dir=args.workdir)
    knobs.compilation.always_compile = always
    first_s, kernel = compile_once(args, fresh)
    times = [compile_once(args, fresh)[0] for _ in range(args.reps)]
    timed = listener.records[1:]
    # Contrast: the same compile answered from the cache it just wrote.
    knobs.compilation.always_compile = False
    hit_s, _ = compile_once(args, fresh_dir=False)
    hit = listener.records[-1]["cache_hit"]
    ptx = kernel.asm["ptx"]
    if args.emit_ptx:
        Path(args.emit_ptx).write_text(ptx)
    return {
        "kernel": "matmul_tma_kernel" if args.tma else "matmul_kernel",
        "config": {"BLOCK_M": args.bm, "BLOCK_N": args.bn, "BLOCK_K": args.bk,
                   "GROUP_SIZE_M": args.group_m, "num_stages": args.stages,
                   "num_warps": args.warps, "inputs": "bf16", "accumulator": "f32",
                   "output": args.out, "target": "cuda sm_90a (GPUTarget('cuda', 90, 32))"},
        "versions": {"triton": triton.__version__, "python": platform.python_version(),
                     # sets the PTX ISA version Triton declares (CUDA 13.4 -> .version 9.4)
                     "triton_bundled_ptxas": knobs.nvidia.ptxas_blackwell.version},
        "import_s": round(IMPORT_S, 4),
        "first_compile_s": round(first_s, 4),
        "first_compile_stages_ms": {k: round(v, 2)
                                    for k, v in listener.records[0]["stages_ms"].items()},
        "cold_compile_s": {"median": round(statistics.median(times), 4),
                           "min": round(min(times), 4), "max": round(max(times), 4),
                           "reps": args.reps, "all": [round(t, 4) for t in times]},
        "stages": summarise(timed),
        "recompiled_every_rep": not any(r["cache_hit"] for r in timed),
        "cache_mode": args.cache_mode,
        "cache_hit_s": round(hit_s, 4), "cache_hit_confirmed": hit,
        "ptx": ptx_features(ptx),
        "ptxas": ptxas_stats(ptx, args.workdir),
        "triton_metadata": {
            "shared_bytes": kernel.metadata.shared,
            "global_scratch_bytes": kernel.metadata.global_scratch_size,
            "n_regs": None, "n_spills": None,
            "note": "n_regs/n_spills come from loading the cubin through the CUDA driver "
                    "(CompiledKernel._init_handles); offline they do not exist, see ptxas",
        },
        "emit_ptx": args.emit_ptx,
    }


def main() -> None:
    """Parse flags, measure, print one JSON object (``{"error": ...}`` on failure)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON (the only output)")
    parser.add_argument("--bm", type=int, default=128)
    parser.add_argument("--bn", type=int, default=128)
    parser.add_argument("--bk", type=int, default=64)
    parser.add_argument("--stages", type=int, default=3, help="Triton num_stages")
    parser.add_argument("--warps", type=int, default=4, help="Triton num_warps")
    parser.add_argument("--group-m", type=int, default=8)
    parser.add_argument("--out", choices=("bf16", "f32"), default="bf16", help="C's type")
    parser.add_argument("--tma", action="store_true", help="tensor-descriptor kernel")
    parser.add_argument("--reps", type=int, default=9, help="timed cold compiles")
    parser.add_argument("--cache-mode", choices=("both", "always", "fresh-dir"),
                        default="both", help="how each repetition avoids Triton's cache")
    parser.add_argument("--emit-ptx", metavar="PATH", help="write Triton's PTX here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triton-compile-") as workdir:
        args.workdir = workdir
        try:
            result = measure(args)
        except Exception as exc:  # report, do not crash: the caller parses one JSON object
            result = {"error": f"{type(exc).__name__}: {exc}",
                      "config": {"bm": args.bm, "bn": args.bn, "bk": args.bk,
                                 "stages": args.stages, "warps": args.warps, "tma": args.tma}}
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
