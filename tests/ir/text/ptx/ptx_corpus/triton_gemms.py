"""Compiles matrix products written in Triton offline for sm_90a to
``triton_gemms_sm90a.ptx`` (run in an environment with Triton, as make_triton_ptx.sh
does), the forms Triton 3.9 lowers a ``tl.dot`` to beyond the corpus's cp.async matmul:

* ``matmul_tma``: host tensor descriptors, TMA loads on an mbarrier ring, two
  warpgroups of ``wgmma``, a TMA store of bf16;
* ``matmul_persistent``: the same walked by fewer CTAs than tiles (a persistent loop);
* ``matmul_fp8``: e4m3 operands through pointers, ``wgmma ... e4m3.e4m3`` into f32;
* ``matmul_tf32``: f32 operands, ``wgmma ... tf32.tf32`` fed the f32 bits unrounded;
* ``matmul_splitk``: one K slice per CTA, added into f32 C with sm_90's vector atomics
  (``atom.global.add.v4.f32``).

A comment before each ``.entry`` gives its launch: threads, dynamic shared bytes, and
for descriptor kernels each tensor map's box and swizzle (Triton's metadata). A
descriptor argument is passed as Triton's launcher passes it: the ``CUtensorMap``, then
the tensor's two sizes (``s32``) and two strides (``s64``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, without its warning
import triton
import triton.language as tl
from triton_attention import join  # the corpus's other generator, beside this one


@triton.jit
def _tile(a_desc, b_desc, c_desc, pid_m, pid_n, K, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr):
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pid_m * BM, k]), b_desc.load([k, pid_n * BN]), acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    _tile(a_desc, b_desc, c_desc, tl.program_id(0), tl.program_id(1), K, BM, BN, BK)


@triton.jit
def matmul_persistent(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0),
                         flatten=True):
        _tile(a_desc, b_desc, c_desc, tile // tiles_n, tile % tiles_n, K, BM, BN, BK)


@triton.jit
def _pointers(a_ptr, b_ptr, M, N, K, k0, BM: tl.constexpr, BN: tl.constexpr,
              BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = k0 + tl.arange(0, BK)
    return a_ptr + rm[:, None] * K + rk[None, :], b_ptr + rk[:, None] * N + rn[None, :], rm, rn


@triton.jit
def _product(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
    a, b, rm, rn = _pointers(a_ptr, b_ptr, M, N, K, 0, BM, BN, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a), tl.load(b), acc)
        a += BK
        b += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def matmul_fp8(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    _product(a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK)


@triton.jit
def matmul_tf32(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    _product(a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK)


@triton.jit
def matmul_splitk(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    a, b, rm, rn = _pointers(a_ptr, b_ptr, M, N, K, tl.program_id(2) * BK, BM, BN, BK)
    tl.atomic_add(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(tl.load(a), tl.load(b)))


def _desc(rows: int, cols: int) -> str:
    return f"tensordesc<bf16[{rows}, {cols}]>"


def _pointer_args(t: str, c: str) -> dict[str, str]:
    return {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "c_ptr": f"*{c}"}


_DESCRIPTORS = {"a_desc": _desc(128, 64), "b_desc": _desc(64, 128), "c_desc": _desc(128, 128)}
_BIG = {"BM": 128, "BN": 128, "BK": 64}
KERNELS = [(matmul_tma, _DESCRIPTORS, _BIG, 8), (matmul_persistent, _DESCRIPTORS, _BIG, 8),
           (matmul_fp8, _pointer_args("fp8e4nv", "fp32"), {"BM": 64, "BN": 64, "BK": 64}, 4),
           (matmul_tf32, _pointer_args("fp32", "fp32"), {"BM": 64, "BN": 64, "BK": 32}, 4),
           (matmul_splitk, _pointer_args("bf16", "fp32"), {"BM": 64, "BN": 64, "BK": 64}, 4)]


def compile_all() -> str:
    """One PTX module holding every kernel."""
    return join((fn, {**args, "M": "i32", "N": "i32", "K": "i32"}, constants, warps)
                for fn, args, constants, warps in KERNELS)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(compile_all())
