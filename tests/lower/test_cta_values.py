"""Index arithmetic evaluated for every thread while compiling
(tessera.lower.rules.ordered.values) against the Target IR interpreter running the same
instructions: each thread stores the value, and the compiler's evaluation, in any size
of chunk, must give the same numbers; values it cannot know give None."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target import run_target
from tessera.ir.core import Value
from tessera.ir.dialects.target import U64
from tessera.lower.rules.ordered.values import distinct, launch_values, monotonic, thread_values
from tests.interp.target.kit import Kernel

CTAS, BATCH, BLOCK = 3, 2, 64


def _index_kernel(divisor: int, shift: int) -> tuple[Kernel, Value]:
    """``s = floor-mod(gtid - 100, divisor) + ((tid.x >> shift) ^ ctaid.y) * -3`` in s32
    (a remainder fixed up toward the divisor's sign with setp/selp, as the lowering
    writes Python's ``%``), stored per thread."""
    k = Kernel("index", [U64], block=(BLOCK,), grid=(CTAS, BATCH, 1))
    cta = k.bin("add", "u32", k.bin("mul", "u32", k.sreg("ctaid.y"), k.sreg("nctaid.x")),
                k.sreg("ctaid.x"))
    g = k.cvt("s32", "u32", k.bin("add", "u32", k.bin("mul", "u32", cta, k.sreg("ntid.x")),
                                   k.sreg("tid.x")))
    x = k.bin("sub", "s32", g, k.const(100, "s32"))
    d = k.const(divisor, "s32")
    r = k.bin("rem", "s32", x, d)
    fix = k.bin("and", "pred", k.setp("ne", "s32", r, k.const(0, "s32")),
                k.bin("xor", "pred", k.setp("lt", "s32", r, k.const(0, "s32")),
                      k.setp("lt", "s32", d, k.const(0, "s32"))))
    mod = k.selp("s32", k.bin("add", "s32", r, d), r, fix)
    mix = k.bin("xor", "u32", k.bin("shr", "u32", k.sreg("tid.x"), k.const(shift, "u32")),
                k.sreg("ctaid.y"))
    s = k.bin("add", "s32", mod, k.bin("mul", "s32", k.cvt("s32", "u32", mix),
                                         k.const(-3, "s32")))
    k.st("global", "s32", k.elem_addr(k.args[0], k.cvt("u32", "s32", g), 4), s)
    return k, s


@settings(max_examples=25, deadline=None)
@given(divisor=st.sampled_from([-7, -1, 1, 3, 8, 100]), shift=st.integers(0, 7),
       chunk=st.integers(1, 400))
def test_thread_values_are_what_the_threads_compute(divisor: int, shift: int,
                                                    chunk: int) -> None:
    k, s = _index_kernel(divisor, shift)
    out = np.zeros(CTAS * BATCH * BLOCK, np.int32)
    run_target(k.build(), [out])
    got = thread_values(CTAS, BATCH, BLOCK, k.args, s, chunk=chunk)
    assert got is not None and np.array_equal(got, out)


@settings(max_examples=25, deadline=None)
@given(divisor=st.sampled_from([-7, -1, 1, 3, 8, 100, 1000]), shift=st.integers(0, 7),
       chunk=st.integers(1, 400))
def test_monotonic_agrees_with_the_values(divisor: int, shift: int, chunk: int) -> None:
    """The chunked check of strictly monotonic values says what the whole array says."""
    k, s = _index_kernel(divisor, shift)
    values = thread_values(CTAS, BATCH, BLOCK, k.args, s)
    assert values is not None
    assert monotonic(CTAS, BATCH, BLOCK, k.args, s, chunk=chunk) == \
        bool(np.all(np.diff(values) > 0) or np.all(np.diff(values) < 0))


def test_values_the_compiler_cannot_know() -> None:
    """A loaded value, and ``%tid.x`` where only CTAs are evaluated, are not known."""
    k = Kernel("loads", [U64], block=(BLOCK,))
    loaded = k.ld("global", "u32", k.args[0])
    assert launch_values(1, 1, BLOCK, k.args)(loaded) is None
    assert launch_values(1, 1, BLOCK, k.args)(k.sreg("tid.x")) is None
    assert launch_values(1, 1, BLOCK, k.args, threads=True)(k.sreg("tid.x")) is not None


@given(st.lists(st.integers(-2**62, 2**62), max_size=200))
def test_distinct_is_numpys_unique(values: list[int]) -> None:
    x = np.array(values, np.int64)
    assert np.array_equal(distinct(x), np.unique(x))
