"""Integer tensor-core products in the Target IR interpreter: third-party-style PTX text
with ``mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32`` (its operands
placed in registers by the fragment layouts of PTX ISA sec. 9.7.14.5.10/.11, written
out here from the ISA's formulas) equals NumPy's integer product, wrapped to 32 bits,
or clamped with ``.satfinite``; the ops verify the ISA's type and shape rules, and
integer ``wgmma`` text (no scale or transpose immediates) is read."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import IRVerifyError
from tessera.ir.dialects.target import RegType, async_ops
from tessera.ir.text.ptx import parse_ptx
from tests.interp.target.tensorcore.mma_text import c_fragments, d_matrix, one_mma_kernel


def _fragments(a: np.ndarray, b: np.ndarray, c: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per lane: A's 16 bytes, B's 8 bytes and C's 4 words (sec. 9.7.14.5.10/.11:
    group g = lane / 4, t = lane % 4; A byte i is row g (+8 for bytes 4-7 and 12-15),
    column 4 t + i % 4 (+16 for bytes 8-15); B byte i is row (k) 4 t + i % 4 (+16 for
    bytes 4-7), column g; C word i is row g (+8 for words 2, 3), column 2 t + i % 2)."""
    fa = np.zeros((32, 16), a.dtype)
    fb = np.zeros((32, 8), b.dtype)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(16):
            fa[lane, i] = a[g + 8 * ((i >> 2) & 1), 4 * t + i % 4 + 16 * (i >> 3)]
        for i in range(8):
            fb[lane, i] = b[4 * t + i % 4 + 16 * (i >> 2), g]
    return fa.view(np.uint32), fb.view(np.uint32), c_fragments(c.astype(np.int32))


def _run(a: np.ndarray, b: np.ndarray, c: np.ndarray, sat: bool = False) -> np.ndarray:
    names = {np.dtype(np.int8): "s8", np.dtype(np.uint8): "u8"}
    text = one_mma_kernel(f"mma.sync.aligned.m16n8k32.row.col{'.satfinite' if sat else ''}"
                          f".s32.{names[a.dtype]}.{names[b.dtype]}.s32", "s32")
    fa, fb, fc = _fragments(a, b, c)
    fd = np.zeros((32, 4), np.int32)
    ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[fa, fb, fc, fd])
    return d_matrix(fd)


rng = np.random.default_rng(31)


@pytest.mark.parametrize(("ta", "tb"), [(np.int8, np.int8), (np.uint8, np.uint8),
                                        (np.int8, np.uint8), (np.uint8, np.int8)])
def test_mma_sync_m16n8k32_integers_equal_numpy(ta: type, tb: type) -> None:
    a = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, (16, 32)).astype(ta)
    b = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, (32, 8)).astype(tb)
    c = rng.integers(-2**20, 2**20, (16, 8)).astype(np.int32)
    want = c + a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(_run(a, b, c), want)


def test_s32_accumulators_wrap_and_satfinite_clamps() -> None:
    a = np.full((16, 32), -128, np.int8)
    b = np.full((32, 8), -128, np.int8)  # every product 2^14, the sum 2^19
    c = np.full((16, 8), 2**31 - 2**18, np.int32)
    c[1] = -2**31  # no overflow on this row
    b[:, 3] = 127  # a negative sum for column 3
    c[:, 3] = -2**31 + 5
    wide = c + a.astype(np.int64) @ b.astype(np.int64)
    assert (wide > 2**31 - 1).any() and (wide < -2**31).any()
    np.testing.assert_array_equal(_run(a, b, c), wide.astype(np.int32))  # low 32 bits
    np.testing.assert_array_equal(_run(a, b, c, sat=True),
                                  np.clip(wide, -2**31, 2**31 - 1))


@pytest.mark.parametrize(("op", "message"), [
    (async_ops.MmaSync("m16n8k32", "s8", "s8"), "accumulates in s32"),
    (async_ops.MmaSync("m16n8k32", "s8", "e4m3", "s32"), "cannot multiply"),
    (async_ops.MmaSync("m16n8k16", "bf16", "bf16", "f32", 1), "satfinite"),
    (async_ops.MmaSync("m16n8k16", "s8", "s8", "s32"), "not supported"),
    (async_ops.Wgmma(40, "s8", "s8", 0, 0, "s32"), "no m64n40k32"),
    (async_ops.Wgmma(64, "u8", "s8", 0, 1, "s32"), "transposes only 16-bit"),
])
def test_integer_tensor_core_ops_verify_the_isa_rules(op: async_ops.Op, message: str) -> None:
    ctype = getattr(op, "ctype", "f32")
    if isinstance(op, async_ops.MmaSync):
        operands = [RegType("b32", 4), RegType("b32", 2), RegType(ctype, 4)]
    else:
        operands = [RegType(ctype, op.n // 2), RegType("u64"), RegType("u64"),
                    RegType("pred")]
    with pytest.raises(IRVerifyError, match=message):
        op.infer(operands)


@pytest.mark.parametrize("sat", ["", ".satfinite"])
def test_integer_wgmma_text_is_read(sat: str) -> None:
    text = f"""{one_mma_kernel("", "s32").split(".visible")[0].replace("sm_80", "sm_90a")}
.visible .entry w(.param .u64 pa)
{{
    .reg .s32 %r<4>;
    .reg .b64 %rd<2>;
    .reg .pred %p;
    mov.s32 %r0, 0;
    mov.s32 %r1, 0;
    mov.s32 %r2, 0;
    mov.s32 %r3, 0;
    mov.b64 %rd0, 0;
    mov.b64 %rd1, 0;
    setp.eq.s32 %p, %r0, 1;
    wgmma.mma_async.sync.aligned.m64n8k32{sat}.s32.s8.u8 {{%r0, %r1, %r2, %r3}}, %rd0,
        %rd1, %p;
    ret;
}}
"""
    kernel = parse_ptx(text).kernels["w"]
    ops = [i.op for blk in kernel.blocks for p in blk.body for i in p.instrs
           if isinstance(i.op, async_ops.Wgmma)]
    assert ops == [async_ops.Wgmma(8, "s8", "u8", 0, 0, "s32", int(bool(sat)))]
