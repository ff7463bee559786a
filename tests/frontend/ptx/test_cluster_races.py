"""Races between the CTAs of a cluster: the accesses of one CTA's shared memory by
threads of different CTAs are ordered by the cluster barrier or by an mbarrier phase
the other CTA's threads arrived on, never by either CTA's ``bar.sync``; two threads of
one CTA accessing another CTA's memory are ordered by their own ``bar.sync``. Each case
is a kernel of two CTAs whose report (or its absence) follows from those rules alone,
whichever CTA the interpreter runs first."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target import TargetFault
from tests.frontend.ptx.test_clusters import cluster_module

#: %p1: the thread is in rank 0; %p2: it is thread 0 of its CTA; %r7: rank 0's ``buf``
#: as a cluster address
_PROLOGUE = ["mov.u32 %r3, %cluster_ctarank;", "setp.eq.u32 %p1, %r3, 0;",
             "setp.eq.u32 %p2, %r1, 0;", "mov.u32 %r8, buf;",
             "mapa.shared::cluster.u32 %r7, %r8, 0;"]
_END = ["END:", "barrier.cluster.arrive;", "barrier.cluster.wait;"]


def _run(*lines: str) -> None:
    kernel = cluster_module("\n".join([*_PROLOGUE, *lines, *_END])).kernel("k")
    kernel.run(args=[np.zeros(64, np.uint32)], grid=2, block=64, cluster=2)


def _race(*lines: str) -> str:
    with pytest.raises(TargetFault) as err:
        _run(*lines)
    assert err.value.what == "shared memory race"
    return str(err.value)


#: thread 0 of each rank: rank 0 stores to its buf[0], then every thread takes a
#: bar.sync (``barrier`` in between), then rank 1 reads rank 0's buf[0]
def _write_then_remote_read(barrier: list[str]) -> list[str]:
    return ["and.pred %p3, %p1, %p2;", "@%p3 st.shared.u32 [buf], 5;", *barrier,
            "not.pred %p3, %p1;", "and.pred %p3, %p3, %p2;",
            "@%p3 ld.shared::cluster.u32 %r9, [%r7];"]


@pytest.mark.parametrize("barrier", [[], ["bar.sync 0;"], ["bar.sync 0;", "bar.sync 0;"]])
def test_a_ctas_own_barrier_does_not_order_another_ctas_read(barrier: list[str]) -> None:
    report = _race(*_write_then_remote_read(barrier))
    assert "ld.shared::cluster" in report
    assert "read of shared address 1024 of CTA rank 0 written by thread 0 of the cluster's " \
           "CTA rank 0 without a cluster barrier" in report


def test_the_cluster_barrier_orders_it() -> None:
    _run(*_write_then_remote_read(["barrier.cluster.arrive;", "barrier.cluster.wait;"]))


def test_a_relaxed_cluster_barrier_orders_nothing() -> None:
    report = _race(*_write_then_remote_read(["barrier.cluster.arrive.relaxed;",
                                             "barrier.cluster.wait;"]))
    assert "without a cluster barrier" in report


def test_another_ctas_write_then_a_barrier_of_the_owner() -> None:
    """Rank 1 writes rank 0's memory; rank 0's bar.sync does not order its read."""
    report = _race("not.pred %p3, %p1;", "and.pred %p3, %p3, %p2;",
                   "@%p3 st.shared::cluster.u32 [%r7], 5;", "bar.sync 0;",
                   "and.pred %p3, %p1, %p2;", "@%p3 ld.shared.u32 %r9, [buf];")
    assert "ld.shared.u32" in report and "written by thread 0 of the cluster's CTA rank 1" \
        in report


def _rank1_writes_then_reads(barrier: list[str]) -> list[str]:
    """Rank 1's thread 0 writes rank 0's buf[0], its thread 33 (another warp) reads
    it; rank 0 takes no part."""
    return ["@%p1 bra END;", "@%p2 st.shared::cluster.u32 [%r7], 5;", *barrier,
            "setp.eq.u32 %p3, %r1, 33;", "@%p3 ld.shared::cluster.u32 %r9, [%r7];"]


def test_two_threads_of_one_cta_on_another_ctas_memory() -> None:
    """Ordered by their own CTA's bar.sync, which the owner need not take part in."""
    _run(*_rank1_writes_then_reads(["bar.sync 1, 64;"]))
    report = _race(*_rank1_writes_then_reads([]))
    assert "written by thread 0 without a bar.sync between" in report
    assert "(thread 33 of CTA (1, 0, 0))" in report


def _remote_arrival(store_after: bool) -> list[str]:
    """Rank 1's thread 0 stores to rank 0's buf[4] and arrives on rank 0's mbarrier
    (buf[0..1]) with release semantics at cluster scope (or stores after arriving);
    rank 0's thread 0 waits for the phase and reads buf[4]."""
    store = ["st.shared::cluster.u32 [%r7+16], 7;"]
    arrive = ["mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r7];"]
    return ["and.pred %p3, %p1, %p2;", "@%p3 mbarrier.init.shared::cta.b64 [buf], 1;",
            "barrier.cluster.arrive;", "barrier.cluster.wait;",
            "@%p1 bra OWNER;", "@!%p2 bra END;",
            *(arrive + store if store_after else store + arrive), "bra END;",
            "OWNER:", "@!%p2 bra END;",
            "WAIT:", "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [buf], 0;",
            "@!%p3 bra WAIT;", "ld.shared.u32 %r9, [buf+16];"]


def test_an_arrival_on_the_owners_mbarrier_orders_what_came_before_it() -> None:
    _run(*_remote_arrival(store_after=False))
    report = _race(*_remote_arrival(store_after=True))
    assert "read of shared address 1040 of CTA rank 0 written by thread 0 of the " \
           "cluster's CTA rank 1" in report


def test_a_write_over_another_ctas_unordered_read() -> None:
    """Rank 1 reads rank 0's buf[0] (set before a cluster barrier); rank 0 then
    overwrites it after its own bar.sync."""
    report = _race("and.pred %p3, %p1, %p2;", "@%p3 st.shared.u32 [buf], 1;",
                   "barrier.cluster.arrive;", "barrier.cluster.wait;",
                   "not.pred %p3, %p1;", "and.pred %p3, %p3, %p2;",
                   "@%p3 ld.shared::cluster.u32 %r9, [%r7];", "bar.sync 0;",
                   "and.pred %p3, %p1, %p2;", "@%p3 st.shared.u32 [buf], 5;")
    assert "write of shared address 1024 of CTA rank 0 also accessed by thread 0 of the " \
           "cluster's CTA rank 1" in report


def test_a_store_between_the_cluster_barriers_arrival_and_wait_is_not_ordered() -> None:
    """barrier.cluster.arrive releases what came before it; rank 0's store after its
    arrival races with rank 1's read after the wait."""
    report = _race("barrier.cluster.arrive;", "and.pred %p3, %p1, %p2;",
                   "@%p3 st.shared.u32 [buf], 5;", "barrier.cluster.wait;",
                   "not.pred %p3, %p1;", "and.pred %p3, %p3, %p2;",
                   "@%p3 ld.shared::cluster.u32 %r9, [%r7];")
    assert "written by thread 0 of the cluster's CTA rank 0" in report


def _remote_store_then_wgmma(barrier: list[str]) -> None:
    """Rank 0's 128 threads fill its 4 KiB ``tile``; after a cluster barrier rank 1's
    thread 0 stores a word of it (``st.shared::cluster``); then (``barrier`` between)
    rank 0's warpgroup runs one ``wgmma`` m64n8k16 whose A (64x16) and B (16x8) are
    that tile, bf16, no swizzle: core matrices 128 bytes apart along K, 256 along M/N."""
    desc = ["cvt.u64.u32 %rd2, %r10;", "shr.u64 %rd2, %rd2, 4;", "and.b64 %rd2, %rd2, 16383;",
            "or.b64 %rd2, %rd2, 68720001024;",  # LBO 128 (bits 16-29), SBO 256 (32-45)
            "add.s64 %rd3, %rd2, 128;"]  # B: 2048 bytes on
    body = [".shared .align 1024 .b8 tile[4096];", ".reg .f32 %f<8>;",
            "mov.u32 %r3, %cluster_ctarank;", "setp.eq.u32 %p1, %r3, 0;",
            "setp.eq.u32 %p2, %r1, 0;", "mov.u32 %r10, tile;",
            "mapa.shared::cluster.u32 %r7, %r10, 0;",
            "shl.b32 %r11, %r1, 5;", "add.u32 %r12, %r10, %r11;",
            "@%p1 st.shared.v4.u32 [%r12], {16256, 16256, 16256, 16256};",
            "@%p1 st.shared.v4.u32 [%r12+16], {16256, 16256, 16256, 16256};",
            "barrier.cluster.arrive;", "barrier.cluster.wait;",
            "not.pred %p3, %p1;", "and.pred %p3, %p3, %p2;",
            "@%p3 st.shared::cluster.u32 [%r7+64], 16256;", "fence.proxy.async.shared::cta;",
            *barrier, "@!%p1 bra END;", *desc, "setp.eq.u32 %p3, %r1, %r1;",
            "wgmma.fence.sync.aligned;",
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, "
            "%rd2, %rd3, 0, 1, 1, 0, 0;",
            "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;",
            "END:"]
    kernel = cluster_module("\n".join(body), target="sm_90a").kernel("k")
    kernel.run(args=[np.zeros(64, np.uint32)], grid=2, block=128, cluster=2)


def test_another_ctas_store_into_a_wgmma_operand() -> None:
    """A ``wgmma`` reads its own CTA's memory; another CTA's store there is ordered
    before it by the cluster barrier only, not by a ``bar.sync``."""
    _remote_store_then_wgmma(["barrier.cluster.arrive;", "barrier.cluster.wait;"])
    for barrier in ([], ["bar.sync 0;"]):
        with pytest.raises(TargetFault) as err:
            _remote_store_then_wgmma(barrier)
        assert err.value.what == "shared memory race"
        assert "wgmma" in str(err.value) and "read of shared address 2112 of CTA rank 0 " \
            "written by thread 0 of the cluster's CTA rank 1" in str(err.value)


def _remote_count(barrier: list[str], read: str = "ld.shared.u32 %r9, [buf];") -> None:
    """Rank 0's thread 0 clears its buf[0]; after a cluster barrier thread 0 of each
    rank adds 1 to it (rank 1 through ``mapa``); then (``barrier`` between) rank 0's
    thread 0 reads it (``read``)."""
    _run("and.pred %p3, %p1, %p2;", "@%p3 st.shared.u32 [buf], 0;",
         "barrier.cluster.arrive;", "barrier.cluster.wait;",
         "@%p2 atom.shared::cluster.add.u32 %r9, [%r7], 1;", *barrier,
         "and.pred %p3, %p1, %p2;", f"@%p3 {read}")


def test_atomics_of_two_ctas_race_with_a_plain_read_not_with_each_other() -> None:
    _remote_count(["barrier.cluster.arrive;", "barrier.cluster.wait;"])
    for barrier in ([], ["bar.sync 0;"]):
        with pytest.raises(TargetFault) as err:
            _remote_count(barrier)
        assert err.value.what == "shared memory race"
        assert "read of shared address 1024 of CTA rank 0 updated by an atomic or strong " \
            "store of thread 0 of the cluster's CTA rank 1 without a cluster barrier" \
            in str(err.value)


def test_a_store_over_another_ctas_atomic() -> None:
    with pytest.raises(TargetFault) as err:
        _remote_count([], read="st.shared.u32 [buf], 3;")
    assert "write of shared address 1024 of CTA rank 0 also accessed by an atomic or " \
        "strong store of thread 0 of the cluster's CTA rank 1" in str(err.value)
