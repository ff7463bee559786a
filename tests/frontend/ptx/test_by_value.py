"""Structs passed by value, pointers into arrays and arrays at chosen device addresses
(``ts.ptx.struct``, ``ts.ptx.pointer``, ``run(..., buffers=)``), the parameter space read
through an address (as nvcc reads a struct's fields) and the lane-mask registers."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import ArgumentError
from tessera.interp.target.state import TargetFault
from tests.frontend.ptx.corpus import STRUCT_AXPY

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"
#: NumPy scalar type -> the C type of the same layout
C_TYPES = {np.int8: ctypes.c_int8, np.uint16: ctypes.c_uint16, np.int32: ctypes.c_int32,
           np.float32: ctypes.c_float, np.int64: ctypes.c_int64, np.float64: ctypes.c_double}


def copy_kernel(size: int, align: int = 8) -> ts.ptx.PtxKernel:
    """A kernel that copies its struct parameter's bytes to ``out``, one ``ld.param.u8``
    at a time through the address ``mov`` takes of the parameter."""
    return ts.ptx.load(HEAD + f""".visible .entry copy(.param .align {align} .b8 s[{size}],
                                  .param .u64 out)
{{
  .reg .pred %p<2>;
  .reg .b16 %h<2>;
  .reg .b32 %r<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  mov.b64 %rd2, s;
  mov.u32 %r1, 0;
LOOP:
  cvt.u64.u32 %rd3, %r1;
  add.u64 %rd4, %rd2, %rd3;
  ld.param.u8 %h1, [%rd4];
  add.u64 %rd4, %rd1, %rd3;
  st.global.u8 [%rd4], %h1;
  add.u32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, {size};
  @%p1 bra LOOP;
  ret;
}}
""").kernel("copy")


FIELD = st.sampled_from([*C_TYPES, "pointer"])


@settings(max_examples=40, deadline=None)
@given(st.lists(FIELD, min_size=1, max_size=7), st.integers(0, 255))
def test_a_struct_is_laid_out_as_c_lays_it_out(kinds: list, seed: int) -> None:
    """Offsets, padding and size as ctypes (the host's C layout, which CUDA's device
    side shares) has them; the kernel reads the bytes back, pointers resolved to the
    addresses the buffers were given."""
    rng = np.random.default_rng(seed)
    arrays, fields, c_fields, values = [], [], [], []
    for k, kind in enumerate(kinds):
        if kind == "pointer":
            arrays.append(np.zeros(4, np.float32))
            fields.append(arrays[-1])
            c_fields.append((f"f{k}", ctypes.c_uint64))
            values.append(0x7000_0000_0000 + 0x1000 * len(arrays))
        else:
            v = kind(rng.integers(-100, 100))
            fields.append(v)
            c_fields.append((f"f{k}", C_TYPES[kind]))
            values.append(v.item())
    layout = type("S", (ctypes.Structure,), {"_fields_": c_fields})
    want = bytes(layout(*values))
    s = ts.ptx.struct(*fields)
    assert (s.size, s.align) == (ctypes.sizeof(layout), ctypes.alignment(layout))
    out = np.zeros(s.size, np.uint8)
    buffers = {0x7000_0000_0000 + 0x1000 * (k + 1): a for k, a in enumerate(arrays)}
    copy_kernel(s.size, s.align).run(args=[s, out], buffers=buffers)
    assert out.tobytes() == want


def test_a_kernel_reads_the_fields_of_a_struct_and_writes_through_its_pointer() -> None:
    """nvcc's way: named fields at constant offsets, a byte, and a field read through
    the parameter's address."""
    x = np.arange(40, dtype=np.float32)
    k = ts.ptx.load(STRUCT_AXPY).kernel("axpy")
    k.run(block=64, args=[ts.ptx.struct(x, np.int32(33), np.uint8(7), np.float32(0.5))])
    want = np.arange(40, dtype=np.float32)
    want[:33] = want[:33] * 0.5 + 7
    np.testing.assert_array_equal(x, want)
    # a pointer into the array: the kernel starts at element 8 and may run to its end
    y = np.arange(40, dtype=np.float32)
    k.run(block=64, args=[ts.ptx.struct(ts.ptx.pointer(y[8:]), np.int32(32), np.uint8(0),
                                        np.float32(2))])
    np.testing.assert_array_equal(y, np.r_[np.arange(8), np.arange(8, 40) * 2])
    with pytest.raises(TargetFault, match="past the end of argument 0"):
        k.run(block=64, args=[ts.ptx.struct(ts.ptx.pointer(y, 8 * 4), np.int32(33),
                                            np.uint8(0), np.float32(2))])


def test_arrays_at_chosen_addresses() -> None:
    """A pointer argument given as an int reaches the buffer placed at that address."""
    x = np.arange(128, dtype=np.float32)
    k = copy_kernel(8)
    out = np.zeros(8, np.uint8)
    k.run(args=[np.uint64(0x5000_0000_0100).tobytes(), out], buffers={0x5000_0000_0000: x})
    assert int(out.view(np.uint64)[0]) == 0x5000_0000_0100
    with pytest.raises(ArgumentError, match="overlap"):
        k.run(args=[bytes(8), out], buffers={0x5000_0000_0000: x, 0x5000_0000_0100: out})
    with pytest.raises(ArgumentError, match="multiple of 256"):
        k.run(args=[bytes(8), out], buffers={0x5000_0000_0010: x})
    with pytest.raises(ArgumentError, match="multiple of 256"):
        k.run(args=[bytes(8), out], buffers={0x100: x})


@pytest.mark.parametrize("arg, match", [
    (ts.ptx.struct(np.int32(1)), "the struct has 4 bytes, the parameter 8"),
    (np.int64(3), "a struct passed by value, not int64"),
    (bytes(9), "the struct has 9 bytes"),
])
def test_a_struct_argument_that_does_not_fit(arg, match: str) -> None:
    with pytest.raises(ArgumentError, match=match):
        copy_kernel(8).run(args=[arg, np.zeros(8, np.uint8)])


def test_struct_fields_need_a_layout() -> None:
    with pytest.raises(ArgumentError, match="struct field 1: int has no C layout"):
        ts.ptx.struct(np.int32(1), 5)
    with pytest.raises(ArgumentError, match="outside the array"):
        ts.ptx.pointer(np.zeros(4, np.int32), 17)
    assert ts.ptx.struct().size == 1  # a stateless functor, as CUB passes them
    assert ts.ptx.struct(np.int8(1), align=16).size == 16


def test_the_parameter_space_is_read_only_and_bounded() -> None:
    body = """.visible .entry k(.param .u64 a)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  mov.b64 %rd1, a;
  cvta.param.u64 %rd2, %rd1;
  %s;
  ret;
}
"""
    for line, match in [("ld.u32 %r1, [%rd2+8]", "the kernel's parameters take 8 bytes"),
                        ("st.u32 [%rd2], %r1", "kernel parameters are read-only")]:
        with pytest.raises(TargetFault, match=match):
            ts.ptx.load(HEAD + body.replace("%s", line)).kernel("k").run(args=[np.uint64(0)])


def test_lane_masks() -> None:
    text = HEAD + """.visible .entry masks(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 20;
  add.u64 %rd2, %rd1, %rd2;
  mov.u32 %r2, %lanemask_eq;
  mov.u32 %r3, %lanemask_lt;
  mov.u32 %r4, %lanemask_le;
  mov.u32 %r5, %lanemask_gt;
  mov.u32 %r6, %lanemask_ge;
  st.global.u32 [%rd2], %r2;
  st.global.u32 [%rd2+4], %r3;
  st.global.u32 [%rd2+8], %r4;
  st.global.u32 [%rd2+12], %r5;
  st.global.u32 [%rd2+16], %r6;
  ret;
}
"""
    out = np.zeros((64, 5), np.uint32)
    ts.ptx.load(text).kernel("masks").run(block=64, args=[out])
    for t in range(64):
        lane, full = t % 32, (1 << 32) - 1
        assert out[t].tolist() == [1 << lane, (1 << lane) - 1, (2 << lane) - 1,
                                   full & ~((2 << lane) - 1), full & ~((1 << lane) - 1)]


def test_arguments_from_the_bytes_a_launch_passes() -> None:
    """What ``cuLaunchKernel``'s ``kernelParams`` point at, turned into ``run``'s
    arguments: the struct stays bytes, the pointer is an address."""
    k = copy_kernel(8)
    out = np.zeros(8, np.uint8)
    raw = [bytes(range(8)), np.uint64(0x5000_0000_0000).tobytes()]
    args = k.arguments_from_bytes(raw)
    assert args[0] == bytes(range(8)) and args[1] == np.uint64(0x5000_0000_0000)
    k.run(args=args, buffers={0x5000_0000_0000: out})
    assert out.tolist() == list(range(8))
    with pytest.raises(ArgumentError, match="takes 2 arguments, got the bytes of 1"):
        k.arguments_from_bytes(raw[:1])
    with pytest.raises(ArgumentError, match="takes 8 bytes, not 4"):
        k.arguments_from_bytes([raw[0], bytes(4)])
