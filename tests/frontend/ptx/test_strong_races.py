"""Strong accesses and fences in the race check (PTX ISA sec. 8, "Memory Consistency
Model"). Two strong accesses (``.volatile``, ``.relaxed``, ``.acquire``, ``.release``,
atomics) never race; a strong and a plain access race as two plain ones do. A flag
hand-off orders the data it guards when the flag's store is a release (``st.release``,
or a fence before it) and its load an acquire (``ld.acquire``, or a fence after it):
thread 0 stores 42 to ``buf[1]`` and sets the flag ``buf[0]``; thread 32, of another
warp, reads the flag and, where it is set, the data."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target import TargetFault
from tests.frontend.ptx.test_clusters import cluster_module

#: %p1: thread 0, the producer; %p2: thread 32, the consumer; %r2: buf, %rd5: its
#: generic address; the flag cleared before a bar.sync
_ROLES = ["setp.eq.u32 %p1, %r1, 0;", "setp.eq.u32 %p2, %r1, 32;", "mov.u32 %r2, buf;",
          "cvt.u64.u32 %rd5, %r2;", "cvta.shared.u64 %rd5, %rd5;",
          "@%p1 st.shared.u32 [%r2], 0;", "bar.sync 0;"]


def hand_off(release: list[str], set_flag: str, read_flag: str, acquire: list[str],
             target: str = "sm_80") -> int:
    """The data thread 32 reads (0 where it found the flag clear)."""
    body = [*_ROLES, "@%p1 st.shared.u32 [%r2+4], 42;", *(f"@%p1 {x}" for x in release),
            f"@%p1 {set_flag}", f"@%p2 {read_flag}", *(f"@%p2 {x}" for x in acquire),
            "setp.ne.u32 %p3, %r3, 0;", "and.pred %p3, %p3, %p2;",
            "@%p3 ld.shared.u32 %r4, [%r2+4];", "@%p3 st.global.u32 [%rd1], %r4;"]
    out = np.zeros(1, np.uint32)
    cluster_module("\n".join(body), target=target).kernel("k").run(grid=1, block=64,
                                                                     args=[out])
    return int(out[0])


#: (release, the flag's store, the flag's load, acquire): every pairing the ISA orders
HAND_OFFS = {
    "fences": (["fence.acq_rel.cta;"], "st.relaxed.cta.shared.u32 [%r2], 1;",
               "ld.relaxed.cta.shared.u32 %r3, [%r2];", ["fence.acq_rel.cta;"]),
    "release and acquire": ([], "st.release.cta.shared.u32 [%r2], 1;",
                            "ld.acquire.cta.shared.u32 %r3, [%r2];", []),
    "volatile and membar": (["membar.cta;"], "st.volatile.shared.u32 [%r2], 1;",
                            "ld.volatile.shared.u32 %r3, [%r2];", ["membar.cta;"]),
    "sc fences": (["fence.sc.cta;"], "st.relaxed.gpu.shared.u32 [%r2], 1;",
                  "ld.relaxed.gpu.shared.u32 %r3, [%r2];", ["fence.sc.gpu;"]),
    "atomics": ([], "red.release.cta.shared.add.u32 [%r2], 1;",
                "atom.acquire.cta.shared.or.b32 %r3, [%r2], 0;", []),
    "atomics and fences": (["fence.acq_rel.cta;"], "atom.shared.exch.b32 %r9, [%r2], 1;",
                           "atom.shared.add.u32 %r3, [%r2], 0;", ["fence.acq_rel.cta;"]),
    "generic": ([], "st.release.cta.u32 [%rd5], 1;", "ld.acquire.cta.u32 %r3, [%rd5];", []),
    "bytes": (["fence.acq_rel.cta;"], "st.volatile.shared.u8 [%r2], 1;",
              "ld.volatile.shared.u8 %r3, [%r2];", ["fence.acq_rel.cta;"]),
}


@pytest.mark.parametrize("case", sorted(HAND_OFFS))
def test_a_flag_hand_off_orders_the_data(case: str) -> None:
    assert hand_off(*HAND_OFFS[case]) == 42


def _race(*args: object) -> str:
    with pytest.raises(TargetFault) as err:
        hand_off(*args)  # type: ignore[arg-type]
    assert err.value.what == "shared memory race"
    return str(err.value)


@pytest.mark.parametrize("side", ["release", "acquire"])
@pytest.mark.parametrize("case", ["fences", "volatile and membar", "atomics and fences"])
def test_a_hand_off_without_its_release_or_its_acquire_is_a_race(case: str,
                                                                  side: str) -> None:
    """Without the producer's fence its data store may become visible after the flag;
    without the consumer's, the data load may read before the flag: no order."""
    release, set_flag, read_flag, acquire = HAND_OFFS[case]
    report = _race([] if side == "release" else release, set_flag, read_flag,
                   [] if side == "acquire" else acquire)
    assert "ld.shared.u32 %r4" in report
    assert "read of shared address 1028 written by thread 0 without a bar.sync between " \
           "(thread 32 of CTA (0, 0, 0))" in report


def test_relaxed_accesses_are_no_release_or_acquire() -> None:
    report = _race([], "st.relaxed.cta.shared.u32 [%r2], 1;",
                   "ld.acquire.cta.shared.u32 %r3, [%r2];", [])
    assert "read of shared address 1028 written by thread 0" in report
    report = _race([], "st.release.cta.shared.u32 [%r2], 1;",
                   "ld.relaxed.cta.shared.u32 %r3, [%r2];", [])
    assert "read of shared address 1028 written by thread 0" in report


def test_a_plain_flag_races_with_its_strong_reader_and_back() -> None:
    report = _race(["fence.acq_rel.cta;"], "st.shared.u32 [%r2], 1;",
                   "ld.acquire.cta.shared.u32 %r3, [%r2];", [])
    assert "strong load of shared address 1024 written by thread 0 without a bar.sync" \
        in report
    report = _race([], "st.release.cta.shared.u32 [%r2], 1;", "ld.shared.u32 %r3, [%r2];", [])
    assert "read of shared address 1024 updated by an atomic or strong store of thread 0 " \
           "without a bar.sync" in report


def _flag_traffic(lines: list[str]) -> None:
    """Threads 0, 32 and 33 (two warps) access ``buf[0]`` with no barrier."""
    body = [*_ROLES, "setp.eq.u32 %p3, %r1, 33;", *lines]
    cluster_module("\n".join(body), target="sm_90").kernel("k").run(
        grid=1, block=64, args=[np.zeros(1, np.uint32)])


def test_strong_accesses_never_race_with_each_other() -> None:
    _flag_traffic(["@%p1 st.volatile.shared.u32 [%r2], 1;",
                   "@%p2 ld.relaxed.cta.shared.u32 %r3, [%r2];",
                   "@%p3 st.relaxed.cluster.shared.u32 [%r2], 2;",
                   "@%p1 atom.shared.add.u32 %r4, [%r2], 1;",
                   "@%p2 ld.volatile.shared.u32 %r3, [%r2];",
                   "@%p3 st.release.gpu.shared.u32 [%r2], 3;",
                   "@%p1 ld.acquire.sys.shared.u32 %r3, [%r2];"])


def test_a_strong_store_over_a_plain_read_is_a_race() -> None:
    with pytest.raises(TargetFault) as err:
        _flag_traffic(["st.shared.u32 [%r2], 0;", "bar.sync 0;",
                       "@%p2 ld.shared.u32 %r3, [%r2];",
                       "@%p1 st.volatile.shared.u32 [%r2], 1;"])
    assert "strong store to shared address 1024 also accessed by thread 32 without a " \
           "bar.sync between (thread 0 of CTA (0, 0, 0))" in str(err.value)


def _remote_hand_off(release: str) -> int:
    """Thread 0 of rank 1 stores 42 into rank 0's ``buf[1]`` and sets rank 0's flag;
    thread 0 of rank 0 reads them. The flag is cleared before a cluster barrier."""
    body = ["mov.u32 %r3, %cluster_ctarank;", "setp.eq.u32 %p2, %r1, 0;",
            "setp.eq.u32 %p1, %r3, 0;", "and.pred %p1, %p1, %p2;", "mov.u32 %r8, buf;",
            "mapa.shared::cluster.u32 %r7, %r8, 0;", "@%p1 st.shared.u32 [%r8], 0;",
            "barrier.cluster.arrive;", "barrier.cluster.wait;",
            "setp.eq.u32 %p3, %r3, 1;", "and.pred %p3, %p3, %p2;",
            "@%p3 st.shared::cluster.u32 [%r7+4], 42;", f"@%p3 {release}",
            "@%p3 st.relaxed.cluster.shared::cluster.u32 [%r7], 1;",
            "@%p1 ld.acquire.cluster.shared.u32 %r4, [%r8];", "setp.ne.u32 %p3, %r4, 0;",
            "and.pred %p3, %p3, %p1;", "@%p3 ld.shared.u32 %r5, [%r8+4];",
            "@%p3 st.global.u32 [%rd1], %r5;",
            "barrier.cluster.arrive;", "barrier.cluster.wait;"]
    out = np.zeros(1, np.uint32)
    cluster_module("\n".join(body)).kernel("k").run(args=[out], grid=2, block=64, cluster=2)
    return int(out[0])


def test_a_flag_hand_off_between_the_ctas_of_a_cluster() -> None:
    """A fence of cluster scope before the flag's store orders the remote data store
    before the owner's read; without it the read races."""
    assert _remote_hand_off("fence.acq_rel.cluster;") == 42
    with pytest.raises(TargetFault) as err:
        _remote_hand_off("mov.u32 %r9, 0;")
    assert "read of shared address 1028 of CTA rank 0 written by thread 0 of the cluster's " \
           "CTA rank 1 without a cluster barrier" in str(err.value)


def last_arriver(fences: bool, one_instruction: bool) -> int:
    """Lane 0 of each of 4 warps stores its part ``w + 1`` to ``buf[1 + w]``, fences
    and counts itself into ``buf[0]`` with ``atom``; the lane that counts last fences
    and sums every part. Its acquire reads the release sequence of the count, which
    each atomic lengthens: it orders every warp's part before the sum."""
    fence = ["@%p1 fence.acq_rel.cta;"] * fences
    if one_instruction:
        count = ["@%p1 atom.shared.add.u32 %r3, [%r2], 1;"]
    else:  # one warp after another
        count = [line for w in range(4) for line in (
            f"setp.eq.u32 %p2, %r1, {32 * w};", "@%p2 atom.shared.add.u32 %r3, [%r2], 1;")]
    body = ["and.b32 %r5, %r1, 31;", "setp.eq.u32 %p1, %r5, 0;", "shr.u32 %r6, %r1, 5;",
            "mov.u32 %r2, buf;", "mov.u32 %r3, 0;", "setp.eq.u32 %p2, %r1, 0;",
            "@%p2 st.shared.u32 [%r2], 0;", "bar.sync 0;", "shl.b32 %r7, %r6, 2;",
            "add.u32 %r8, %r2, %r7;", "add.u32 %r9, %r6, 1;", "@%p1 st.shared.u32 [%r8+4], %r9;",
            *fence, *count, "setp.eq.u32 %p3, %r3, 3;", "and.pred %p3, %p3, %p1;",
            *(x.replace("%p1", "%p3") for x in fence), "mov.u32 %r10, 0;",
            *(line for k in range(4) for line in (f"@%p3 ld.shared.u32 %r11, [%r2+{4 + 4 * k}];",
                                                 "add.u32 %r10, %r10, %r11;")),
            "@%p3 st.global.u32 [%rd1], %r10;"]
    out = np.zeros(1, np.uint32)
    cluster_module("\n".join(body), target="sm_80").kernel("k").run(grid=1, block=128,
                                                                     args=[out])
    return int(out[0])


@pytest.mark.parametrize("one_instruction", [True, False])
def test_the_last_arriver_reads_every_part(one_instruction: bool) -> None:
    assert last_arriver(True, one_instruction) == 1 + 2 + 3 + 4
    with pytest.raises(TargetFault) as err:
        last_arriver(False, one_instruction)
    assert "read of shared address 1028 written by thread 0 without a bar.sync" \
        in str(err.value)
