"""The emitter: a small builder of Target IR that the lowering rules share.

It wraps :class:`~tessera.ir.core.Builder` with one method per instruction family,
constant caching (one ``mov`` per immediate per block) and structured control flow
built from Python callables, so a rule reads like the PTX it produces::

    e = TargetEmitter(block, loc)
    i = e.add(e.mul(e.sreg("ctaid.x"), e.const(128, "u32"), "u32"), e.sreg("tid.x"), "u32")
    with_guard = e.if_(e.setp("lt", i, e.const(n, "u32"), "u32"), lambda t: ...)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessera.errors import UNKNOWN_LOC, Loc
from tessera.ir.core import Block, Builder, IRRegion, Op, Type, Value
from tessera.ir.dialects.target import For, If, RegType, While, Yield
from tessera.ir.dialects.target.ops import (
    Bar,
    Binary,
    Const,
    Cvt,
    Fma,
    Load,
    Pack,
    Selp,
    Setp,
    Shfl,
    Special,
    Store,
    Unary,
    Unpack,
)
from tessera.ir.dialects.target.ptx_ops import ByteLoad, ByteStore

#: the 8-bit memory types: PTX moves them through 32-bit registers
BYTE_TYPES = ("u8", "s8", "b8")

Body = Callable[["TargetEmitter"], Sequence[Value] | None]

#: ops already made, by class and fields: ops are frozen, so one instance serves every
#: instruction of its kind (making a frozen dataclass costs more than looking it up)
_MADE: dict[tuple[Any, ...], Op] = {}


def _made(cls: type[Op], *fields: Any) -> Any:
    """``cls(*fields)``, shared; ``fields`` are strings and integers (never floats,
    whose 0.0 and -0.0 compare equal)."""
    key = (cls, *fields)
    op = _MADE.get(key)
    if op is None:
        if len(_MADE) > 4096:  # immediates' offsets vary: keep the table small
            _MADE.clear()
        op = _MADE[key] = cls(*fields)
    return op


class TargetEmitter:
    """Appends Target IR to one block; every instruction gets the rule's source loc."""

    def __init__(self, block: Block, loc: Loc = UNKNOWN_LOC,
                 consts: dict[tuple[Any, str], Value] | None = None,
                 target: str = "sm_80") -> None:
        self.block = block
        self.builder = Builder(block)
        self.loc = loc
        self.target = target  # the PTX target, for rules with a faster form on newer ones
        # immediates are shared by nested blocks: a value defined in an outer block
        # dominates every region below it
        self.consts: dict[tuple[Any, str], Value] = {} if consts is None else consts

    def op(self, op: Op, operands: Sequence[Value] = (), *, regions: Sequence[IRRegion] = (),
           result_types: Sequence[Type] | None = None) -> list[Value]:
        """Append ``op(operands)``; returns its results."""
        return self.builder.create(op, operands, loc=self.loc, regions=regions,
                                   result_types=result_types)

    def one(self, op: Op, *operands: Value) -> Value:
        """Append a one-result ``op`` and return its result."""
        return self.op(op, operands)[0]

    def nested(self, block: Block) -> TargetEmitter:
        """An emitter for a nested block, sharing this one's constants and loc."""
        return TargetEmitter(block, self.loc, dict(self.consts), self.target)

    # -- values
    def const(self, value: Any, type: str) -> Value:
        """An immediate of PTX type ``type`` (cached per block)."""
        key = (value, type) if not isinstance(value, float) else (repr(value), type)
        if key not in self.consts:
            self.consts[key] = self.one(Const(value, type))
        return self.consts[key]

    def sreg(self, name: str) -> Value:
        return self.one(Special(name))

    def bin(self, op: str, a: Value, b: Value, type: str, mode: str = "") -> Value:
        if op in ("div", "rem") and not mode:  # by a constant: shifts, masks or folded
            from tessera.lower.strength import divide

            quick = divide(self, op, a, b, type)
            if quick is not None:
                return quick
        if mode == "" and type in ("f32", "f64") and op in ("add", "sub", "mul", "div"):
            mode = "rn"  # an explicit rounding mode: never contracted into fma
        if mode == "" and op == "mul" and type[0] in "us":
            mode = "lo"
        return self.one(_made(Binary, op, type, mode), a, b)

    def add(self, a: Value, b: Value, type: str) -> Value:
        return self.bin("add", a, b, type)

    def mul(self, a: Value, b: Value, type: str) -> Value:
        return self.bin("mul", a, b, type)

    def un(self, op: str, a: Value, type: str, mode: str = "") -> Value:
        return self.one(_made(Unary, op, type, mode), a)

    def fma(self, a: Value, b: Value, c: Value, type: str) -> Value:
        return self.one(_made(Fma, type), a, b, c)

    def setp(self, cmp: str, a: Value, b: Value, type: str) -> Value:
        return self.one(_made(Setp, cmp, type), a, b)

    def selp(self, a: Value, b: Value, p: Value, type: str) -> Value:
        return self.one(_made(Selp, type), a, b, p)

    def cvt(self, a: Value | Sequence[Value], to: str, frm: str, rnd: str = "",
            sat: str = "") -> Value:
        operands = [a] if isinstance(a, Value) else list(a)
        return self.op(_made(Cvt, to, frm, rnd, sat), operands)[0]

    def pack(self, parts: Sequence[Value], type: str) -> Value:
        return self.op(_made(Pack, type), parts)[0]

    def unpack(self, v: Value, type: str, count: int) -> list[Value]:
        return self.op(_made(Unpack, type, count), [v])

    # -- memory
    def ld(self, space: str, addr: Value, type: str, vec: int = 1, offset: int = 0) -> Value:
        """``ld.<space>{.vN}.<type>``; an 8-bit ``type`` (``u8``, ``s8``, ``b8``) loads
        each byte into a 32-bit register, zero-extended (``s8``: sign-extended), as PTX
        does: it has no 8-bit registers."""
        if type in BYTE_TYPES:
            return self.one(_made(ByteLoad, space, type == "s8", offset, vec), addr)
        return self.one(_made(Load, space, type, vec, offset), addr)

    def st(self, space: str, addr: Value, value: Value, type: str, vec: int = 1,
           offset: int = 0) -> None:
        """``st.<space>{.vN}.<type>``; an 8-bit ``type`` stores the low byte of each
        32-bit integer register."""
        if type in BYTE_TYPES:
            self.op(_made(ByteStore, space, offset, vec), [addr, value])
            return
        self.op(_made(Store, space, type, vec, offset), [addr, value])

    def bar(self) -> None:
        self.op(Bar())

    def warpgroup(self) -> Value:
        """``%tid.x / 128`` broadcast from lane 0 (``shfl.sync.idx``): the same value, but
        ptxas then knows it is warp-uniform and keeps what follows from it (a
        warpgroup's tile, its loop's count and ring slots) in uniform registers, where
        ``%tid.x``-derived values would be per-thread (CUTLASS's
        ``canonical_warp_group_idx`` does the same)."""
        tid = TargetEmitter.sreg(self, "tid.x")  # the CTA's, whatever a subclass reads
        index = self.bin("shr", tid, self.const(7, "u32"), "u32")
        return self.one(Shfl("idx"), index, self.const(0, "u32"))

    # -- structured control flow
    def _region(self, args: Sequence[Type], body: Body,
                made: Callable[[Block], None] | None = None) -> tuple[IRRegion, list[Value]]:
        block = Block()
        params = [block.add_arg(t) for t in args]
        if made is not None:  # before the body is emitted
            made(block)
        inner = self.nested(block)
        out = body(inner, *params) if params else body(inner)  # type: ignore[call-arg]
        inner.op(Yield(), list(out or []))
        return IRRegion([block]), params

    def if_(self, pred: Value, then: Body, otherwise: Body | None = None,
            types: Sequence[Type] = (), rare: bool = False) -> list[Value]:
        """``ptx.if``: ``then``/``otherwise`` get a nested emitter and return the
        values to yield (of ``types``); ``rare`` marks ``then`` as a slow path."""
        r0, _ = self._region((), then)
        r1, _ = self._region((), otherwise or (lambda e: None))
        return self.op(If(rare), [pred], regions=[r0, r1], result_types=list(types))

    def for_(self, lo: Value, hi: Value, step: Value, init: Sequence[Value],
             body: Callable[..., Sequence[Value] | None]) -> list[Value]:
        """``ptx.for``: ``body(emitter, index, *carried)`` returns the next carried."""
        from tessera.lower.strength import mark_counting

        types = [RegType("s32"), *(v.type for v in init)]
        region, _ = self._region(types, body, lambda block: mark_counting(block, lo, step))
        return self.op(For(), [lo, hi, step, *init], regions=[region])

    def while_(self, init: Sequence[Value], cond: Callable[..., Value],
               body: Callable[..., Sequence[Value]]) -> list[Value]:
        """``ptx.while``: ``cond(emitter, *carried)`` returns a predicate."""
        from tessera.ir.dialects.target import Condition

        types = [v.type for v in init]
        cblock = Block()
        cargs = [cblock.add_arg(t) for t in types]
        ce = self.nested(cblock)
        ce.op(Condition(), [cond(ce, *cargs)])
        region, _ = self._region(types, body)
        return self.op(While(), list(init), regions=[IRRegion([cblock]), region])


def drop_unused_conversions(body: Block) -> None:
    """Remove the conversions, packs and immediates of ``body`` that nothing reads: a
    cast whose values a consumer converted again from their sources (wgmma's A
    fragments in ``bf16x2`` pairs, :func:`tessera.lower.sm90a.mma.a_fragments`)."""
    from tessera.ir.transforms.dce import eliminate_dead

    eliminate_dead(body, only=(Const, Cvt, Pack))


__all__ = ["BYTE_TYPES", "Body", "TargetEmitter", "drop_unused_conversions"]
