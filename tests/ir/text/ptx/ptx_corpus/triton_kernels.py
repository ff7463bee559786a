"""Compiles Triton tutorial-style kernels offline for sm_90a to ``triton_kernels_sm90a.ptx``
(one module of their ``.entry`` functions; run in an environment with Triton, as
make_triton_ptx.sh does): a row softmax of f16 (``exp`` as ``ex2.approx`` of f32), a
layer norm of bf16 (``rsqrt.approx``), f16 elementwise arithmetic (packed ``f16x2``
instructions), a cast to fp8 e4m3 (``cvt.rn.satfinite.e4m3x2.f32``), an exact GELU
plus ``tanh`` and ``log1p`` through CUDA's math library (libdevice: ``add.rz.ftz.f32``)
and a sum whose programs take turns through a spin lock (``atom.cas`` in a loop).

Each kernel is specialised as a launch on 16-byte aligned, contiguous tensors would be;
the PTX names the kernel's arguments in order, then Triton's two scratch pointers. A
comment before each ``.entry`` gives its launch: threads and dynamic shared bytes."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, without its warning
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.language.extra import libdevice


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)


@triton.jit
def layer_norm_kernel(out_ptr, in_ptr, w_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (d * rstd * w).to(tl.bfloat16), mask=mask)


@triton.jit
def half_axpy_kernel(out_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * y + x, y - x), mask=mask)


@triton.jit
def to_fp8_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(in_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x.to(tl.float8e4nv), mask=mask)


@triton.jit
def gelu_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(in_ptr + offs, mask=mask)
    y = 0.5 * x * (1 + libdevice.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offs, y + libdevice.tanh(x) + libdevice.log1p(tl.abs(x)), mask=mask)


@triton.jit
def locked_sum_kernel(out_ptr, in_ptr, lock_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(in_ptr + offs, mask=offs < n, other=0.0), 0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:  # a spin lock between programs
        pass
    tl.store(out_ptr, tl.load(out_ptr) + part)
    tl.atomic_xchg(lock_ptr, 0)


KERNELS = [
    (softmax_kernel, {"out_ptr": "*fp16", "in_ptr": "*fp16", "n_cols": "i32"}, 256, 4),
    (layer_norm_kernel, {"out_ptr": "*bf16", "in_ptr": "*bf16", "w_ptr": "*bf16",
                         "n_cols": "i32", "eps": "fp32"}, 256, 4),
    (half_axpy_kernel, {"out_ptr": "*fp16", "x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32"},
     1024, 4),
    (to_fp8_kernel, {"out_ptr": "*fp8e4nv", "in_ptr": "*fp32", "n": "i32"}, 1024, 4),
    (gelu_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "n": "i32"}, 1024, 4),
    (locked_sum_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "lock_ptr": "*i32",
                         "n": "i32"}, 256, 4),
]


def compile_all() -> str:
    """One PTX module holding every kernel (the first's header, each one's body)."""
    head, bodies = "", []
    for fn, sig, block, warps in KERNELS:
        signature = {**sig, "BLOCK": "constexpr"}
        attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                 if name in sig and (sig[name].startswith("*") or name in ("n", "n_cols"))}
        src = ASTSource(fn, signature, {"BLOCK": block}, attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": warps})
        ptx = compiled.asm["ptx"]
        start = ptx.index(".visible .entry")
        head = head or ptx[:start]
        body = ptx[start:].split("\n\t.section")[0].split("\n.section")[0]
        launch = (f"// {fn.__name__}: {warps * 32} threads, {compiled.metadata.shared} "
                  "bytes of dynamic shared memory\n")
        bodies.append(launch + re.sub(r"\n\s*\.(file|loc)\b[^\n]*", "", body))  # no debug
    return head + "\n".join(bodies)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(compile_all())
