"""Target IR asynchronous and matrix instructions: ``cp.async``, ``ldmatrix``,
``mma.sync`` (sm_80); ``wgmma``, TMA (``cp.async.bulk.tensor`` loads and stores, the
bulk groups of stores) and the async-proxy fences (sm_90a); the ``mbarrier``
instructions are :mod:`.mbarrier_ops`'s, re-exported here. Section numbers refer to the
PTX ISA 8.x, chapter 9.

Ordering rules the verifier of a whole kernel checks (:mod:`tessera.ir.dialects.target.check`)
rather than each op: ``wgmma.fence`` before the first ``wgmma`` of a sequence,
``wgmma.commit_group`` after it and ``wgmma.wait_group`` before its accumulators are
read; ``fence.proxy.async`` between ordinary shared stores and a ``wgmma`` that reads
them; ``fence.mbarrier_init`` and ``bar.sync`` between ``mbarrier.init`` and use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import RegType, TensorMapType, reg_of
from tessera.ir.dialects.target.mbarrier_ops import (
    CpAsyncArrive,
    MbarrierArrive,
    MbarrierInit,
    MbarrierInval,
    MbarrierWait,
)
from tessera.ir.dialects.target.memory_ops import Effect as _Effect

#: element types a tensor-core instruction takes, and how many k one instruction covers
MMA_K = {"bf16": 16, "f16": 16, "e4m3": 32, "e5m2": 32, "tf32": 8, "s8": 32, "u8": 32}
#: integer input types: their products accumulate in ``s32`` (the float ones in ``f32``)
INT_MMA = ("s8", "u8")


def mma_accumulator(op: Op, atype: str, btype: str, ctype: str, satfinite: int) -> None:
    """Check the accumulator type of a tensor-core product (PTX ISA sec. 9.7.14.5.14 and
    9.7.15.5.2): ``s32`` for ``.s8``/``.u8`` inputs (which mix freely), ``f32`` for the
    float ones (whose A and B formats are one family); ``.satfinite`` clamps an ``s32``
    result only."""
    integer = atype in INT_MMA
    if integer != (btype in INT_MMA):
        raise IRVerifyError(f"{op.name} cannot multiply {atype} by {btype}")
    want = "s32" if integer else "f32"
    if ctype != want:
        raise IRVerifyError(f"{op.name} of {atype} inputs accumulates in {want}, not {ctype}")
    if satfinite and not integer:
        raise IRVerifyError(f"{op.name}: .satfinite applies to s32 accumulators only")


# ---------------------------------------------------------------------------- sm_80
@register_op
@dataclass(frozen=True)
class CpAsync(_Effect):
    """``cp.async.<cache>.shared.global [dst], [src], size{, src_size}`` (sec. 9.7.9.25):
    copy ``size`` (4, 8 or 16; 16 only with ``cg``) bytes; a ``u32`` ``src_size``
    operand below ``size`` zero-fills the rest. The copy completes at a later
    ``cp.async.wait_group`` of this thread."""

    name: ClassVar[str] = "ptx.cp_async"
    size: int
    cache: str = "cg"

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if len(operands) not in (2, 3):
            raise IRVerifyError("ptx.cp_async takes dst, src and an optional src_size")
        reg_of(self, operands[0], "u32")
        reg_of(self, operands[1], "u64")
        if len(operands) == 3:
            reg_of(self, operands[2], "u32")
        if self.size not in (4, 8, 16) or self.cache not in ("ca", "cg") or \
                (self.cache == "cg" and self.size != 16):
            raise IRVerifyError(f"cp.async.{self.cache} cannot copy {self.size} bytes",
                                hint="cp.async.cg copies 16 bytes; .ca copies 4, 8 or 16")


@register_op
@dataclass(frozen=True)
class CpAsyncCommit(_Effect):
    """``cp.async.commit_group``: close the group of this thread's pending copies."""

    name: ClassVar[str] = "ptx.cp_async_commit"


@register_op
@dataclass(frozen=True)
class CpAsyncWait(_Effect):
    """``cp.async.wait_group n``: wait until at most ``n`` of this thread's groups are
    pending (``n`` = 0 waits for all)."""

    name: ClassVar[str] = "ptx.cp_async_wait"
    n: int = 0


@register_op
@dataclass(frozen=True)
class Ldmatrix(Op):
    """``ldmatrix.sync.aligned.m8n8.x<num>{.trans}.shared.b16`` (sec. 9.7.14.5.15):
    lanes ``8k..8k+7`` give the row addresses of matrix ``k``; register ``k`` of lane
    ``l`` gets row ``l/4`` of matrix ``k``, elements ``2(l%4)`` and ``+1``."""

    name: ClassVar[str] = "ptx.ldmatrix"
    num: int = 4
    trans: bool = False
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u32")
        if self.num not in (1, 2, 4):
            raise IRVerifyError(f"ldmatrix loads 1, 2 or 4 matrices, not {self.num}")
        return (RegType("b32", self.num),)


def mma_shape(shape: str) -> tuple[int, int, int]:
    """``'m16n8k16'`` -> ``(16, 8, 16)``."""
    try:
        m, rest = shape[1:].split("n")
        n, k = rest.split("k")
        return int(m), int(n), int(k)
    except ValueError:
        raise IRVerifyError(f"bad matrix shape {shape!r}", hint="write e.g. m16n8k16") from None


@register_op
@dataclass(frozen=True)
class MmaSync(Op):
    """``mma.sync.aligned.<shape>.row.col{.satfinite}.<c>.<a>.<b>.<c> d, a, b, c`` (sec.
    9.7.14.5): one warp's ``m16n8k16`` (``k32``: 8-bit inputs) product; A is 4 ``b32``
    registers per lane, B 2, C and D 4 ``f32`` (``s32`` for ``s8``/``u8`` inputs; the
    fragment layouts of sec. 9.7.14.5.8)."""

    name: ClassVar[str] = "ptx.mma"
    shape: str
    atype: str
    btype: str
    ctype: str = "f32"
    satfinite: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        m, n, k = mma_shape(self.shape)
        if (m, n) != (16, 8) or MMA_K.get(self.atype) != k or MMA_K.get(self.btype) != k:
            raise IRVerifyError(f"mma.sync.{self.shape} with {self.atype}/{self.btype} inputs "
                                "is not supported", hint="use m16n8k16 with bf16/f16 or "
                                "m16n8k32 with e4m3/e5m2 or s8/u8")
        mma_accumulator(self, self.atype, self.btype, self.ctype, self.satfinite)
        for t, want in zip(operands, (RegType("b32", 4), RegType("b32", 2),
                                      RegType(self.ctype, 4))):
            if t != want:
                raise IRVerifyError(f"ptx.mma operand {t} should be {want}")
        return (RegType(self.ctype, 4),)


# ---------------------------------------------------------------------------- sm_90a
@register_op
@dataclass(frozen=True)
class WgmmaFence(_Effect):
    """``wgmma.fence.sync.aligned`` (sec. 9.7.15.6.1): orders register accesses to the
    accumulators and A before the next ``wgmma``."""

    name: ClassVar[str] = "ptx.wgmma_fence"


@register_op
@dataclass(frozen=True)
class WgmmaCommit(_Effect):
    """``wgmma.commit_group.sync.aligned``: close a group of issued ``wgmma``."""

    name: ClassVar[str] = "ptx.wgmma_commit"


@register_op
@dataclass(frozen=True)
class WgmmaWait(_Effect):
    """``wgmma.wait_group.sync.aligned n``: at most ``n`` groups still pending."""

    name: ClassVar[str] = "ptx.wgmma_wait"
    n: int = 0


@register_op
@dataclass(frozen=True)
class Wgmma(Op):
    """``wgmma.mma_async.sync.aligned.m64n<n>k<k>.f32.<a>.<b> {d}, descA, descB, p, 1, 1,
    tA, tB`` (sec. 9.7.15.5): a warpgroup's product of two shared-memory operands given
    by 64-bit matrix descriptors, K-major unless ``trans_a``/``trans_b`` (MN-major, only
    for 16-bit types). Operands: the accumulator (``n/2`` f32 per thread, the result
    tied to it), the two ``u64`` descriptors and the ``scale-d`` predicate (false:
    D = A·B, the old accumulator ignored). ``s8``/``u8`` inputs accumulate in ``s32``
    (``ctype``, optionally ``.satfinite``) and take no scale or transpose immediates."""

    name: ClassVar[str] = "ptx.wgmma"
    n: int
    atype: str
    btype: str
    trans_a: int = 0
    trans_b: int = 0
    ctype: str = "f32"
    satfinite: int = 0
    pure: ClassVar[bool] = False

    @property
    def k(self) -> int:
        return MMA_K[self.atype]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 4)
        if self.n % 8 or not 8 <= self.n <= 256:
            raise IRVerifyError(f"wgmma n must be a multiple of 8 in [8, 256], not {self.n}")
        if self.atype not in MMA_K or MMA_K[self.atype] != MMA_K.get(self.btype):
            raise IRVerifyError(f"wgmma cannot multiply {self.atype} by {self.btype}")
        mma_accumulator(self, self.atype, self.btype, self.ctype, self.satfinite)
        if (self.trans_a or self.trans_b) and MMA_K[self.atype] != 16:
            raise IRVerifyError("wgmma transposes only 16-bit operands",
                                hint="store 8-bit and tf32 operands K-major")
        if self.atype in INT_MMA and self.n > 32 and self.n % 16:
            # the integer shapes (sec. 9.7.15.5.1): n = 8, 16, 24, then multiples of 16
            raise IRVerifyError(f"integer wgmma has no m64n{self.n}k32 shape",
                                hint="use n = 8, 16, 24 or a multiple of 16")
        acc = RegType(self.ctype, self.n // 2)
        if operands[0] != acc:
            raise IRVerifyError(f"wgmma m64n{self.n} accumulates in {acc}, got {operands[0]}",
                                hint="accumulators take n/2 registers per thread")
        reg_of(self, operands[1], "u64")
        reg_of(self, operands[2], "u64")
        reg_of(self, operands[3], "pred")
        return (acc,)


@register_op
@dataclass(frozen=True)
class TmaLoad(_Effect):
    """``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1}], [mbar]`` (sec. 9.7.9.27): copy one box of the tensor map
    to shared memory (swizzled per the map); coordinates innermost first (column, row,
    ``s32``); on completion the box's bytes are subtracted from the mbarrier's
    transaction count. ``multicast`` (``.multicast::cluster``, a sixth ``u16`` operand,
    the CTA mask): the box lands at the same shared address in each CTA of the cluster
    whose rank bit is set, completing the bytes on the mbarrier at the same address of
    each."""

    name: ClassVar[str] = "ptx.tma_load"
    multicast: bool = False

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 6 if self.multicast else 5)
        reg_of(self, operands[0], "u32")
        if not isinstance(operands[1], TensorMapType):
            raise IRVerifyError(f"ptx.tma_load reads a tensor map, got {operands[1]}")
        reg_of(self, operands[2], "s32")
        reg_of(self, operands[3], "s32")
        reg_of(self, operands[4], "u32")
        if self.multicast:
            reg_of(self, operands[5], "u16")


@register_op
@dataclass(frozen=True)
class BulkLoad(_Effect):
    """``cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [dst], [src],
    size, [mbar]`` (sec. 9.7.9.25): copy ``size`` bytes (a multiple of 16; both addresses
    16-byte aligned) from global to shared memory, as a TMA load does without a tensor
    map; on completion the bytes are subtracted from the mbarrier's transaction count.
    Operands: ``dst`` (``u32``), ``src`` (``u64``), ``size`` (``u32``), ``mbar``
    (``u32``)."""

    name: ClassVar[str] = "ptx.bulk_load"

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 4)
        for t, elem in zip(operands, ("u32", "u64", "u32", "u32")):
            reg_of(self, t, elem)


@register_op
@dataclass(frozen=True)
class TmaStore(_Effect):
    """``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [tmap, {c0, c1}], [src]``
    (sec. 9.7.9.27): copy one box from shared memory at ``src`` (laid out as the map's
    swizzle places it) to the tensor; elements outside the tensor are not written.
    Operands: ``src`` (``u32``), the tensor map, column and row (``s32``). The copy
    belongs to this thread's open bulk group and reads ``src`` asynchronously until a
    ``cp.async.bulk.wait_group.read`` retires that group; generic-proxy writes of the
    source must be fenced (``fence.proxy.async``) before it is issued (sec. 9.7.13.4)."""

    name: ClassVar[str] = "ptx.tma_store"

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 4)
        reg_of(self, operands[0], "u32")
        if not isinstance(operands[1], TensorMapType):
            raise IRVerifyError(f"ptx.tma_store writes through a tensor map, got {operands[1]}")
        reg_of(self, operands[2], "s32")
        reg_of(self, operands[3], "s32")


@register_op
@dataclass(frozen=True)
class BulkCommit(_Effect):
    """``cp.async.bulk.commit_group`` (sec. 9.7.9.26): close this thread's open bulk
    async-group (its ``cp.async.bulk`` copies issued since the last commit)."""

    name: ClassVar[str] = "ptx.bulk_commit"


@register_op
@dataclass(frozen=True)
class BulkWait(_Effect):
    """``cp.async.bulk.wait_group{.read} n`` (sec. 9.7.9.27.2): wait until at most ``n``
    of this thread's committed bulk groups are pending. With ``read`` only their reads
    of the source must be done (the shared memory may then be reused; the global
    writes become visible later, at the latest when the grid completes)."""

    name: ClassVar[str] = "ptx.bulk_wait"
    n: int = 0
    read: bool = True


#: the kinds of :class:`Fence`
FENCES = ("proxy_async", "mbarrier_init", "membar_cta", "membar_gl", "membar_sys",
          *(f"{sem}_{scope}" for sem in ("sc", "acq_rel") for scope in ("cta", "cluster", "gpu",
                                                                       "sys")))


@register_op
@dataclass(frozen=True)
class Fence(_Effect):
    """``fence.proxy.async.shared::cta`` (``kind='proxy_async'``: generic-proxy shared
    writes become visible to the async proxy, sec. 9.7.13.4),
    ``fence.mbarrier_init.release.cluster`` (``kind='mbarrier_init'``), or a memory
    fence (sec. 9.7.13.4): ``fence.acq_rel.<scope>`` and ``fence.sc.<scope>``
    (``kind='acq_rel_cta'``, ``'sc_gpu'`` ...; sm_70 on, ``.cluster`` sm_90) and
    ``membar.cta|gl|sys`` (``'membar_gl'`` ...: ``fence.sc`` of the CTA, the GPU, the
    system). A memory fence makes a thread's later strong write a release and its
    earlier strong read an acquire of ordinary memory among the threads of its scope.
    The lowering also uses the CTA fence where ptxas must not move a
    ``wgmma.wait_group`` above the instructions before it, which it does not do across a
    fence."""

    name: ClassVar[str] = "ptx.fence"
    kind: str = "proxy_async"

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 0)
        if self.kind not in FENCES:
            raise IRVerifyError(f"unknown fence {self.kind!r}")


__all__ = ["FENCES", "INT_MMA", "MMA_K", "BulkCommit", "BulkWait", "CpAsync", "CpAsyncArrive",
           "CpAsyncCommit",
           "CpAsyncWait", "Fence", "Ldmatrix", "MbarrierArrive", "MbarrierInit", "MbarrierInval",
           "MbarrierWait", "MmaSync", "TmaLoad", "TmaStore", "Wgmma", "WgmmaCommit",
           "WgmmaFence", "WgmmaWait", "mma_accumulator", "mma_shape"]
