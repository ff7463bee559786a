"""The PTX corpus that nvcc generated (tests/ir/text/ptx/ptx_corpus) and NumPy
references for its kernels."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np

import tessera as ts

CORPUS = Path(__file__).resolve().parents[2] / "ir" / "text" / "ptx" / "ptx_corpus"
NVCC_PTX = CORPUS / "kernels_sm80.ptx"
TRITON_PTX = CORPUS / "triton_matmul_sm90a.ptx"


#: ``x[i] = a * x[i] + k`` for ``i < n``, all in a struct passed by value as nvcc passes
#: ``struct { float *x; int n; unsigned char k; float a; }``: fields at constant offsets,
#: a byte, and one field read through the address ``mov`` takes of the parameter
STRUCT_AXPY = """.version 8.0
.target sm_80
.address_size 64
.visible .entry axpy(.param .align 8 .b8 p[24])
{
  .reg .pred %p<2>;
  .reg .b16 %h<2>;
  .reg .b32 %r<5>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [p+8];
  ld.param.u8 %h1, [p+12];
  mov.b64 %rd2, p;
  ld.param.f32 %f1, [%rd2+16];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p1, %r2, %r1;
  @%p1 ret;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd3, %rd1, %rd3;
  ld.global.f32 %f2, [%rd3];
  cvt.rn.f32.u16 %f3, %h1;
  fma.rn.f32 %f2, %f1, %f2, %f3;
  st.global.f32 [%rd3], %f2;
  ret;
}
"""


def line_of(text: str, needle: str, start: int = 0) -> int:
    """The 1-based number of the first line at or after ``start`` containing ``needle``."""
    for k, line in enumerate(text.splitlines()[start:], start=start + 1):
        if needle in line:
            return k
    raise AssertionError(f"{needle!r} not found")


def collatz_reference(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """steps, bits and wide of ``collatz_bits`` computed with Python integers."""
    steps, bits, wide = [], [], []
    m32, m64 = (1 << 32) - 1, (1 << 64) - 1
    for x0 in (int(t) for t in v):
        x, c = x0, 0
        while x > 1 and c < 1000:
            x = (3 * x + 1) & m32 if x & 1 else x >> 1
            c += 1
        steps.append(c)
        popc = bin(x0).count("1")
        clz = 32 - (x0 | 1).bit_length()
        brev = int(f"{x0:032b}"[::-1], 2)
        perm = (x0 & 0xFFFFFF) | ((c & 0xFF) << 24)
        funnel = ((((c << 32) | x0) << 7) >> 32) & m32
        total = (popc + (clz << 8) + (brev & 0xFF0000) + (perm & 0xFF000000)) & m32
        bits.append(total ^ funnel)
        signed = x0 - (1 << 32) if x0 >> 31 else x0
        wide.append((x0 * (c + 12345) + signed) & m64)
    return (np.array(steps, np.uint32), np.array(bits, np.uint32), np.array(wide, np.uint64))


def rounded(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Exact float64 values rounded once to ``dt`` (fp8 saturating, as ``.satfinite``);
    the bits, NaN as the canonical NaN of the format (0x7FFF, 0x7F)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dt.itemsize == 1:
            limit = float(ml_dtypes.finfo(dt).max)
            x = np.where(np.isnan(x), x, np.clip(x, -limit, limit))
        y = np.asarray(x, np.float64).astype(np.float32).astype(dt)
    bits = y.view(np.uint8 if dt.itemsize == 1 else np.uint16).copy()
    bits[np.isnan(x)] = 0x7F if dt.itemsize == 1 else 0x7FFF
    return bits


def triton_launch(text: str, name: str) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(threads, dynamic shared bytes, tensor maps' (rows, cols, swizzle)) of Triton
    kernel ``name``, from the comment the corpus's generators write before it."""
    m = re.search(rf"// {name}: (\d+) threads, (\d+) bytes[^\n]*", text)
    assert m is not None
    maps = re.findall(r"tensor map (\d+)x(\d+) swizzle (\d+)", m[0])
    return int(m[1]), int(m[2]), [(int(r), int(c), int(s)) for r, c, s in maps]


def descriptors(arrays: list[np.ndarray], maps: list[tuple[int, int, int]],
                box: tuple[int, int] | None = None) -> list[object]:
    """Triton tensor-descriptor arguments of ``arrays`` (``box`` overriding the
    metadata's): each one's map, two sizes and two strides."""
    return [x for a, (rows, cols, swizzle) in zip(arrays, maps)
            for x in ts.ptx.triton_descriptor(a, box or (rows, cols), swizzle)]


def scratch() -> list[np.ndarray]:
    """Triton's two global scratch pointers, after every kernel's own arguments."""
    return [np.zeros(1, np.uint8), np.zeros(1, np.uint8)]

