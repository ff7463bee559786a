"""What an mbarrier phase orders: a thread's accesses of shared memory before its
``mbarrier.arrive`` happen before what a thread does after its wait for that phase
returns (PTX ISA, "Memory Consistency Model": the arrive has release and the wait
acquire semantics), and its accesses after the arrival do not, however soon the
interpreter runs the wait. Each kernel has a producer warp and a consumer warp that
hand one shared buffer back and forth through a ``full`` and an ``empty`` mbarrier."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target import TargetFault
from tests.frontend.ptx.test_clusters import cluster_module

#: thread 0 makes ``full`` (buf[0..7]) and ``empty`` (buf[8..15]), 32 arrivals each;
#: %r5: buf + 64 + 4 * lane; %r6: buf + 64 + 16 * (lane % 8), an ldmatrix row
_SETUP = ["mov.u32 %r8, buf;", "setp.eq.u32 %p2, %r1, 0;",
          "@%p2 mbarrier.init.shared::cta.b64 [buf], 32;",
          "@%p2 mbarrier.init.shared::cta.b64 [buf+8], 32;", "bar.sync 0;",
          "and.b32 %r4, %r1, 31;", "shl.b32 %r4, %r4, 2;", "add.u32 %r5, %r8, 64;",
          "add.u32 %r5, %r5, %r4;", "and.b32 %r6, %r1, 7;", "shl.b32 %r6, %r6, 4;",
          "add.u32 %r6, %r6, %r8;", "add.u32 %r6, %r6, 64;"]


def _wait(label: str, bar: str) -> list[str]:
    return [f"{label}:", f"mbarrier.try_wait.parity.shared::cta.b64 %p3, [{bar}], 0;",
            f"@!%p3 bra {label};"]


def _kernel(producer_after: list[str], consumer_after: list[str],
            read: str = "ld.shared.u32 %r9, [%r5];", store: tuple[str, ...] = ()) -> None:
    """Warp 0 stores the buffer (then ``store``) and arrives on ``full`` (then
    ``producer_after``), waits for ``empty`` and stores it again; warp 1 waits for
    ``full``, reads it (``read``) and arrives on ``empty`` (then ``consumer_after``)."""
    lines = [*_SETUP, "setp.lt.u32 %p1, %r1, 32;", "@!%p1 bra CONSUMER;",
             "st.shared.u32 [%r5], %r1;", *store, "mbarrier.arrive.shared::cta.b64 _, [buf];",
             *producer_after, *_wait("EMPTY", "buf+8"), "st.shared.u32 [%r5], 9;",
             "bra END;", "CONSUMER:", *_wait("FULL", "buf"), read,
             "mbarrier.arrive.shared::cta.b64 _, [buf+8];", *consumer_after,
             "END:", "bar.sync 0;"]
    cluster_module("\n".join(lines)).kernel("k").run(args=[np.zeros(64, np.uint32)],
                                                     grid=1, block=64)


def _race(*args: list[str], **kw: str) -> str:
    with pytest.raises(TargetFault) as err:
        _kernel(*args, **kw)
    assert err.value.what == "shared memory race"
    return str(err.value)


@pytest.mark.parametrize("read", ["ld.shared.u32 %r9, [%r5];",
                                  "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r9}, [%r6];"])
def test_a_phase_orders_what_its_threads_did_before_arriving(read: str) -> None:
    _kernel([], [], read=read)


def test_a_store_after_the_arrival_races_with_the_waiting_read() -> None:
    """The producer stores again after arriving on ``full``: the consumer's read
    after its wait is not ordered after that store."""
    report = _race(["st.shared.u32 [%r5], 7;"], [])
    assert "ld.shared.u32 %r9, [%r5]" in report and "read of shared address 1088 " \
           "written by thread 0 without a bar.sync between (thread 32" in report


def test_a_phase_orders_an_atomic_as_a_store() -> None:
    """The producer's atomic before its arrival is ordered before the consumer's read;
    one after it is not."""
    atom = "atom.shared.add.u32 %r9, [%r5], 1;"
    _kernel([], [], store=(atom,))
    report = _race([atom], [])
    assert "read of shared address 1088 updated by an atomic or strong store of " \
        "thread 0 without a bar.sync between (thread 32" in report


@pytest.mark.parametrize("read", ["ld.shared.u32 %r10, [%r5];",
                                  "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r10}, [%r6];"])
def test_a_read_after_the_arrival_races_with_the_refill(read: str) -> None:
    """The consumer reads the buffer again after releasing it on ``empty``: the
    producer's refill after its wait is not ordered after that read (the stage
    released too early)."""
    report = _race([], [read])
    assert "st.shared.u32 [%r5], 9" in report and "also accessed by thread 3" in report


def test_a_later_arrival_orders_what_came_after_the_first() -> None:
    """The store after the producer's arrival on ``full`` is ordered by its arrival on
    a second barrier (buf[16..23]) that the consumer waits for too."""
    lines = [*_SETUP, "@%p2 mbarrier.init.shared::cta.b64 [buf+16], 32;", "bar.sync 0;",
             "setp.lt.u32 %p1, %r1, 32;", "@!%p1 bra CONSUMER;",
             "st.shared.u32 [%r5], %r1;", "mbarrier.arrive.shared::cta.b64 _, [buf];",
             "st.shared.u32 [%r5], 7;", "mbarrier.arrive.shared::cta.b64 _, [buf+16];",
             "bra END;", "CONSUMER:", *_wait("FULL", "buf"), *_wait("NEXT", "buf+16"),
             "ld.shared.u32 %r9, [%r5];", "END:", "bar.sync 0;"]
    cluster_module("\n".join(lines)).kernel("k").run(args=[np.zeros(64, np.uint32)],
                                                     grid=1, block=64)
