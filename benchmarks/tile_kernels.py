"""Tile kernels on the tile simulator against plain NumPy and Triton's interpreter, in one run.

Cases (each written once as a ``@ts.kernel`` below and once as a Triton kernel in
``triton_anchor.py``):

1. vector add, 2^20 float32 elements, BLOCK 1024 (one tile of 1024 elements per program);
2. tiled GEMM 1024x1024x1024 float32, 64x64x32 tiles staged through shared memory;
3. flash-attention forward (online softmax), batch*heads 4, sequence 1024, head dim 64,
   64x64 tiles, float32, non-causal;
4. row softmax of a 4096x1024 float32 matrix, one row per program;
5. a block reduction with barriers: 16 groups of 256 tiles sum 2^20 float32 values
   (strided per-tile sums, a barrier-separated tree in shared memory, one add per group).

Columns: Tessera ``mode="checked"`` (exact numerics, every sanitizer) and ``mode="fast"``
(float32 BLAS, sanitizers off), plain NumPy doing the same math (for GEMM both ``A @ B``
and the same K-blocked algorithm, 32 float32 ``A[:, k:k+32] @ B[k:k+32]`` steps), and
Triton's interpreter (``TRITON_INTERPRET=1``) running the Triton kernels in its own
environment (``benchmarks/.env-triton``, made by ``setup_triton_env.sh``) as a
subprocess that returns its timings as JSON and its outputs as an ``.npz`` file.
Kernels that write a parameter get a preallocated output buffer (a fresh 4-16 MB array
per launch would add milliseconds of first-touch page faults); NumPy baselines are the
plain expressions. Tessera and NumPy times are medians of interleaved repeats, each
case's samples taken after a few milliseconds of its own untimed launches; Triton's
interpreter is slow, so it runs each case twice and the faster run is reported. Every
result, Triton's included, is checked against a float64 NumPy reference with a bound
derived from the float32 format. A last table measures the sequential schedule (the
fallback for programs that depend on each other): its time per executed tile op.

BLAS is pinned to one thread before NumPy is imported. Prints Markdown tables.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/tile_kernels.py
    .venv/bin/python benchmarks/tile_kernels.py --repeats 3 --no-triton     # quick
    .venv/bin/python benchmarks/tile_kernels.py --setup-triton    # make the env first
"""

# ruff: noqa: F821
# (kernel bodies name the tile origins and dims, tile_m, BM, K, ..., which the kernel
# compiler binds; Python's linter cannot see them)

from __future__ import annotations

import os

# Must happen before NumPy loads OpenBLAS: one thread, so timings are comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import runpy  # noqa: E402
import select  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tessera as ts  # noqa: E402

# The benchmarked block reduction is the one shipped in examples/kernels.
block_sum = runpy.run_path(str(HERE.parent / "examples" / "kernels" /
                               "cooperative_reduction.py"))["block_reduction"]
from tessera.interp.tile import exec as tile_exec  # noqa: E402
from tessera.interp.tile import flow as tile_flow  # noqa: E402
from tessera.interp.tile import launcher as tile_launcher  # noqa: E402

U = 2.0 ** -24  # unit roundoff of float32
TRITON_ENV = HERE / ".env-triton"


# -- Tessera kernels -------------------------------------------------------------------

@ts.kernel
def vector_add(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32],
               out: ts.Tensor["N", ts.f32]):
    """out = x + y, one BM-element tile per program (launched with tile_shape=(1024,))."""
    out[tile_m:tile_m + BM] = x[tile_m:tile_m + BM] + y[tile_m:tile_m + BM]


@ts.kernel
def gemm(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
         C: ts.Tensor["M", "N", ts.f32]):
    """C = A @ B: one group per (BM, BN) tile of C, K in BK steps through shared memory."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def attention(Q: ts.Tensor["BH", "S", "D", ts.f32], K: ts.Tensor["BH", "S", "D", ts.f32],
              V: ts.Tensor["BH", "S", "D", ts.f32]) -> ts.Tensor["BH", "S", "D", ts.f32]:
    """Flash-attention forward: one program per BM query rows of one batch*head (the
    leading dim is a batch dim), online softmax over BN keys at a time."""
    q = Q[tile_m:tile_m + BM]
    acc = ts.tile.zeros((BM, D), ts.f32)
    m_i = ts.tile.full((BM,), -float("inf"), ts.f32)
    l_i = ts.tile.zeros((BM,), ts.f32)
    for kv in ts.tile.range(0, S, BN):
        s = ts.tile.mma(q, K[kv:kv + BN].T) * (1.0 / math.sqrt(D))
        m_new = ts.tile.maximum(m_i, ts.tile.row_max(s))
        alpha = ts.tile.exp(m_i - m_new)
        p = ts.tile.exp(s - m_new[:, None])
        l_i = alpha * l_i + ts.tile.row_sum(p)
        acc = alpha[:, None] * acc + ts.tile.mma(p, V[kv:kv + BN])
        m_i = m_new
    return acc / l_i[:, None]


@ts.kernel
def row_softmax(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32]):
    """Softmax of each row, BM rows per program (launched with tile_shape=(1,))."""
    t = x[tile_m:tile_m + BM]
    e = ts.tile.exp(t - ts.tile.row_max(t))
    y[tile_m:tile_m + BM] = e / ts.tile.row_sum(e)


@ts.kernel
def scalar_chain(x: ts.Tensor["N", ts.f32], out: ts.Tensor[1, ts.f32]):
    """A loop of scalar ops in one tile: nothing but per-op cost."""
    s = 0.0
    for i in ts.tile.range(0, N):
        s = s * 0.5 + x[i]
    out[0] = s


# -- NumPy baselines -------------------------------------------------------------------

def np_k_blocked(a: np.ndarray, b: np.ndarray, bk: int = 32) -> np.ndarray:
    """The tile GEMM's algorithm in NumPy: C += A[:, k:k+bk] @ B[k:k+bk], float32."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(0, a.shape[1], bk):
        c += a[:, k:k + bk] @ b[k:k + bk]
    return c


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(Q K^T / sqrt(D)) V in float32."""
    s = q @ np.swapaxes(k, -1, -2) * np.float32(1.0 / math.sqrt(q.shape[-1]))
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_block_sum(x: np.ndarray, groups: int = 16, size: int = 256) -> np.ndarray:
    """The kernel's order: per-tile strided sums (a sequential reduce over axis 0), a
    per-group sum of its tiles' partials, then the groups in order."""
    partial = np.add.reduce(x.reshape(-1, groups * size), axis=0)
    per_group = partial.reshape(groups, size).sum(axis=1)
    return np.add.reduce(per_group, keepdims=True)


# -- references and bounds (float64) ---------------------------------------------------

def reference(name: str, inp: dict[str, np.ndarray]) -> tuple[np.ndarray, Any, str]:
    """The float64 result of a case, the error bound (scalar or elementwise) a float32
    implementation must meet, and how the bound is derived."""
    w = {k: v.astype(np.float64) for k, v in inp.items()}
    if name == "vector_add":
        return w["add_x"] + w["add_y"], U * np.abs(w["add_x"] + w["add_y"]), "u·|x+y|"
    if name == "gemm":
        kdim = w["gemm_a"].shape[1]
        gamma = kdim * U / (1 - kdim * U)
        bound = (gamma + U) * (np.abs(w["gemm_a"]) @ np.abs(w["gemm_b"]))
        return w["gemm_a"] @ w["gemm_b"], bound, "(γ_K+u)·|A||B|"
    if name == "attention":
        q, k, v = w["attn_q"], w["attn_k"], w["attn_v"]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        e = np.exp(s - s.max(-1, keepdims=True))
        ref = (e / e.sum(-1, keepdims=True)) @ v
        # float32 rounding of each score (γ_D·|q||k|/√D) moves a softmax weight by that
        # much relative, and the weighted sum of S rows adds γ_(S+D): both times max|v|
        sabs = np.abs(q) @ np.swapaxes(np.abs(k), -1, -2) / math.sqrt(q.shape[-1])
        gd = q.shape[-1] * U / (1 - q.shape[-1] * U)
        n = s.shape[-1] + q.shape[-1] + 8
        bound = (2 * gd * sabs.max() + n * U / (1 - n * U)) * np.abs(v).max()
        return ref, bound, "(2γ_D·max|s| + γ_(S+D+8))·max|V|"
    if name == "softmax":
        x = w["softmax_x"]
        e = np.exp(x - x.max(1, keepdims=True))
        ref = e / e.sum(1, keepdims=True)
        cols = x.shape[1]
        return ref, (cols + 6 + 2 * np.abs(x).max()) * U * ref, "(C+6+2·max|x|)·u·y"
    if name == "reduction":
        x = w["reduce_x"]
        ref = np.array([math.fsum(x.tolist())])
        return ref, x.size * U * np.abs(x).sum(), "N·u·Σ|x|"
    raise KeyError(name)


# -- timing ----------------------------------------------------------------------------

def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


#: untimed launches of a case's variants before its samples, for at least this long:
#: right after another case, launches run slower for a few milliseconds (caches refill
#: and the clock recovers from the previous case's vector code), which would decide the
#: verdict of a sub-millisecond case instead of the case itself
WARMUP = 0.005


def sample(cases: dict[str, Callable[[], object]], repeats: int,
           times: dict[str, list[float]]) -> None:
    """Time each case ``repeats`` times, interleaved so load changes hit all alike. Each
    case's samples follow :data:`WARMUP` seconds of its own untimed launches, and its
    variants (``name/...`` keys) take turns at running first."""
    groups: dict[str, list[str]] = {}
    for key in cases:
        groups.setdefault(key.split("/")[0], []).append(key)
    for r in range(repeats):
        for keys in groups.values():
            k = r % len(keys)
            order = keys[k:] + keys[:k]
            start = time.perf_counter()
            while time.perf_counter() - start < WARMUP:
                for key in order:
                    cases[key]()
            for key in order:
                times.setdefault(key, []).append(timed(cases[key]))


def count_ops(fn: Callable[[], object]) -> int:
    """Tile ops one launch executes: steps run by the simulator (one per Tile IR
    instruction run, loop and branch ops included), counted by wrapping its block
    runner for one extra launch."""
    original = tile_exec.run
    count = 0

    def counting(steps: list[Any], fr: Any) -> None:
        nonlocal count
        count += len(steps)
        original(steps, fr)

    modules = (tile_launcher, tile_exec, tile_flow)
    for m in modules:
        m.run = counting  # type: ignore[attr-defined]
    try:
        fn()
    finally:
        for m in modules:
            m.run = original  # type: ignore[attr-defined]
    return count


# -- the cases -------------------------------------------------------------------------

def make_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    n = 1 << 20
    return {"add_x": normal(n), "add_y": normal(n),
            "gemm_a": normal(1024, 1024), "gemm_b": normal(1024, 1024),
            "attn_q": normal(4, 1024, 64), "attn_k": normal(4, 1024, 64),
            "attn_v": normal(4, 1024, 64),
            "softmax_x": normal(4096, 1024), "reduce_x": normal(n),
            "chain_x": normal(10_000)}


@dataclass
class Case:
    """One case: its Tessera launch (returning the result) and its NumPy baselines."""

    name: str
    title: str
    tessera: Callable[[str, str], np.ndarray]  # (mode, schedule) -> result
    numpy: dict[str, Callable[[], np.ndarray]] = field(default_factory=dict)
    goal: float = 3.0  # Tessera / NumPy
    triton_goal: float | None = None  # Triton / Tessera


def make_cases(inp: dict[str, np.ndarray]) -> list[Case]:
    x, y = inp["add_x"], inp["add_y"]
    a, b = inp["gemm_a"], inp["gemm_b"]
    q, k, v = inp["attn_q"], inp["attn_k"], inp["attn_v"]
    sx, rx = inp["softmax_x"], inp["reduce_x"]
    # Kernels that write a parameter get their output buffer once, as a caller that
    # launches repeatedly would: a fresh 4-16 MB array per launch costs milliseconds of
    # first-touch page faults on this machine (FACTS.md), more than some kernels.
    add_out, mm_out, sm_out = np.zeros_like(x), np.zeros((1024, 1024), np.float32), \
        np.zeros_like(sx)

    def add(mode: str, schedule: str) -> np.ndarray:
        vector_add(x, y, add_out, tile_shape=(1024,), mode=mode, schedule=schedule)
        return add_out

    def mm(mode: str, schedule: str) -> np.ndarray:
        gemm(a, b, mm_out, tile_shape=(64, 64, 32), mode=mode, schedule=schedule)
        return mm_out

    def attn(mode: str, schedule: str) -> np.ndarray:
        return attention(q, k, v, tile_shape=(64, 64), mode=mode, schedule=schedule)

    def softmax(mode: str, schedule: str) -> np.ndarray:
        row_softmax(sx, sm_out, tile_shape=(1,), mode=mode, schedule=schedule)
        return sm_out

    def reduction(mode: str, schedule: str) -> np.ndarray:
        total = np.zeros(1, np.float32)
        block_sum(rx, total, grid=16, group_size=256, mode=mode, schedule=schedule)
        return total

    return [
        Case("vector_add", "vector add 2^20, BLOCK 1024", add, {"x + y": lambda: x + y}),
        Case("gemm", "tiled GEMM 1024³ f32, 64×64×32", mm,
             {"A @ B": lambda: a @ b, "K-blocked": lambda: np_k_blocked(a, b)},
             triton_goal=100.0),
        Case("attention", "flash attention BH 4, S 1024, D 64, 64×64", attn,
             {"softmax(QKᵀ)V": lambda: np_attention(q, k, v)}, goal=2.0, triton_goal=100.0),
        Case("softmax", "row softmax 4096×1024", softmax, {"softmax": lambda: np_softmax(sx)}),
        Case("reduction", "block reduction, 16 groups × 256, 2^20", reduction,
             {"strided sums": lambda: np_block_sum(rx)}),
    ]


# -- Triton ----------------------------------------------------------------------------

@dataclass
class TritonRun:
    seconds: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    skipped: str | None = None  # why the column is empty
    errors: dict[str, str] = field(default_factory=dict)
    version: str = ""


def setup_triton() -> str | None:
    """Run setup_triton_env.sh; the reason it failed, or None."""
    proc = subprocess.run(["bash", str(HERE / "setup_triton_env.sh")], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        return "setup_triton_env.sh failed: " + (lines[-1] if lines else "no output")
    return None


class Anchor:
    """triton_anchor.py running in ``--serve`` mode: one JSON line per command."""

    def __init__(self, cmd: list[str], log: Path, deadline: float) -> None:
        self.deadline = deadline
        self.log = log
        self.log_file = open(log, "w")  # closed in close()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log_file, text=True)

    def ask(self, command: str | None) -> dict[str, Any]:
        """Send a command (None: only read) and return its JSON reply."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        left = self.deadline - time.perf_counter()
        ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0.0))
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            if not ready:
                raise RuntimeError("triton_anchor.py ran past the time limit")
            lines = [ln for ln in self.log.read_text().splitlines() if ln.strip()]
            raise RuntimeError("triton_anchor.py failed: " + (lines[-1] if lines else
                                                               "no output"))
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def run_triton(inp: dict[str, np.ndarray], names: list[str], python: Path, repeats: int,
               timeout: float, between: Callable[[str], None]) -> TritonRun:
    """Run the cases in triton_anchor.py, in the Triton environment, on the same inputs.
    ``between(name)`` runs before and after each Triton run of ``name`` (to time the
    Tessera launches side by side with it)."""
    if not python.exists():
        return TritonRun(skipped=f"no Triton environment at {python.parent.parent} "
                                 "(make it with benchmarks/setup_triton_env.sh)")
    with tempfile.TemporaryDirectory(prefix="tile-bench-") as tmp:
        src, dst = Path(tmp) / "inputs.npz", Path(tmp) / "outputs.npz"
        np.savez(src, **inp)
        cmd = [str(python), str(HERE / "triton_anchor.py"), "--inputs", str(src),
               "--outputs", str(dst), "--serve"]
        anchor = Anchor(cmd, Path(tmp) / "stderr.txt", time.perf_counter() + timeout)
        try:
            head = anchor.ask(None)
            run = TritonRun(version=f"Triton {head['triton']}, torch {head['torch']}")
            for name in names:
                between(name)
                seconds = []
                for _ in range(repeats):
                    reply = anchor.ask(f"run {name}")
                    if "error" in reply:
                        run.errors[name] = reply["error"]
                        break
                    seconds.append(reply["seconds"])
                    between(name)
                if seconds and name not in run.errors:
                    run.seconds[name] = min(seconds)
            anchor.ask("save")
            anchor.close()
        except RuntimeError as err:
            return TritonRun(skipped=str(err))
        with np.load(dst) as data:
            run.outputs = {k: data[k] for k in data.files}
        return run


# -- report ----------------------------------------------------------------------------

def fmt_ms(t: float | None) -> str:
    return "—" if t is None else f"{t * 1e3:.1f}" if t >= 0.01 else f"{t * 1e3:.2f}"


def fmt_x(r: float | None) -> str:
    return "—" if r is None else f"{r:.0f}×" if r >= 20 else f"{r:.2f}×"


def check(result: np.ndarray, ref: np.ndarray, bound: Any) -> tuple[float, bool]:
    """Max |result - ref| and whether every element is within the bound."""
    err = np.abs(np.asarray(result, np.float64).reshape(ref.shape) - ref)
    return float(err.max()), bool(np.all(err <= bound))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9,
                        help="interleaved repeats of the Tessera and NumPy cases")
    parser.add_argument("--seq-repeats", type=int, default=3,
                        help="repeats of the sequential-schedule launches")
    parser.add_argument("--triton-repeats", type=int, default=2)
    parser.add_argument("--triton-python", type=Path, default=TRITON_ENV / "bin" / "python")
    parser.add_argument("--triton-timeout", type=float, default=420.0)
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton column")
    parser.add_argument("--setup-triton", action="store_true",
                        help="run setup_triton_env.sh first if the environment is missing")
    args = parser.parse_args()
    started = time.perf_counter()

    inp = make_inputs()
    cases = make_cases(inp)

    # 1. vectorised launches (the default schedule) and NumPy, interleaved; half of the
    # repeats now, the rest after the Triton run, so a slow drift in the machine's load
    # reaches every column alike
    timers: dict[str, Callable[[], object]] = {}
    for c in cases:
        for mode in ("checked", "fast"):
            timers[f"{c.name}/{mode}"] = (lambda c=c, mode=mode: c.tessera(mode, "auto"))
        for label, fn in c.numpy.items():
            timers[f"{c.name}/np/{label}"] = fn
    for fn in timers.values():  # warm up: compile, first touch of memory, BLAS buffers
        fn()
    samples: dict[str, list[float]] = {}
    first = (args.repeats + 1) // 2
    sample(timers, first, samples)
    med = {k: statistics.median(v) for k, v in samples.items()}

    # 2. correctness of every Tessera result against float64 NumPy
    refs = {c.name: reference(c.name, inp) for c in cases}
    results: dict[tuple[str, str], np.ndarray] = {}
    for c in cases:
        for mode in ("checked", "fast"):
            results[(c.name, mode)] = c.tessera(mode, "auto").copy()  # buffers are reused
        results[(c.name, "numpy")] = next(iter(c.numpy.values()))()

    # 3. the sequential schedule: time per executed tile op
    seq_rows = []
    chain_x, chain_out = inp["chain_x"], np.zeros(1, np.float32)
    seq_cases: list[tuple[str, Callable[[str, str], object]]] = [
        (c.title, c.tessera) for c in cases]
    seq_cases.append(("scalar loop, 10^4 iterations, 1 tile",
                      lambda mode, schedule: scalar_chain(chain_x, chain_out, grid=1,
                                                          mode=mode, schedule=schedule)))
    # checked mode promises the same bits in every schedule; fast mode's float32 BLAS
    # products may round differently when the vectorised schedule folds the programs'
    # products into one call (a different sgemm kernel path), so it is only reported
    differ: dict[str, list[str]] = {"checked": [], "fast": []}
    for (title, fn), name in zip(seq_cases, [*(c.name for c in cases), "chain"]):
        for mode in ("checked", "fast"):
            out = fn(mode, "sequential")  # warm up (and compare with the vectorised bits)
            if name != "chain" and not np.array_equal(out, results[(name, mode)]):
                differ[mode].append(name)
            ops_seq = count_ops(lambda fn=fn, mode=mode: fn(mode, "sequential"))
            ops_vec = count_ops(lambda fn=fn, mode=mode: fn(mode, "auto"))
            t_seq = statistics.median(timed(lambda fn=fn, mode=mode: fn(mode, "sequential"))
                                      for _ in range(args.seq_repeats))
            t_vec = med.get(f"{name}/{mode}")
            marginal = None
            if t_vec is not None and ops_seq > ops_vec:
                marginal = (t_seq - t_vec) / (ops_seq - ops_vec)
            seq_rows.append((title, mode, ops_seq, ops_vec, t_seq, t_seq / ops_seq, marginal))

    # 4. Triton's interpreter, in its own environment and process
    side: dict[str, float] = {}  # Tessera medians of launches timed beside Triton's runs
    if args.no_triton:
        triton = TritonRun(skipped="--no-triton")
    else:
        reason = None
        if args.setup_triton and not args.triton_python.exists():
            reason = setup_triton()
        adjacent: dict[str, list[float]] = {}

        def between(name: str) -> None:
            keys = [f"{name}/checked", f"{name}/fast"]
            sample({k: timers[k] for k in keys}, 2, adjacent)

        triton = TritonRun(skipped=reason) if reason else run_triton(
            {k: v for k, v in inp.items() if k != "chain_x"}, [c.name for c in cases],
            args.triton_python, args.triton_repeats, args.triton_timeout, between)
        side = {k: statistics.median(v) for k, v in adjacent.items()}
    for name, out in triton.outputs.items():
        results[(name, "triton")] = out
    sample(timers, args.repeats - first, samples)
    med = {k: statistics.median(v) for k, v in samples.items()}

    # -- tables
    print(f"Tile kernels, OPENBLAS_NUM_THREADS=1, numpy {np.__version__}, Python "
          f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores; "
          f"Tessera/NumPy: median of {args.repeats}; Triton interpreter: "
          + (f"best of {args.triton_repeats} ({triton.version})" if not triton.skipped
             else f"skipped ({triton.skipped})") + "\n")
    print("| case | NumPy baseline | checked (ms) | fast (ms) | NumPy (ms) | Triton interp. (ms)"
          " | checked / NumPy | fast / NumPy | Triton / checked | Triton / fast |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    goals: list[str] = []
    for c in cases:
        tc, tf = med[f"{c.name}/checked"], med[f"{c.name}/fast"]
        tt = triton.seconds.get(c.name)
        # Triton / Tessera: against the Tessera launches timed beside Triton's runs
        sc, sf = side.get(f"{c.name}/checked", tc), side.get(f"{c.name}/fast", tf)
        for label in c.numpy:
            tn = med[f"{c.name}/np/{label}"]
            print(f"| {c.title} | {label} | {fmt_ms(tc)} | {fmt_ms(tf)} | {fmt_ms(tn)} | "
                  f"{fmt_ms(tt)} | {fmt_x(tc / tn)} | {fmt_x(tf / tn)} | "
                  f"{fmt_x(tt / sc if tt else None)} | {fmt_x(tt / sf if tt else None)} |")
            verdict = ", ".join(f"{m} {r:.2f}× {'met' if r <= c.goal else 'missed'}"
                                for m, r in (("checked", tc / tn), ("fast", tf / tn)))
            goals.append(f"{c.title}, Tessera / NumPy ({label}) ≤ {c.goal:g}×: {verdict}")
        if c.triton_goal is not None and tt is not None:
            verdict = ", ".join(f"{m} {r:.0f}× {'met' if r >= c.triton_goal else 'missed'}"
                                for m, r in (("vs checked", tt / sc), ("vs fast", tt / sf)))
            goals.append(f"{c.title}, Triton / Tessera ≥ {c.triton_goal:g}×: {verdict}")
    if side:
        print("\nTriton / Tessera divides Triton's best run by the median Tessera time of "
              "launches made right before and after each Triton run (checked, fast ms): "
              + "; ".join(f"{c.name} {fmt_ms(side[c.name + '/checked'])}, "
                          f"{fmt_ms(side[c.name + '/fast'])}" for c in cases
                          if c.name + "/checked" in side) + ".")
    if triton.errors:
        print()
        for name, err in triton.errors.items():
            print(f"Triton {name} failed: {err}")

    print("\nResults against a float64 NumPy reference (max |error|; ✓ = every element "
          "within the bound):\n")
    print("| case | bound | checked | fast | NumPy | Triton interp. |")
    print("|---|---|---:|---:|---:|---:|")
    failed = []
    for c in cases:
        ref, bound, how = refs[c.name]
        cells = []
        for impl in ("checked", "fast", "numpy", "triton"):
            r = results.get((c.name, impl))
            if r is None:
                cells.append("—")
                continue
            err, ok = check(r, ref, bound)
            cells.append(f"{err:.1e} {'✓' if ok else '✗'}")
            if not ok and impl in ("checked", "fast"):
                failed.append(f"{c.name}/{impl}")
        print(f"| {c.title} | {how.replace('|', chr(92) + '|')} | " + " | ".join(cells) + " |")
    print("\nSequential and vectorised schedules, same bits: checked "
          + (f"NO ({', '.join(differ['checked'])})" if differ["checked"] else "yes, every case")
          + "; fast (non-bitwise) "
          + (f"differ in {', '.join(differ['fast'])}" if differ["fast"] else "yes, every case"))

    print("\nSequential schedule (`schedule=\"sequential\"`: one group at a time), "
          f"median of {args.seq_repeats}:\n")
    print("| case | mode | tile ops (sequential) | tile ops (vectorised) | sequential (ms) | "
          "µs / op | marginal µs / op |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for title, mode, ops_s, ops_v, t, per, marginal in seq_rows:
        print(f"| {title} | {mode} | {ops_s} | {ops_v} | {fmt_ms(t)} | {per * 1e6:.2f} | "
              + ("—" if marginal is None else f"{marginal * 1e6:.2f}") + " |")
    chain = [per for title, _, _, _, _, per, _ in seq_rows if title.startswith("scalar")]
    goals.append("sequential per-op overhead ≤ 5 µs (scalar loop): " + ", ".join(
        f"{m} {p * 1e6:.2f} µs {'met' if p <= 5e-6 else 'missed'}"
        for m, p in zip(("checked", "fast"), chain)))

    print("\nGoals:\n")
    for line in goals:
        print(f"* {line}")
    print(f"\nTotal wall time {time.perf_counter() - started:.0f} s")
    if failed or differ["checked"]:
        print("FAILED checks: " + ", ".join(failed or ["checked schedules differ"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
