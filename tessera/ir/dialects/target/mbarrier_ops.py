"""Target IR ``mbarrier`` instructions (PTX ISA 8.x, sec. 9.7.13.15): a barrier object in
shared memory whose phases complete when the expected arrivals (and transaction bytes)
have come. sm_80 has ``init``, ``arrive`` (returning the phase's state),
``test_wait`` and ``cp.async.mbarrier.arrive``, which ``cuda::barrier`` and
``cuda::memcpy_async`` compile to; sm_90 adds ``try_wait.parity``, transaction bytes and
arrival counts, which TMA pipelines use.

The cluster barrier (sec. 9.7.13.2, sm_90): ``barrier.cluster.arrive`` and
``barrier.cluster.wait``, split in two so that a thread may work between its arrival and
its wait. A phase completes once every thread of every CTA of the cluster has arrived;
a wait returns once the phase its thread arrived on has completed. Arrival releases and
the wait acquires by default (``.relaxed`` arrivals order no memory), which is what lets
the CTAs of a cluster read each other's shared memory after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.arch.mbarrier import TX_LIMIT
from tessera.errors import IRVerifyError
from tessera.ir.core import Type, check_count, register_op
from tessera.ir.dialects.target import U64, reg_of
from tessera.ir.dialects.target.memory_ops import Effect


@dataclass(frozen=True)
class _OnBarrier(Effect):
    """An mbarrier instruction: one ``u32`` operand, the barrier's shared address."""

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u32")


@register_op
@dataclass(frozen=True)
class MbarrierInit(_OnBarrier):
    """``mbarrier.init.shared::cta.b64 [addr], count`` (sec. 9.7.13.15.9): ``count`` a
    constant, or with ``count`` 0 a second ``u32`` operand (``cuda::barrier``'s
    ``init(&bar, block.size())``)."""

    name: ClassVar[str] = "ptx.mbarrier_init"
    count: int = 1

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 1 if self.count else 2)
        for t in operands:
            reg_of(self, t, "u32")


@register_op
@dataclass(frozen=True)
class MbarrierArrive(_OnBarrier):
    """``mbarrier.arrive{.expect_tx}.shared::cta.b64 state, [addr]{, tx}``: one arrival,
    first raising the expected transaction bytes by ``tx`` (or by the second operand's
    value, ``tx_operand``), or ``count`` arrivals at once (``mbarrier.arrive.shared::cta.b64
    _, [addr], count``: sm_90; sec. 9.7.13.15.12; the count in a register with
    ``count_operand``). With ``state`` it returns the phase it arrived on as a ``u64``
    token (bit 0 the phase's parity), which ``test_wait`` takes."""

    name: ClassVar[str] = "ptx.mbarrier_arrive"
    tx: int = 0
    count: int = 1
    state: bool = False
    #: the expect-tx bytes are a second ``u32`` operand (a register), not ``tx``
    tx_operand: bool = False
    #: the arrival count is a second ``u32`` operand (a register), not ``count``
    count_operand: bool = False
    #: ``.shared::cluster``: the barrier may be another CTA's of the cluster (no state)
    remote: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return (U64,) if self.state else ()

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if self.tx_operand or self.count_operand:
            check_count(self, operands, 2)
            for t in operands:
                reg_of(self, t, "u32")
        else:
            super().verify(operands, results)
        if self.remote and self.state:
            raise IRVerifyError("ptx.mbarrier_arrive on a .shared::cluster barrier returns "
                                "no state")
        if not 1 <= self.count <= TX_LIMIT or ((self.tx or self.tx_operand) and
                                               (self.count != 1 or self.count_operand)):
            raise IRVerifyError("ptx.mbarrier_arrive counts 1 to 2^20 - 1 arrivals, "
                                "and one with expect-tx bytes")


@register_op
@dataclass(frozen=True)
class MbarrierWait(Effect):
    """A ``mbarrier.try_wait.parity.shared::cta.b64`` loop (sec. 9.7.13.15.16): returns
    once the phase of parity ``phase`` (a ``u32`` 0/1 operand) has completed. A
    ``test_wait`` loop on an arrival's state token reads as this wait on its parity."""

    name: ClassVar[str] = "ptx.mbarrier_wait"

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 2)
        reg_of(self, operands[0], "u32")
        reg_of(self, operands[1], "u32")


@register_op
@dataclass(frozen=True)
class MbarrierInval(_OnBarrier):
    """``mbarrier.inval.shared::cta.b64 [addr]``: before the memory is reused."""

    name: ClassVar[str] = "ptx.mbarrier_inval"


@register_op
@dataclass(frozen=True)
class CpAsyncArrive(_OnBarrier):
    """``cp.async.mbarrier.arrive{.noinc}.shared::cta.b64 [addr]`` (sec. 9.7.9.25.3.3):
    the mbarrier sees an arrival once every ``cp.async`` this thread issued before has
    completed. Without ``noinc`` the pending count is raised by one first, so the
    arrival only holds the phase until the copies land; with ``noinc`` it is one of the
    arrivals the phase expects (``cuda::memcpy_async`` with a ``cuda::barrier``)."""

    name: ClassVar[str] = "ptx.cp_async_arrive"
    noinc: bool = False




@register_op
@dataclass(frozen=True)
class ClusterArrive(Effect):
    """``barrier.cluster.arrive{.release|.relaxed}{.aligned}``: the thread arrives on
    its cluster's barrier (``relaxed``: ordering no memory); ``aligned``: every thread
    of the warp executes it together."""

    name: ClassVar[str] = "ptx.cluster_arrive"
    relaxed: bool = False
    aligned: bool = False

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 0)


@register_op
@dataclass(frozen=True)
class ClusterWait(Effect):
    """``barrier.cluster.wait{.acquire}{.aligned}``: the thread waits until the phase
    of its cluster's barrier that it arrived on has completed."""

    name: ClassVar[str] = "ptx.cluster_wait"
    aligned: bool = False

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 0)


__all__ = ["ClusterArrive", "ClusterWait", "CpAsyncArrive", "MbarrierArrive", "MbarrierInit",
           "MbarrierInval", "MbarrierWait"]
