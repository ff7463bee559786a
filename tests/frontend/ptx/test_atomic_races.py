"""Atomics on shared memory race with other threads' plain accesses that no barrier
orders, never with each other (PTX ISA, "Memory Consistency Model": an atomic is
morally strong, a plain access is not). The kernel is a shared-memory histogram of 64
threads over 32 bins, thread ``t`` counting bin ``7t mod 32``: the bins are cleared by
threads 0-31, counted by ``atom`` or ``red``, and read back by threads 0-31, with
either barrier left out in turn."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target import TargetFault
from tests.frontend.ptx.test_clusters import cluster_module

#: threads 0-31 clear their bin (%r4: buf + 4 tid) ...
CLEAR = ["setp.lt.u32 %p1, %r1, 32;", "mov.u32 %r2, buf;", "shl.b32 %r3, %r1, 2;",
         "add.u32 %r4, %r2, %r3;", "@%p1 st.shared.u32 [%r4], 0;"]
#: ... every thread counts bin 7 tid mod 32 (%r6) ...
COUNT = ["mul.lo.u32 %r5, %r1, 7;", "and.b32 %r5, %r5, 31;", "shl.b32 %r5, %r5, 2;",
         "add.u32 %r6, %r2, %r5;"]
#: ... and threads 0-31 read their bin back into out
READ = ["@%p1 ld.shared.u32 %r8, [%r4];", "mul.wide.u32 %rd2, %r1, 4;",
        "add.s64 %rd3, %rd1, %rd2;", "@%p1 st.global.u32 [%rd3], %r8;"]
UPDATE = {"atom": "atom.shared.add.u32 %r7, [%r6], 1;", "red": "red.shared.add.u32 [%r6], 1;",
          "atom.exch": "atom.shared.exch.b32 %r7, [%r6], 2;"}


def histogram(update: str, before: bool, after: bool) -> np.ndarray:
    bar = ["bar.sync 0;"]
    body = [*CLEAR, *bar * before, *COUNT, UPDATE[update], *bar * after, *READ]
    out = np.zeros(64, np.uint32)
    cluster_module("\n".join(body), target="sm_80").kernel("k").run(grid=1, block=64,
                                                                     args=[out])
    return out[:32]


@pytest.mark.parametrize("update", ["atom", "red"])
def test_a_histogram_with_both_barriers(update: str) -> None:
    """Each bin counted twice (7 is odd: t -> 7t mod 32 takes each bin once per 32
    threads); the 64 atomics on 32 addresses race with nothing."""
    np.testing.assert_array_equal(histogram(update, True, True), np.full(32, 2))


@pytest.mark.parametrize("update", ["atom", "red", "atom.exch"])
def test_counting_before_the_bins_are_cleared(update: str) -> None:
    """Thread 0 counts bin 0, which it cleared itself: ordered. Thread 1, the first
    report, counts bin 7, which thread 7 cleared."""
    with pytest.raises(TargetFault) as err:
        histogram(update, False, True)
    assert err.value.what == "shared memory race"
    assert "atomic on shared address 1052 also accessed by thread 7 without a bar.sync " \
           "between (thread 1 of CTA (0, 0, 0))" in str(err.value)


@pytest.mark.parametrize("update", ["atom", "red"])
def test_reading_a_bin_before_the_count_is_done(update: str) -> None:
    """Thread 0 reads bin 0, counted by itself and by thread 32."""
    with pytest.raises(TargetFault) as err:
        histogram(update, True, False)
    assert err.value.what == "shared memory race"
    assert "read of shared address 1024 updated by an atomic or strong store of thread 32 " \
           "without a bar.sync between (thread 0 of CTA (0, 0, 0))" in str(err.value)
