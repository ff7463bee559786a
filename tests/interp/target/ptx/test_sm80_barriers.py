"""sm_80's asynchronous barriers as ``cuda::barrier`` compiles them: ``mbarrier.init``
with the arrival count in a register, ``mbarrier.arrive`` returning its phase's state,
``test_wait`` polling that state, and ``cp.async.mbarrier.arrive`` tying a thread's
copies to the barrier (with ``.noinc`` as one of the expected arrivals)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target.state import TargetFault
from tests.interp.target.ptx.harness import HEADER


def kernel(count: str, arrive: str) -> str:
    """Each thread copies its word of ``in`` into shared memory with ``cp.async``, ties
    the copy to the barrier, arrives, waits on its state token and stores the word of
    the next thread (mod the block) to ``out``."""
    return HEADER + f"""
.visible .entry k(.param .u64 pin, .param .u64 pout)
{{
    .reg .b32 %t, %n, %a, %b, %v, %s, %next;
    .reg .b64 %rd<8>, %state;
    .reg .pred %p, %done;
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 buf[128];
    ld.param.u64 %rd0, [pin];
    ld.param.u64 %rd1, [pout];
    mov.u32 %t, %tid.x;
    mov.u32 %n, %ntid.x;
    mov.u32 %b, bar;
    setp.eq.u32 %p, %t, 0;
    @%p mbarrier.init.shared.b64 [%b], {count};
    bar.sync 0;
    mul.wide.u32 %rd2, %t, 4;
    add.s64 %rd3, %rd0, %rd2;
    mov.u32 %a, buf;
    mad.lo.u32 %s, %t, 4, %a;
    cp.async.ca.shared.global [%s], [%rd3], 4;
    {arrive}
    mbarrier.arrive.shared.b64 %state, [%b];
WAIT:
    mbarrier.test_wait.shared.b64 %done, [%b], %state;
    @!%done bra WAIT;
    add.u32 %next, %t, 1;
    rem.u32 %next, %next, %n;
    mad.lo.u32 %s, %next, 4, %a;
    ld.shared.u32 %v, [%s];
    add.s64 %rd4, %rd1, %rd2;
    st.global.u32 [%rd4], %v;
    ret;
}}
"""


def run(text: str, n: int = 128) -> np.ndarray:
    x = np.arange(1000, 1000 + n, dtype=np.uint32)
    out = np.zeros(n, np.uint32)
    ts.ptx.load(text).kernel("k").run(grid=2, block=n, args=[x, out])
    return out


@pytest.mark.parametrize("count, arrive", [
    ("%n", "cp.async.mbarrier.arrive.shared.b64 [%b];"),
    ("128", "cp.async.mbarrier.arrive.shared.b64 [%b];"),
    ("256", "cp.async.mbarrier.arrive.noinc.shared.b64 [%b];"),  # the copies arrive too
])
def test_copies_complete_through_the_barrier(count: str, arrive: str) -> None:
    got = run(kernel(count, arrive))
    np.testing.assert_array_equal(got, 1000 + (np.arange(128) + 1) % 128)


def test_a_count_too_high_never_completes() -> None:
    """One arrival more than the block makes: the phase cannot complete."""
    with pytest.raises(TargetFault, match=r"phase never completes.*1 of 129 arrivals"):
        run(kernel("129", "cp.async.mbarrier.arrive.shared.b64 [%b];"))


def test_copies_not_tied_to_the_barrier_are_in_flight() -> None:
    with pytest.raises(TargetFault, match="async copy read before its wait"):
        run(kernel("%n", ""))
