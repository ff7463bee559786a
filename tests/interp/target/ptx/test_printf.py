"""Device ``printf``: the interpreter's formatting against the C library's own
``snprintf`` (glibc, through ctypes), conversion by conversion with drawn flags,
widths, precisions, lengths and values; the argument buffer's layout and the errors."""

from __future__ import annotations

import ctypes
import platform
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target.ptx.printf import format_c

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="the reference is glibc's snprintf (%p prints "
                                       "(nil) there, as the CUDA driver's host side does)")


def snprintf(fmt: bytes, *args: object) -> str:
    buf = ctypes.create_string_buffer(4096)
    ctypes.CDLL(None).snprintf(buf, len(buf), fmt, *args)
    return buf.value.decode()


def arguments(raw: list[bytes]) -> object:
    """An argument reader over ``raw``, checking that each is read at its size."""
    it = iter(raw)

    def arg(size: int) -> bytes:
        data = next(it)
        assert len(data) == size
        return data
    return arg


@st.composite
def conversions(draw: st.DrawFn) -> tuple[bytes, list[object], list[bytes], dict[int, bytes]]:
    """(format, ctypes arguments, their device bytes, strings by address)."""
    conv = draw(st.sampled_from("diouxXeEfFgGaAcsp"))
    flags = "".join(draw(st.lists(st.sampled_from("-+ #0"), max_size=3)))
    width = draw(st.sampled_from(["", "*"]) | st.integers(0, 20).map(str))
    precision = "" if conv in "aA" else draw(
        st.sampled_from(["", ".", ".*"]) | st.integers(0, 12).map(lambda k: f".{k}"))
    length = draw(st.sampled_from(["", "h", "hh", "l", "ll"])) if conv in "diouxX" else ""
    c_args: list[object] = []
    raw: list[bytes] = []
    for star, low in ((width == "*", 0 if "0" in flags else -12), (precision == ".*", -12)):
        if star:  # (glibc pads a negative width's left-justified field with the 0 flag's
            k = draw(st.integers(low, 12))  # zeros on the right, where C says spaces)
            c_args.append(ctypes.c_int(k))
            raw.append(k.to_bytes(4, "little", signed=True))
    strings: dict[int, bytes] = {}
    bits = 64 if "l" in length else 32
    if conv in "di":
        v = draw(st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1))
        c_args.append(ctypes.c_longlong(v) if bits == 64 else ctypes.c_int(v))
        raw.append(v.to_bytes(bits // 8, "little", signed=True))
    elif conv in "ouxX":
        v = draw(st.integers(0, (1 << bits) - 1))
        c_args.append(ctypes.c_ulonglong(v) if bits == 64 else ctypes.c_uint(v))
        raw.append(v.to_bytes(bits // 8, "little"))
    elif conv == "c":
        v = draw(st.integers(32, 126))
        c_args.append(ctypes.c_int(v))
        raw.append(v.to_bytes(4, "little"))
    elif conv == "s":
        text = draw(st.text("abcXYZ 019", max_size=12)).encode()
        address = draw(st.sampled_from([0, 0x1000]))
        strings[address] = text
        c_args.append(ctypes.c_char_p(text if address else None))
        raw.append(address.to_bytes(8, "little"))
    elif conv == "p":
        v = draw(st.integers(0, 1 << 48))
        c_args.append(ctypes.c_void_p(v))
        raw.append(v.to_bytes(8, "little"))
    else:
        v = draw(st.floats(width=64) | st.sampled_from(
            [0.0, -0.0, float("inf"), -float("inf"), 5e-324, 0.5, 2.5, 123456789.125]))
        c_args.append(ctypes.c_double(v))
        raw.append(struct.pack("<d", v))
    return f"<%{flags}{width}{precision}{length}{conv}>".encode(), c_args, raw, strings


@settings(max_examples=400, deadline=None)
@given(case=conversions())
def test_each_conversion_formats_as_glibc_does(case: tuple) -> None:
    fmt, c_args, raw, strings = case
    text, used = format_c(fmt, arguments(raw), strings.__getitem__)  # type: ignore[arg-type]
    assert text == snprintf(fmt, *c_args), fmt
    assert used == len(raw)


def test_arguments_sit_at_their_natural_alignment() -> None:
    """char and short are promoted to 4 bytes, a double after an int starts at 8."""
    buffer = bytearray(40)
    buffer[0:4] = (65).to_bytes(4, "little")
    buffer[8:16] = struct.pack("<d", 2.5)
    buffer[16:18] = (-3).to_bytes(2, "little", signed=True)  # low half of the int
    buffer[16:20] = (-3).to_bytes(4, "little", signed=True)
    buffer[24:32] = (1 << 40).to_bytes(8, "little")
    offsets = []

    def arg(size: int) -> bytes:
        at = -(-(offsets[-1] if offsets else 0) // size) * size
        offsets.append(at + size)
        return bytes(buffer[at:at + size])
    text, used = format_c(b"%c %.1f %hd %lld %%", arg, bytes)
    assert (text, used) == ("A 2.5 -3 1099511627776 %", 4)
