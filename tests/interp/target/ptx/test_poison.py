"""Unwritten shared memory: a load of it is no error, a result that depends on it is.

Threads 16-31 of each kernel below load a shared word nobody wrote. Each body then uses
the loaded value (``%r2``) one way: selects past it, overwrites it, or lets it decide a
branch, an address, a store or a shuffle. The fault names the load's line and the
instruction the value reached."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target.state import TargetFault

HEAD = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .shared .align 4 .b32 s[32];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  shl.b32 %r3, %r1, 2;
  mov.u32 %r4, s;
  add.u32 %r4, %r4, %r3;
  setp.lt.u32 %p1, %r1, 16;
  @%p1 st.shared.u32 [%r4], %r1;
  bar.sync 0;
  ld.shared.u32 %r2, [%r4];
"""
TAIL = """  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd2, %rd1, %rd2;
  st.global.u32 [%rd2], %r5;
  ret;
}
"""
LOAD_LINE = HEAD.count("\n")  # the ld.shared


def run(body: str) -> np.ndarray:
    out = np.zeros(32, np.uint32)
    ts.ptx.load(HEAD + body + TAIL).kernel("k").run(grid=1, block=32, args=[out])
    return out


T = np.arange(32)


@pytest.mark.parametrize("body, want", [
    # selp passes on only the operand it selects: threads 16-31 select 99
    ("  selp.b32 %r5, %r2, 99, %p1;\n", np.where(T < 16, T, 99)),
    # an and of predicates that one defined false decides; an or one defined true decides
    ("  setp.gt.u32 %p2, %r2, 5;\n  and.pred %p3, %p2, %p1;\n  selp.b32 %r5, %r2, 99, %p3;\n",
     np.where((T < 16) & (T > 5), T, 99)),
    ("  setp.gt.u32 %p2, %r2, 5;\n  not.pred %p1, %p1;\n  or.pred %p3, %p1, %p2;\n"
     "  selp.b32 %r5, 99, %r2, %p3;\n", np.where((T < 16) & (T <= 5), T, 99)),
    # the register is written again with a defined value first
    ("  add.u32 %r2, %r2, 1;\n  mov.u32 %r2, 98;\n  @%p1 mov.u32 %r2, %r1;\n"
     "  mov.u32 %r5, %r2;\n", np.where(T < 16, T, 98)),
])
def test_an_unwritten_value_that_decides_nothing_is_no_error(body: str, want) -> None:
    np.testing.assert_array_equal(run(body), want)


@pytest.mark.parametrize("body, use", [
    ("  mov.u32 %r5, %r2;\n", "st.global.u32"),
    ("  add.u32 %r6, %r2, 1;\n  setp.gt.u32 %p2, %r6, 5;\n  mov.u32 %r5, 0;\n"
     "  @%p2 mov.u32 %r5, 1;\n", "the guard of @%p2 mov.u32"),
    ("  setp.gt.u32 %p2, %r2, 5;\n  mov.u32 %r5, 0;\n  @%p2 bra DONE;\n  mov.u32 %r5, 1;\n"
     "DONE:\n", "the branch @%p2 bra"),
    ("  and.b32 %r6, %r2, 124;\n  add.u32 %r6, %r6, %r4;\n  ld.shared.u32 %r5, [%r6];\n",
     "ld.shared.u32 %r5"),
    ("  shfl.sync.idx.b32 %r5, %r2, 0, 31, -1;\n", "shfl.sync"),
    # an and that no defined false decides: threads 16-31 have %p1 false, not
    ("  setp.gt.u32 %p2, %r2, 5;\n  not.pred %p1, %p1;\n  and.pred %p3, %p2, %p1;\n"
     "  selp.b32 %r5, 7, 8, %p3;\n", "st.global.u32"),
])
def test_an_unwritten_value_that_matters_is_reported_at_its_load(body: str, use: str) -> None:
    with pytest.raises(TargetFault, match="uninitialised shared read") as err:
        run(body)
    assert err.value.loc.line == LOAD_LINE
    assert use in err.value.message and "was never written" in err.value.message
    assert err.value.thread == 16
