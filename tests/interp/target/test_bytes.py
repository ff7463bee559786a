"""Byte loads and stores in the Target IR interpreter (``ptx.ld_byte``/``ptx.st_byte``,
the instructions the lowering of bool, int8 and fp8 tiles emits): one byte each, or
vectors of 2 and 4, zero- or sign-extended into 32-bit registers and stored from their
low bytes; faults at byte granularity, so a buffer whose size is not a multiple of 4
is never read past its end unnoticed, and a vector must be aligned to its size; bytes
of one word written by different threads are not a race; the text round trip and the
PTX (assembled by ptxas)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.backend.ptx.render import render
from tessera.errors import IRVerifyError
from tessera.interp.target import run_target
from tessera.interp.target.state import TargetFault
from tessera.ir import parse_function, print_function
from tessera.ir.dialects.target.ptx_ops import ByteLoad, ByteStore
from tests.interp.target.kit import U64, Kernel, reg

T = 128


def _negate_bytes(n: int, reach: int) -> Kernel:
    """Threads t < reach: out[t] = (x[t] != 0 ? 0 : 1) over bool bytes, and
    neg[t] = -x[t] as a signed byte."""
    k = Kernel("bytes", [U64, U64, U64], block=(T,))
    x, out, neg = k.args
    t = k.tid()

    def body() -> None:
        flag = k.op(ByteLoad("global"), k.elem_addr(x, t, 1))
        on = k.setp("ne", "u32", flag, k.const(0, "u32"))
        k.op(ByteStore("global"), k.elem_addr(out, t, 1),
             k.selp("u32", k.const(0, "u32"), k.const(1, "u32"), on))
        signed = k.op(ByteLoad("global", True), k.elem_addr(x, t, 1))
        k.op(ByteStore("global"), k.elem_addr(neg, t, 1), k.un("neg", "s32", signed))
    k.if_(k.setp("lt", "u32", t, k.const(reach, "u32")), body)
    return k


def test_bool_bytes_of_an_odd_sized_buffer() -> None:
    x = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1], np.uint8)  # 15 bytes
    out, neg = np.full(15, 9, np.uint8), np.zeros(15, np.int8)
    run_target(_negate_bytes(15, 15).build(), [x.view(bool), out, neg])
    assert out.tolist() == (1 - x).tolist()
    assert neg.tolist() == (-x.astype(np.int8)).tolist()


def test_signed_bytes_sign_extend() -> None:
    x = np.array([0, 1, 127, 0x80, 0xFF, 0x7F, 3], np.uint8).view(np.int8)
    neg = np.zeros(7, np.int8)
    run_target(_negate_bytes(7, 7).build(), [x.view(np.uint8).copy(), np.zeros(7, np.uint8),
                                             neg])
    assert neg.tolist() == [0, -1, -127, -128, 1, -127, -3]  # -(-128) wraps in a byte


def test_a_byte_read_one_past_the_end_is_a_fault() -> None:
    x = np.ones(15, bool)
    with pytest.raises(TargetFault, match="out of bounds") as err:
        run_target(_negate_bytes(15, 16).build(), [x, np.zeros(16, np.uint8),
                                                   np.zeros(16, np.int8)])
    assert "1 bytes past the end" in str(err.value)


def test_bytes_of_one_shared_word_from_different_threads_are_no_race() -> None:
    """Thread t writes shared byte t; after a barrier it reads byte t ^ 1, another
    thread's byte of the same 2-byte pair; a byte never written is an error."""
    k = Kernel("sh", [U64], block=(T,))
    (out,) = k.args
    t = k.tid()
    buf = k.shared("buf", T + 4, 16)
    k.op(ByteStore("shared"), k.sh_addr(buf, t, 1), t)
    k.bar()
    other = k.bin("xor", "u32", t, k.const(1, "u32"))
    v = k.op(ByteLoad("shared"), k.sh_addr(buf, other, 1))
    k.op(ByteStore("global"), k.elem_addr(out, t, 1), v)
    out = np.zeros(T, np.uint8)
    run_target(k.build(), [out])
    assert out.tolist() == [t ^ 1 for t in range(T)]

    bad = Kernel("sh_unwritten", [U64], block=(T,))
    buf = bad.shared("buf", T + 4, 16)
    bad.op(ByteStore("shared"), bad.sh_addr(buf, bad.tid(), 1), bad.tid())
    bad.bar()
    past = bad.bin("add", "u32", bad.tid(), bad.const(1, "u32"))
    bad.op(ByteStore("global"), bad.elem_addr(bad.args[0], bad.tid(), 1),
           bad.op(ByteLoad("shared"), bad.sh_addr(buf, past, 1)))
    with pytest.raises(TargetFault, match="uninitiali"):
        run_target(bad.build(), [np.zeros(T, np.uint8)])


def test_text_round_trip_and_ptx() -> None:
    fn = _negate_bytes(15, 15).build()
    text = print_function(fn)
    assert "ptx.ld_byte" in text and "ptx.st_byte" in text
    assert print_function(parse_function(text)) == text
    ptx = render(fn)
    assert isinstance(ptx, str)
    assert "ld.global.u8 " in ptx and "ld.global.s8 " in ptx and "st.global.u8 [" in ptx


def test_byte_stores_take_32_bit_integers_only() -> None:
    k = Kernel("bad", [U64], block=(T,))
    (x,) = k.args
    with pytest.raises(IRVerifyError, match=r"ptx\.st_byte"):
        k.op(ByteStore("global"), x, k.const(1.0, "f32"))
    with pytest.raises(IRVerifyError, match="predicates"):
        k.setp("ne", "pred", k.setp("lt", "u32", k.tid(), k.tid()),
               k.setp("lt", "u32", k.tid(), k.tid()))


def _reverse_words(offset: int = 0) -> Kernel:
    """Thread t reverses the 4 bytes of word t with one ``ld.v4.s8`` and two
    ``st.v2.u8``; ``offset`` moves the load off its alignment."""
    k = Kernel("rev", [U64, U64], block=(T,))
    x, out = k.args
    t = k.tid()
    b0, b1, b2, b3 = k.unpack("s32", 4, k.op(ByteLoad("global", True, offset, 4),
                                             k.elem_addr(x, t, 4)))
    k.op(ByteStore("global", 0, 2), k.elem_addr(out, t, 4), k.pack("s32", b3, b2))
    k.op(ByteStore("global", 2, 2), k.elem_addr(out, t, 4), k.pack("s32", b1, b0))
    return k


def test_vectors_of_bytes() -> None:
    from tessera.backend.ptx.driver.assemble import assemble

    x = np.arange(4 * T, dtype=np.uint8) * 3
    out = np.zeros(4 * T, np.uint8)
    fn = _reverse_words().build()
    run_target(fn, [x, out])
    assert out.tolist() == x.reshape(T, 4)[:, ::-1].ravel().tolist()
    assert print_function(parse_function(print_function(fn))) == print_function(fn)
    ptx = render(fn)
    assert isinstance(ptx, str)
    assert "ld.global.v4.s8 {" in ptx and "st.global.v2.u8 [" in ptx
    assemble(ptx, "sm_80")
    with pytest.raises(TargetFault, match="misaligned"):
        run_target(_reverse_words(offset=2).build(), [np.zeros(4 * T + 4, np.uint8), out])


def test_byte_vectors_verify_their_width() -> None:
    k = Kernel("bad", [U64], block=(T,))
    (x,) = k.args
    with pytest.raises(IRVerifyError, match="1, 2 or 4"):
        k.op(ByteLoad("global", False, 0, 3), x)
    with pytest.raises(IRVerifyError, match="2 registers"):
        k.op(ByteStore("global", 0, 2), x, k.const(1, "u32"))
    assert reg("u32", 2) == k.op(ByteLoad("global", False, 0, 2), x).type
