"""sm_90a TMA and mbarrier building blocks: barrier set-up, box copies announced with
``expect_tx``, phase waits, and a multi-stage ring feeding
:func:`~tessera.lower.sm90a.gemm.wgmma_block`. The lowering's ``tile.cp_async`` into wgmma
buffers (:mod:`tessera.lower.sm90a.mma`) uses the set-up and the copies.

Shared operand boxes use the panel + swizzle layout of :mod:`tessera.lower.sm90a.gemm`,
which is how TMA writes a box with a swizzled tensor map (PTX ISA 8.x sec. 9.7.9.27,
``cp.async.bulk.tensor``; sec. 9.7.13.15, ``mbarrier``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tessera.arch.swizzle import Swizzle
from tessera.errors import ArgumentError, ShapeError
from tessera.ir.core import Value
from tessera.ir.dialects.target import TensorMapType
from tessera.ir.dialects.target.async_ops import (
    Fence,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
)
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.gemm import wgmma_block
from tessera.lower.tiles import SharedBox, elem_size


def thread0(e: TargetEmitter) -> Value:
    """The predicate ``%tid.x == 0`` (the thread that issues TMA and arrives)."""
    return e.setp("eq", e.sreg("tid.x"), e.const(0, "u32"), "u32")


def barrier_addresses(e: TargetEmitter, base: Value, count: int) -> list[Value]:
    """The addresses ``base``, ``base + 8``... of ``count`` mbarriers (8 bytes each)."""
    return [base] + [e.add(base, e.const(8 * k, "u32"), "u32") for k in range(1, count)]


def init_barriers(e: TargetEmitter, base: Value, count: int) -> None:
    """Thread 0 initialises the ``count`` mbarriers at ``base``, ``base + 8``... for one
    arrival each (only thread 0 computes their addresses), and the init is fenced (PTX
    ISA sec. 9.7.13.15.9); the CTA must still pass a ``bar.sync`` before any thread uses
    them."""
    _init_fenced(e, lambda t: barrier_addresses(t, base, count))


def _init_fenced(e: TargetEmitter, addresses: Callable[[TargetEmitter], list[Value]]) -> None:
    """Thread 0 initialises the mbarriers at ``addresses(t)`` for one arrival; then the
    fence that makes the inits visible."""
    def init(t: TargetEmitter) -> None:
        for bar in addresses(t):
            t.op(MbarrierInit(1), [bar])

    e.if_(thread0(e), init)
    e.op(Fence("mbarrier_init"))


def tma_setup(e: TargetEmitter, n_barriers: int, sym: str = "mbar") -> list[Value]:
    """``n_barriers`` shared mbarriers (8 bytes each, 8-byte aligned), initialised by
    thread 0 for one arrival (:func:`init_barriers`) and the CTA synchronised; returns
    their addresses."""
    if n_barriers < 1:
        raise ArgumentError(f"tma_setup needs at least one barrier, not {n_barriers}")
    base = e.one(SharedAlloc(sym, 8 * n_barriers, 8))
    bars = barrier_addresses(e, base, n_barriers)  # once, for the init and the caller
    _init_fenced(e, lambda t: bars)
    e.bar()
    return bars


@dataclass(frozen=True)
class TmaCopy:
    """One TMA box copy: the tensor-map box at ``(col, row)`` (``s32`` element
    coordinates of the global tensor) into ``dst``. A ``dst`` wider than the map's box
    is filled panel by panel (``dst.cols / box cols`` copies at ``col + p * box cols``)."""

    dst: SharedBox
    tmap: Value
    col: Value
    row: Value


def _panels(copy: TmaCopy) -> tuple[int, int, int]:
    """``(panels, panel columns, box bytes)`` of one copy, after checking the map."""
    t = copy.tmap.type
    if not isinstance(t, TensorMapType):
        raise ArgumentError(f"a TMA copy reads a tensor map, got a value of type {t}")
    d = copy.dst
    rows, cols = t.box
    esize = elem_size(t.elem)
    if (t.elem, t.swizzle, rows) != (d.elem, d.swizzle, d.rows) or d.cols % cols:
        raise ShapeError(f"tensor map {t} cannot fill a {d.rows}x{d.cols} {d.elem} box with "
                         f"swizzle {d.swizzle}", hint="match element type, swizzle and rows; "
                         "make the box columns a multiple of the map's")
    return d.cols // cols, cols, rows * cols * esize


def copy_bytes(copy: TmaCopy) -> int:
    """The bytes ``copy`` brings (what its barrier phase must expect), after checking it."""
    n, _, nbytes = _panels(copy)
    return n * nbytes


def issue_copy(t: TargetEmitter, copy: TmaCopy, bar: Value) -> None:
    """The ``cp.async.bulk.tensor`` loads of ``copy`` on ``bar``, one per panel, emitted
    where only the issuing thread runs (PTX ISA sec. 9.7.9.27)."""
    n, cols, nbytes = _panels(copy)
    for p in range(n):
        dst = copy.dst.base if p == 0 else t.add(copy.dst.base, t.const(p * nbytes, "u32"),
                                                 "u32")
        col = copy.col if p == 0 else t.add(copy.col, t.const(p * cols, "s32"), "s32")
        t.op(TmaLoad(), [dst, copy.tmap, col, copy.row, bar])


def tma_load_many(e: TargetEmitter,
                  copies: Sequence[TmaCopy | tuple[SharedBox, Value, Value, Value]],
                  bar: Value) -> None:
    """Thread 0 announces the bytes of all ``copies`` with one ``mbarrier.arrive.expect_tx``
    on ``bar`` and issues them: the barrier's phase completes when every byte has landed
    (PTX ISA sec. 9.7.13.15.12). Loads sharing a phase must go through one call: the
    barrier expects one arrival per phase. A copy is a :class:`TmaCopy` or a
    ``(dst, tmap, col, row)`` tuple."""
    plan = [x if isinstance(x, TmaCopy) else TmaCopy(*x) for x in copies]
    tx = sum(copy_bytes(c) for c in plan)

    def issue(t: TargetEmitter) -> None:
        t.op(MbarrierArrive(tx), [bar])
        for c in plan:
            issue_copy(t, c, bar)

    e.if_(thread0(e), issue)


def mbar_wait(e: TargetEmitter, bar: Value, phase: Value) -> None:
    """Every thread waits until ``bar``'s phase of parity ``phase`` (``u32`` 0/1) has
    completed (``mbarrier.try_wait.parity`` loop, PTX ISA sec. 9.7.13.15.16)."""
    e.op(MbarrierWait(), [bar, phase])


@dataclass(frozen=True)
class TmaPipeline:
    """An ``S``-stage ring of A/B shared tiles fed by TMA, one mbarrier per stage.

    Stage ``s`` holds K-tile ``kt`` when ``kt % S == s``; its barrier completes one phase
    per fill, so the wait for K-tile ``kt`` uses parity ``(kt // S) & 1`` (the parity
    flips each time the stage is reused). A is ``(bm, bk)``, B is ``(bn, bk)`` when
    ``b_trans`` else ``(bk, bn)``; buffers are ``8 * swizzle``-byte aligned."""

    stages: int
    a: SharedBox  # stage 0; stage s is at base + s * a_bytes
    b: SharedBox
    bars: tuple[Value, ...]
    a_tmap: Value
    b_tmap: Value
    b_trans: bool

    @classmethod
    def create(cls, e: TargetEmitter, stages: int, a_tmap: Value, b_tmap: Value, bm: int, bn: int,
               bk: int, *, b_trans: bool, sym: str = "ring") -> TmaPipeline:
        """Allocate the ring (``{sym}_a``, ``{sym}_b``, ``{sym}_bar``) and its barriers."""
        ta, tb = a_tmap.type, b_tmap.type
        if not (isinstance(ta, TensorMapType) and isinstance(tb, TensorMapType)):
            raise ArgumentError("TmaPipeline.create takes two tensor-map values")
        if stages < 1:
            raise ArgumentError(f"a pipeline needs at least one stage, not {stages}")
        boxes = []
        for name, t, rows, cols in (("a", ta, bm, bk), ("b", tb, *((bn, bk) if b_trans
                                                                  else (bk, bn)))):
            align = max(128, Swizzle(t.swizzle).atom_bytes)
            size = rows * cols * elem_size(t.elem)
            base = e.one(SharedAlloc(f"{sym}_{name}", stages * size, align))
            boxes.append(SharedBox(base, rows, cols, t.elem, t.swizzle, align))
        bars = tma_setup(e, stages, f"{sym}_bar")
        return cls(stages, boxes[0], boxes[1], tuple(bars), a_tmap, b_tmap, b_trans)

    def _at(self, e: TargetEmitter, box: SharedBox, stage: int | Value) -> SharedBox:
        size = box.rows * box.cols * elem_size(box.elem)
        if isinstance(stage, int):
            base = box.base if stage == 0 else e.add(box.base, e.const(stage * size, "u32"),
                                                     "u32")
        else:
            base = e.add(box.base, e.mul(stage, e.const(size, "u32"), "u32"), "u32")
        return SharedBox(base, box.rows, box.cols, box.elem, box.swizzle, box.align)

    def a_box(self, e: TargetEmitter, stage: int | Value) -> SharedBox:
        """The A tile of ``stage`` (an int or a ``u32`` value)."""
        return self._at(e, self.a, stage)

    def b_box(self, e: TargetEmitter, stage: int | Value) -> SharedBox:
        """The B (or B^T) tile of ``stage``."""
        return self._at(e, self.b, stage)

    def barrier(self, e: TargetEmitter, stage: int | Value) -> Value:
        """The mbarrier of ``stage``."""
        if isinstance(stage, int):
            return self.bars[stage]
        return e.add(self.bars[0], e.mul(stage, e.const(8, "u32"), "u32"), "u32")

    def slot(self, e: TargetEmitter, kt: Value) -> tuple[Value, Value]:
        """``(stage, parity)`` (``u32``) of K-tile ``kt`` (``s32``)."""
        k = e.cvt(kt, "u32", "s32")
        s = e.const(self.stages, "u32")
        return e.bin("rem", k, s, "u32"), e.bin("and", e.bin("div", k, s, "u32"),
                                                 e.const(1, "u32"), "u32")

    def issue(self, e: TargetEmitter, stage: int | Value, k: Value, m: Value, n: Value) -> None:
        """Thread 0 loads A rows ``m..`` and B columns ``n..`` of the K-tile starting at
        element ``k`` (``s32`` values) into ``stage``, both on the stage's barrier."""
        a, b = self.a_box(e, stage), self.b_box(e, stage)
        bcopy = TmaCopy(b, self.b_tmap, k, n) if self.b_trans else TmaCopy(b, self.b_tmap, n, k)
        tma_load_many(e, [TmaCopy(a, self.a_tmap, k, m), bcopy], self.barrier(e, stage))

    def wait(self, e: TargetEmitter, stage: int | Value, phase: Value) -> None:
        """All threads wait for ``stage``'s fill of parity ``phase``."""
        mbar_wait(e, self.barrier(e, stage), phase)

    def mainloop(self, e: TargetEmitter, acc: Sequence[Value], m: Value, n: Value, k_tiles: int,
                 *, scale_d_first: bool = False) -> list[Value]:
        """The pipelined K loop: fill ``min(S, k_tiles)`` stages, then per K-tile wait,
        ``wgmma_block``, ``bar.sync`` (every warp is done reading the stage) and refill the
        stage with K-tile ``kt + S``. Returns the accumulators. ``scale_d_first`` passes
        scale-d = ``kt != 0`` so ``acc`` need not be zero."""
        bk = self.a.cols
        atype = self.a.elem
        for kt in range(min(self.stages, k_tiles)):
            self.issue(e, kt, e.const(kt * bk, "s32"), m, n)

        def body(t: TargetEmitter, kt: Value, *carried: Value) -> list[Value]:
            stage, parity = self.slot(t, kt)
            self.wait(t, stage, parity)
            first = t.setp("ne", kt, t.const(0, "s32"), "s32") if scale_d_first else None
            out = wgmma_block(t, carried, self.a_box(t, stage), self.b_box(t, stage),
                              b_trans=self.b_trans, atype=atype, scale_d=first)
            t.bar()
            nxt = t.add(kt, t.const(self.stages, "s32"), "s32")
            refill = t.setp("lt", nxt, t.const(k_tiles, "s32"), "s32")
            t.if_(refill, lambda u: self.issue(u, stage, u.mul(nxt, u.const(bk, "s32"),
                                                               "s32"), m, n))
            return out

        return e.for_(e.const(0, "s32"), e.const(k_tiles, "s32"), e.const(1, "s32"),
                      list(acc), body)


__all__ = [
    "TmaCopy",
    "TmaPipeline",
    "barrier_addresses",
    "copy_bytes",
    "init_barriers",
    "issue_copy",
    "mbar_wait",
    "thread0",
    "tma_load_many",
    "tma_setup",
]
