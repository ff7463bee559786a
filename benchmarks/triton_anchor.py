"""Triton's interpreter (``TRITON_INTERPRET=1``) on the cases of ``tile_kernels.py``.

Runs in its own environment (``benchmarks/setup_triton_env.sh`` creates
``benchmarks/.env-triton`` with Triton and a CPU build of PyTorch); ``tile_kernels.py``
starts it as a subprocess. It reads the inputs from an ``.npz`` file, runs each case
``--repeats`` times (the interpreter is slow: about 70 µs per tile op, FACTS.md), writes
the outputs of the last run to another ``.npz`` file and prints one JSON object on its
last line of stdout::

    {"triton": "3.x", "torch": "2.x", "cases": {"gemm": {"seconds": [..]}, ...}}

A case that fails reports ``{"error": "..."}`` instead of seconds. With ``--serve`` it
answers one JSON line per command read from stdin instead (``run NAME``, ``save``):
``tile_kernels.py`` uses that to time Tessera right before and after each Triton run.

The kernels follow the Triton tutorials (vector add, fused softmax, matmul, fused
attention forward) plus a block reduction; each keeps the tile algorithm of its Tessera
counterpart.

    .env-triton/bin/python benchmarks/triton_anchor.py --inputs in.npz --outputs out.npz
"""

from __future__ import annotations

import os
import sys

# Before NumPy, torch or Triton load: one BLAS thread, and Triton's CPU interpreter.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["TRITON_INTERPRET"] = "1"

if __name__ == "__main__" and len(sys.argv) == 1:  # e.g. from run_all.py, in the main venv
    print("triton_anchor.py runs inside tile_kernels.py (in benchmarks/.env-triton); "
          "run benchmarks/tile_kernels.py")
    sys.exit(0)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

torch.set_num_threads(1)


# -- kernels ---------------------------------------------------------------------------

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Tutorial 01: each program adds one BLOCK of the vectors."""
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    """Tutorial 03: one (BLOCK_M, BLOCK_N) tile of C per program, grouped ordering of
    the programs, a loop over K in BLOCK_K steps accumulating in float32."""
    pid = tl.program_id(axis=0)
    n_m = tl.cdiv(M, BLOCK_M)
    n_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * n_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(n_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % per_group) % rows_in_group)
    pid_n = (pid % per_group) // rows_in_group
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    """Tutorial 02 (fused softmax), one row per program."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, num / den, mask=mask)


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, stride_z, stride_s, S,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Tutorial 06 (fused attention forward), non-causal, float32, natural exp: one
    program per BLOCK_M query rows of one batch*head, online softmax over BLOCK_N keys."""
    start_m = tl.program_id(axis=0)
    z = tl.program_id(axis=1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    base = z * stride_z
    q = tl.load(q_ptr + base + rows[:, None] * stride_s + dims[None, :])
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, S, BLOCK_N):
        kt = tl.load(k_ptr + base + (start_n + cols)[None, :] * stride_s + dims[:, None])
        s = tl.dot(q, kt, input_precision="ieee") * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + (start_n + cols)[:, None] * stride_s + dims[None, :])
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + base + rows[:, None] * stride_s + dims[None, :], acc / l_i[:, None])


@triton.jit
def block_sum_kernel(x_ptr, total_ptr, n, GROUP: tl.constexpr):
    """A block reduction: program p is a group of GROUP lanes; lane j of program p sums
    elements p*GROUP + j, + programs*GROUP, ... (the Tessera tile order), then the
    group reduces its lanes and adds its partial sum into total atomically."""
    pid = tl.program_id(axis=0)
    lanes = tl.arange(0, GROUP)
    stride = tl.num_programs(axis=0) * GROUP
    acc = tl.zeros([GROUP], tl.float32)
    for start in range(pid * GROUP, n, stride):
        offs = start + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.debug_barrier()  # a no-op in the interpreter; the reduction below is one op
    tl.atomic_add(total_ptr, tl.sum(acc, axis=0))


# -- launches --------------------------------------------------------------------------

def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=torch.float32)
    grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                        b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)
    return c


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols,
                            BLOCK=triton.next_power_of_2(cols))
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    bh, s, d = q.shape
    out = torch.empty_like(q)
    attention_kernel[(triton.cdiv(s, 64), bh)](q, k, v, out, 1.0 / math.sqrt(d),
                                               q.stride(0), q.stride(1), s,
                                               D=d, BLOCK_M=64, BLOCK_N=64)
    return out


def block_sum(x: torch.Tensor) -> torch.Tensor:
    total = torch.zeros(1, dtype=torch.float32)
    block_sum_kernel[(16,)](x, total, x.numel(), GROUP=256)
    return total


CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[str, ...]]] = {
    "vector_add": (vector_add, ("add_x", "add_y")),
    "gemm": (matmul, ("gemm_a", "gemm_b")),
    "attention": (attention, ("attn_q", "attn_k", "attn_v")),
    "softmax": (softmax, ("softmax_x",)),
    "reduction": (block_sum, ("reduce_x",)),
}


def run_case(name: str, inputs: Any, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Run one case once: ``{"seconds": s}`` or ``{"error": text}``; keeps its output."""
    fn, names = CASES[name]
    tensors = [torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in names]
    try:
        start = time.perf_counter()
        out = fn(*tensors)
        seconds = time.perf_counter() - start
    except Exception as err:  # report it; the other cases still run
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    outputs[name] = out.numpy()
    return {"seconds": seconds}


def serve(inputs: Any, out_path: str) -> None:
    """Line protocol on stdin/stdout, so the caller can time its own launches right
    before and after each Triton run: ``run NAME`` answers ``{"case": NAME, "seconds":
    s}`` (or ``"error"``), ``save`` writes the outputs so far and answers
    ``{"saved": n}``; end of input ends the process."""
    outputs: dict[str, np.ndarray] = {}
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["run"] and len(words) == 2 and words[1] in CASES:
            reply: dict[str, Any] = {"case": words[1], **run_case(words[1], inputs, outputs)}
        elif words == ["save"]:
            np.savez(out_path, **outputs)
            reply = {"saved": len(outputs)}
        else:
            reply = {"error": f"unknown command {line.strip()!r}"}
        print(json.dumps(reply), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", required=True, help=".npz with the input arrays")
    parser.add_argument("--outputs", required=True, help=".npz to write the results to")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--serve", action="store_true",
                        help="answer 'run NAME' / 'save' lines on stdin (see serve())")
    args = parser.parse_args()
    inputs = np.load(args.inputs)
    header = {"triton": triton.__version__, "torch": torch.__version__,
              "numpy": np.__version__}
    if args.serve:
        print(json.dumps({**header, "ready": True}), flush=True)
        serve(inputs, args.outputs)
        return 0
    cases: dict[str, Any] = {}
    outputs: dict[str, np.ndarray] = {}
    for name in args.cases:
        runs = [run_case(name, inputs, outputs) for _ in range(args.repeats)]
        failed = [r for r in runs if "error" in r]
        cases[name] = failed[0] if failed else {"seconds": [r["seconds"] for r in runs]}
        print(f"triton {name}: {cases[name]}", file=sys.stderr, flush=True)
    np.savez(args.outputs, **outputs)
    print(json.dumps({**header, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
