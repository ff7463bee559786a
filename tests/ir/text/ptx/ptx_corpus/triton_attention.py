"""Compiles flash-attention forward kernels written in Triton offline for sm_90a to
``triton_attention_sm90a.ptx`` (run in an environment with Triton, as
make_triton_ptx.sh does): the online softmax of FlashAttention-2 with ``exp2``, in
three forms Triton 3.9 lowers differently:

* ``attn_fwd_causal``: loads through pointers (``cp.async`` into a three-stage ring,
  ``wgmma`` with P from registers), causal blocks skipped and the diagonal masked;
* ``attn_fwd_tma``: host tensor descriptors (TMA loads on mbarriers, a TMA store);
* ``attn_fwd_ws``: the same with ``warp_specialize=True``: a producer partition issuing
  the TMA loads, consumer warpgroups with ``setmaxnreg``, full/empty mbarrier rings
  released by one thread per warpgroup arriving 128 times, CTA-wide
  ``barrier.sync`` at different instructions in different partitions.

A comment before each ``.entry`` gives its launch: threads, dynamic shared bytes, and
for descriptor kernels each tensor map's box and swizzle (Triton's metadata). A
descriptor argument is passed as Triton's launcher passes it: the ``CUtensorMap``, then
the tensor's two sizes (``s32``) and two strides (``s64``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, without its warning
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HEAD, BLOCK_M, BLOCK_N = 64, 64, 64


@triton.jit
def attn_fwd_causal(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, sm_scale, HEAD: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1) * seq_len * HEAD
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in range(0, (start_m + 1) * BLOCK_M, BLOCK_N):
        k = tl.load(k_ptr + base + (start_n + offs_n)[None, :] * HEAD + offs_d[:, None])
        qk = tl.dot(q, k)
        qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + (start_n + offs_n)[:, None] * HEAD + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    out = (acc / l_i[:, None]).to(o_ptr.dtype.element_ty)
    tl.store(o_ptr + base + offs_m[:, None] * HEAD + offs_d[None, :], out)


@triton.jit
def _attn_desc(desc_q, desc_k, desc_v, desc_o, seq_len, sm_scale, HEAD: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WS: tl.constexpr):
    row0 = tl.program_id(1) * seq_len
    q = desc_q.load([row0 + tl.program_id(0) * BLOCK_M, 0])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in tl.range(0, seq_len, BLOCK_N, warp_specialize=WS):
        qk = tl.dot(q, desc_k.load([row0 + start_n, 0]).T)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        acc = tl.dot(p.to(tl.bfloat16), desc_v.load([row0 + start_n, 0]), acc * alpha[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_ij
    desc_o.store([row0 + tl.program_id(0) * BLOCK_M, 0], (acc / l_i[:, None]).to(tl.bfloat16))


@triton.jit
def attn_fwd_tma(desc_q, desc_k, desc_v, desc_o, seq_len, sm_scale, HEAD: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _attn_desc(desc_q, desc_k, desc_v, desc_o, seq_len, sm_scale, HEAD, BLOCK_M, BLOCK_N,
               False)


@triton.jit
def attn_fwd_ws(desc_q, desc_k, desc_v, desc_o, seq_len, sm_scale, HEAD: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _attn_desc(desc_q, desc_k, desc_v, desc_o, seq_len, sm_scale, HEAD, BLOCK_M, BLOCK_N,
               True)


def _desc(rows: int) -> str:
    return f"tensordesc<bf16[{rows}, {HEAD}]>"


_POINTERS = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16"}
_DESCRIPTORS = {"desc_q": _desc(BLOCK_M), "desc_k": _desc(BLOCK_N), "desc_v": _desc(BLOCK_N),
                "desc_o": _desc(BLOCK_M)}
KERNELS = [(attn_fwd_causal, _POINTERS, 4), (attn_fwd_tma, _DESCRIPTORS, 4),
           (attn_fwd_ws, _DESCRIPTORS, 4)]


def _launch(name: str, compiled: object) -> str:
    md = compiled.metadata  # type: ignore[attr-defined]
    maps = "".join(f", tensor map {m['block_size'][0]}x{m['block_size'][1]} swizzle "
                   f"{16 << m['swizzle'] if m['swizzle'] else 0}"
                   for m in getattr(md, "tensordesc_meta", None) or [])
    return f"// {name}: {md.num_warps * 32} threads, {md.shared} bytes of dynamic shared " \
           f"memory{maps}\n"


def join(kernels: Iterable[tuple[Any, dict[str, str], dict[str, int], int]]) -> str:
    """One PTX module of ``(function, argument types, constants, warps)`` compiled for
    sm_90a with three stages: the first's header (Triton's are all alike: the dynamic
    buffer, one string), each one's body after a comment with its launch."""
    head, bodies = "", []
    for fn, args, constants, warps in kernels:
        signature = {**args, **dict.fromkeys(constants, "constexpr")}
        aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                   if args.get(name, "").startswith("*") or name in ("M", "N", "K")}
        compiled = triton.compile(ASTSource(fn, signature, constants, aligned),
                                  target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": warps, "num_stages": 3})
        ptx = compiled.asm["ptx"]
        start = ptx.index(".visible .entry")
        head = head or ptx[:start]
        body = ptx[start:].split("\n\t.section")[0].split("\n.section")[0]
        body = re.sub(r"\n\s*\.(file|loc)\b[^\n]*", "", body)  # no debug information
        bodies.append(_launch(fn.__name__, compiled) + body)
    return head + "\n".join(bodies)


def compile_all() -> str:
    """One PTX module holding every kernel."""
    constants = {"HEAD": HEAD, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}
    return join((fn, {**args, "seq_len": "i32", "sm_scale": "fp32"}, constants, warps)
                for fn, args, warps in KERNELS)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(compile_all())
