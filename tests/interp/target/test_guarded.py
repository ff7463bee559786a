"""Guarded ``ld``/``st`` in the Target IR interpreter (PTX ISA 8.x, sec. 9.3.1
"Predicated execution"): a thread whose guard is false executes nothing (no memory
access, so no out-of-bounds fault), and a guarded load's destination keeps the
``other`` value there; global and shared memory; vectors; and the PTX text."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.backend.ptx.render import render
from tessera.interp.target import run_target
from tessera.interp.target.state import TargetFault
from tessera.ir import parse_function, print_function
from tessera.ir.dialects.target.guarded import GuardedLoad, GuardedStore
from tests.interp.target.kit import U64, Kernel

T = 128


def _copy_prefix(n_guard: int, *, space: str = "global") -> Kernel:
    """out[t] = x[t] for t < n_guard, else -1.5 (loads guarded, stores guarded by t < 100)."""
    k = Kernel("prefix", [U64, U64], block=(T,))
    x, out = k.args
    t = k.tid()
    on = k.setp("lt", "u32", t, k.const(n_guard, "u32"))
    other = k.const(-1.5, "f32")
    if space == "global":
        v = k.op(GuardedLoad("global", "f32"), k.elem_addr(x, t, 4), on, other)
    else:
        buf = k.shared("buf", 4 * T, 16)
        k.st("shared", "f32", k.sh_addr(buf, t, 4), k.ld("global", "f32", k.elem_addr(x, t, 4)))
        k.bar()
        v = k.op(GuardedLoad("shared", "f32"), k.sh_addr(buf, t, 4), on, other)
    keep = k.setp("lt", "u32", t, k.const(100, "u32"))
    k.op(GuardedStore("global", "f32"), k.elem_addr(out, t, 4), v, keep)
    return k


@pytest.mark.parametrize("space", ["global", "shared"])
def test_guarded_off_threads_read_other_and_store_nothing(space: str) -> None:
    x = np.arange(T, dtype=np.float32) + 0.25
    out = np.full(T, 7.0, np.float32)
    run_target(_copy_prefix(40, space=space).build(), [x, out])
    want = np.where(np.arange(T) < 40, x, np.float32(-1.5))
    want[100:] = 7.0  # guarded-off stores leave memory alone
    assert np.array_equal(out, want)


def test_guarded_off_loads_past_the_end_are_not_accesses() -> None:
    """x holds 40 elements: threads 40.. would read past it, but their guard is off."""
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(T, np.float32)
    run_target(_copy_prefix(40).build(), [x, out])
    assert np.array_equal(out[:40], x) and np.all(out[40:100] == -1.5)


def test_a_guarded_on_access_out_of_bounds_is_still_a_fault() -> None:
    x = np.arange(40, dtype=np.float32)
    with pytest.raises(TargetFault, match="out of bounds"):
        run_target(_copy_prefix(41).build(), [x, np.zeros(T, np.float32)])


def test_guarded_store_out_of_bounds_only_where_on() -> None:
    k = Kernel("st", [U64], block=(T,))
    (out,) = k.args
    t = k.tid()
    k.op(GuardedStore("global", "s32"), k.elem_addr(out, t, 4), k.cvt("s32", "u32", t),
         k.setp("lt", "u32", t, k.const(64, "u32")))
    buf = np.zeros(64, np.int32)  # threads 64.. would store past its end
    run_target(k.build(), [buf])
    assert buf.tolist() == list(range(64))


def test_vector_guarded_load() -> None:
    """One guard covers all registers of a vector load; ``other`` is a vector too."""
    k = Kernel("vec", [U64, U64], block=(T,))
    x, out = k.args
    t = k.tid()
    on = k.setp("lt", "u32", t, k.const(3, "u32"))
    zero = k.const(0.0, "f32")
    other = k.pack("f32", zero, zero)
    v = k.op(GuardedLoad("global", "f32", 2), k.elem_addr(x, t, 8), on, other)
    lo, hi = k.unpack("f32", 2, v)
    k.st("global", "f32", k.elem_addr(out, t, 4), k.bin("add", "f32", lo, hi, "rn"))
    x = np.arange(6, dtype=np.float32)  # three pairs: threads 3.. read nothing
    out = np.full(T, 9.0, np.float32)
    run_target(k.build(), [x, out])
    assert out[:3].tolist() == [1.0, 5.0, 9.0] and np.all(out[3:] == 0.0)


def test_ptx_of_guarded_accesses() -> None:
    ptx = render(_copy_prefix(40).build())
    assert isinstance(ptx, str)
    lines = [line.strip() for line in ptx.splitlines()]
    ld = next(k for k, line in enumerate(lines) if " ld.global.f32 " in line)
    assert lines[ld].startswith("@%p") and lines[ld + 1].startswith("@!%p")
    assert lines[ld + 1].split()[0] == "@!" + lines[ld].split()[0][1:]
    assert " mov.f32 " in lines[ld + 1]
    assert any(line.startswith("@%p") and " st.global.f32 [" in line for line in lines)


def test_text_round_trip() -> None:
    fn = _copy_prefix(40).build()
    text = print_function(fn)
    assert "ptx.ld_guarded" in text and "ptx.st_guarded" in text
    assert print_function(parse_function(text)) == text


def test_guarded_ops_verify_their_operands() -> None:
    from tessera.errors import IRVerifyError

    k = Kernel("bad", [U64], block=(T,))
    (x,) = k.args
    on = k.setp("lt", "u32", k.tid(), k.const(3, "u32"))
    with pytest.raises(IRVerifyError, match="other"):
        k.op(GuardedLoad("global", "f32"), x, on, k.const(0, "s32"))
    with pytest.raises(IRVerifyError):
        k.op(GuardedStore("global", "f32"), x, k.const(0.0, "f32"), k.const(1, "u32"))
