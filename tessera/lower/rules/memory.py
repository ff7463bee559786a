"""Lowering rules for memory: shared allocation, views, element loads and stores,
read-modify-write updates, barriers and the kernel's returned value.

A view is address arithmetic only (:class:`~tessera.lower.values.Mem`). A scalar
access is one ``ld``/``st`` at ``base + offset * size``. ``tile.update`` of global
memory (``total[0] += x`` from several groups) is applied in group order, as the tile
and Target IR interpreters apply it, by :mod:`tessera.lower.rules.ordered` (the last
CTA applies every tile's recorded updates in order); integer add, min and max stay
``red.global`` (associative and commutative), and a float ``+=`` the ordered schemes
do not cover (an update in a loop of run-time bounds, of a tensor the kernel also
reads) stays ``red.global.add.f32``, whose atomics land in arrival order. A tensor
``+=`` (split-K) is :mod:`tessera.lower.rules.ordered.windows` or ``.rows``.
"""

from __future__ import annotations

from dataclasses import replace
from math import gcd, prod

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.ops import Reduce
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.multiples import Multiples
from tessera.lower.values import Dist, Lowered, Mem, Scalar, elem_bytes, mem_type, reg_type

ALIGN = {"none": 16, "xor": 128, "32B": 256, "64B": 512, "128B": 1024}
SWIZZLE_BYTES = {"none": 0, "xor": 128, "32B": 32, "64B": 64, "128B": 128}


def address(e: TargetEmitter, mem: Mem, extra: Value | None = None) -> Value:
    """The address of element ``mem.offset (+ extra)`` of ``mem``; in a swizzled shared
    buffer the byte offset goes through the buffer's swizzle (``sm80.copy.swizzle_offset``:
    16-byte chunk bits 4-6 XOR bits 7-9 of the offset), as its writers placed it."""
    off = mem.offset
    if extra is not None:
        off = extra if off is None else e.add(off, extra, "s32")
    size = elem_bytes(mem.element)
    if mem.space == "shared":
        if off is None:
            return mem.base
        nbytes = e.cvt(e.mul(off, e.const(size, "s32"), "s32"), "u32", "s32")
        if mem.swizzle:
            nbytes = _swizzle(e, mem, nbytes)
        return e.add(mem.base, nbytes, "u32")
    if off is None:
        return mem.base
    wide = e.bin("mul", off, e.const(size, "s32"), "s32", "wide")
    return e.add(mem.base, e.cvt(wide, "u64", "s64"), "u64")


def _swizzle(e: TargetEmitter, mem: Mem, nbytes: Value) -> Value:
    if mem.meta.get("wgmma") and mem.shape[-1] * elem_bytes(mem.element) > mem.swizzle:
        raise UnsupportedError("elements of a wgmma operand buffer wider than one swizzle "
                               "panel are not addressed directly", loc=e.loc)
    from tessera.lower.sm80.copy import emit_swizzle

    return emit_swizzle(e, nbytes, mem.swizzle)


def load_scalar(e: TargetEmitter, mem: Mem) -> Value:
    """Load element ``mem.offset`` into an f32/s32/pred register."""
    addr = address(e, mem)
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    raw = e.ld(mem.space, addr, mt)
    return to_reg(e, raw, mt, rt, mem.element)


def store_scalar(e: TargetEmitter, mem: Mem, value: Value, vtype: str) -> None:
    """Store a register to element ``mem.offset``, converting to the memory's format."""
    mt = mem_type(mem.element)
    e.st(mem.space, address(e, mem), to_mem(e, value, vtype, mt, mem.element), mt)


def byte_load_guarded(e: TargetEmitter, mem: Mem, addr: Value, guard: Value,
                      other: Value) -> Value:
    """The byte element of ``mem`` at ``addr`` in its register type where ``guard``
    holds, ``other`` elsewhere: a branch around the load (Target IR has no guarded
    byte instruction; ptxas predicates so short a branch)."""
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    return e.if_(guard, lambda inner: [to_reg(inner, inner.ld(mem.space, addr, mt), mt, rt,
                                               mem.element)],
                 lambda inner: [other], types=[RegType(rt)])[0]


def to_reg(e: TargetEmitter, raw: Value, mt: str, rt: str, element: object = None) -> Value:
    """A loaded ``mt`` element as the ``rt`` register of its value (exact widening)."""
    if mt == rt:
        return raw
    if mt in ("b16", "u8", "s8", "b8"):  # narrow bits: widen exactly
        from tessera.lower.rules.tensor import widen

        return widen(e, raw, mt, element)
    if mt == "s64" and rt == "s32":
        return e.cvt(raw, "s32", "s64")
    raise UnsupportedError(f"cannot load {mt} into {rt} registers", loc=e.loc)


def to_mem(e: TargetEmitter, value: Value, vt: str, mt: str, element: object) -> Value:
    """A register converted for a store of ``element`` (``mt`` its memory type): a
    narrow float rounds to nearest even with saturation, as the tile store does."""
    from tessera.lower.values import NARROW, storage_name

    if vt == mt:
        return value
    if vt == "s32" and mt == "s64":
        return e.cvt(value, "s64", "s32")
    if vt == "pred" and mt == "u8":  # a bool is the byte 0 or 1
        return e.selp(e.const(1, "u32"), e.const(0, "u32"), value, "u32")
    if vt == "s32" and mt == "s8":  # an int8 value: st.s8 keeps its low byte
        return value
    fmt = NARROW.get(storage_name(element))  # type: ignore[arg-type]
    if vt == "f32" and mt == "b8" and fmt in ("e4m3", "e5m2"):
        from tessera.lower.arith import fp8

        return fp8.to_byte(e, value, storage_name(element))  # type: ignore[arg-type]
    if vt == "f32" and mt == "b16" and fmt in ("bf16", "f16"):
        from tessera.numerics import storage_of

        # bf16 and f16 overflow to infinity (.satfinite would turn an infinity into MAX)
        sat = ("satfinite",) if storage_of(element).format.saturating else ()
        narrow = e.cvt(value, fmt, "f32", "rn", *sat)
        return e.pack([narrow], "b16")
    raise UnsupportedError(f"cannot store {vt} registers as {mt}", loc=e.loc)


@rule(tile_memory.AllocRegister)
def _alloc_register(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_memory.AllocRegister)
    t = reg_type(op.element)
    poison = float("nan") if t == "f32" else 0  # the simulator's uninitialised value
    if op.shape:
        from tessera.lower.rules.tensor import register_count

        layout = low.layouts[instr.results[0]]
        return [Dist(layout, [low.em.const(poison, t)] * register_count(layout), t)]
    return [Scalar(low.em.const(poison, t), t)]


@rule(tile_memory.AllocShared)
def _alloc_shared(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    return alloc_shared(low, instr)


def alloc_shared(low: Lowerer, instr: Instr, copies: int = 1,
                 copy: Value | None = None) -> list[Lowered]:
    """The shared buffer of a ``tile.alloc_shared``; ``copies`` > 1 reserves that many
    copies, each at the buffer's alignment, and places this thread's at index ``copy``
    (a warp-specialised CTA's consumer warpgroups each run the tile program)."""
    op = instr.op
    assert isinstance(op, tile_memory.AllocShared)
    size = prod(op.shape) * elem_bytes(op.element)
    align = max(op.alignment, ALIGN[op.swizzle])
    swizzle, meta = SWIZZLE_BYTES[op.swizzle], {}
    if instr.results[0] in low.extra.get("wgmma_buffers", ()):
        from tessera.lower.sm90a.mma import swizzle_span

        # laid out as TMA writes and wgmma reads it: swizzled panels, atom-aligned
        swizzle = swizzle_span(tuple(op.shape), op.element)
        align, meta = max(align, 8 * swizzle), {"wgmma": True}
    pad = -(-size // align) * align
    base = low.shared_buffer("smem", size if copies == 1 else pad * copies, align)
    sym = base.owner.op.sym  # type: ignore[union-attr]
    if copies > 1:
        assert copy is not None
        e = low.em
        base = e.add(base, e.mul(copy, e.const(pad, "u32"), "u32"), "u32")
    strides = tuple(prod(op.shape[i + 1:]) for i in range(len(op.shape)))
    return [Mem("shared", base, None, tuple(op.shape), strides, op.element, buffer=sym,
                swizzle=swizzle, meta=meta, align=align)]


@rule(tile_memory.View)
def _view(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_memory.View)
    src = args[0]
    if not isinstance(src, Mem):
        raise UnsupportedError("only memory can be viewed", loc=instr.loc)
    return [window(low, src, args[1:], instr.operands[1:], op.sizes, op.squeeze)]


def window(low: Lowerer, src: Mem, starts: list[Lowered], values: list[Value],
           sizes: tuple[int, ...], squeeze: tuple[int, ...]) -> Mem:
    """The ``sizes`` window of ``src`` at ``starts`` (lowered ``values``), without the
    ``squeeze`` axes: address arithmetic only (a masked access's window may reach past
    the memory's edge; only its masked-on elements are ever addressed)."""
    e = low.em
    off = src.offset
    if "multiples" not in low.extra:
        low.extra["multiples"] = Multiples(low.fn)
    known = low.extra["multiples"]
    align, size = src.align, elem_bytes(src.element)
    for start, stride, value in zip(starts, src.strides, values):
        assert isinstance(start, Scalar)
        term = start.reg if stride == 1 else e.mul(start.reg, e.const(stride, "s32"), "s32")
        off = term if off is None else e.add(off, term, "s32")
        align = gcd(align, known.of(value) * stride * size)
    keep = [a for a in range(len(sizes)) if a not in squeeze]
    return Mem(src.space, src.base, off, tuple(sizes[a] for a in keep),
               tuple(src.strides[a] for a in keep), src.element, src.buffer, src.swizzle,
               meta=dict(src.meta), align=align)


@rule(tile_memory.Select)
def _select(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    index, mems = args[0], args[1:]
    assert isinstance(index, Scalar)
    e = low.em
    base = mems[0].base  # type: ignore[union-attr]
    for k, m in enumerate(mems[1:], start=1):
        assert isinstance(m, Mem)
        hit = e.setp("eq", index.reg, e.const(k, "s32"), "s32")
        base = e.selp(m.base, base, hit, "u32" if m.space == "shared" else "u64")
    first = mems[0]
    assert isinstance(first, Mem)
    align = gcd(*(m.align for m in mems))  # type: ignore[union-attr]
    return [replace(first, base=base, meta=dict(first.meta), align=align)]


def _rank0(instr: Instr) -> bool:
    t = instr.operands[0].type
    return isinstance(t, MemRefType) and t.rank == 0


@rule(tile_memory.Load, tile_memory.LoadVector)
def _load(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    mem = args[0]
    assert isinstance(mem, Mem)
    if _rank0(instr):
        return [Scalar(load_scalar(low.em, mem), reg_type(mem.element))]
    from tessera.lower.rules.block import load_tile

    return [load_tile(low, instr, mem)]


@rule(tile_memory.Store, tile_memory.StoreVector)
def _store(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    mem, value = args
    assert isinstance(mem, Mem)
    from tessera.lower.rules.staged import Staged, stage

    if isinstance(value, Staged):  # a masked load into shared memory: a zero-fill copy
        if stage(low, mem, value):
            return []
        from tessera.lower.rules.masked import load_masked

        load = value.load
        value = load_masked(low, load, value.window, value.mask, low.env[load.operands[-1]])
    if isinstance(value, Scalar) and _rank0(instr):
        store_scalar(low.em, mem, value.reg, value.type)
        return []
    from tessera.lower.rules.block import store_tile

    store_tile(low, instr, mem, value)
    return []


@rule(tile_memory.Update)
def _update(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_memory.Update)
    mem, value = args
    assert isinstance(mem, Mem)
    if not (isinstance(value, Scalar) and _rank0(instr)):
        from tessera.lower.rules.ordered.windows import reduce_into

        if op.op != "add" or mem.space != "global":
            raise UnsupportedError(f"tile.update '{op.op}=' of a tensor into {mem.space} "
                                   "memory is not lowered", hint="'+=' into global memory is",
                                   loc=instr.loc)
        from tessera.lower.layout import possibly_wide

        if "wide" not in low.extra:  # once per kernel, on the first tensor update
            low.extra["wide"] = possibly_wide(low.fn)
        if instr.operands[1] in low.extra["wide"]:
            raise UnsupportedError(
                "'+=' of an mma accumulator: Tessera adds it to memory in float64 and rounds "
                "once, which a GPU's f32 atomic add cannot reproduce",
                hint="round it first (ts.tile.cast(acc, ts.f32)), or accumulate K in a loop "
                     "and store the tile once", loc=instr.loc)
        reduce_into(low, instr, mem, value, low.layouts.get(instr.operands[1]))
        return []
    e = low.em
    name = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "max": "max",
            "min": "min"}.get(op.op)
    if name is None or (name == "div" and value.type != "f32"):
        raise UnsupportedError(f"shared '{op.op}=' is not lowered", loc=instr.loc)
    if low.block_kernel and mem.space == "global":
        # a block kernel's scalar is in every thread of the tile's CTA (of its warpgroup,
        # in a warp-specialised CTA, where tid.x counts within the warpgroup): one update
        # (the threads' identical read-modify-writes of a shared element stay)
        first = e.setp("eq", e.sreg("tid.x"), e.const(0, "u32"), "u32")
        e.if_(first, lambda inner: _scalar_update(low, inner, instr, name, mem, value))
    else:
        _scalar_update(low, e, instr, name, mem, value)
    return []


def _scalar_update(low: Lowerer, e: TargetEmitter, instr: Instr, name: str, mem: Mem,
                   value: Scalar) -> None:
    """``mem = mem <name> value`` for one element, by the threads that run ``e``."""
    mt = mem_type(mem.element)
    if mem.space == "global" and name in ("add", "max", "min") and value.type == "s32" \
            and mt == "s32":
        # integer add, min and max are associative and commutative: the order in which
        # the atomics of several tiles land cannot change the result
        e.op(Reduce("global", name, "s32"), [address(e, mem), value.reg])
        return
    if mem.space == "global":
        from tessera.lower.rules.ordered.scalar import ordered_update, refuse_unordered

        # one element updated by several tiles: applied in tile order at the kernel's end
        how = ordered_update(low, e, instr, address(e, mem), value.reg, value.type, name, mem)
        if how == "ordered":
            return
        if how in ("unordered", "reads"):
            if name == "add" and value.type == "f32" and mt == "f32":
                e.op(Reduce("global", "add", "f32"), [address(e, mem), value.reg])  # see ordered
                return
            refuse_unordered(instr, name, how)
    # other updates are a plain read-modify-write: exact where one tile owns the element
    old = load_scalar(e, mem)
    store_scalar(e, mem, e.bin(name, old, value.reg, value.type), value.type)


@rule(tile_memory.Barrier)
def _barrier(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    from tessera.lower.rules.block import finish_async

    finish_async(low, low.em)  # a barrier completes pending async copies
    low.em.bar()
    return []


def store_result(low: Lowerer, value: Lowered) -> None:
    """The returned value through the ``out`` parameter."""
    e = low.em
    out = low.extra["out"]
    if isinstance(value, Scalar):  # tile 0's value (of batch index 0)
        first = e.setp("eq", low.group_id(e), e.const(0, "s32"), "s32")
        first = e.bin("and", first, e.setp("eq", low.local_id(e), e.const(0, "s32"), "s32"),
                      "pred")
        first = e.bin("and", first, e.setp("eq", e.sreg("ctaid.y"), e.const(0, "u32"),
                                           "u32"), "pred")
        e.if_(first, lambda inner: inner.st("global", out, value.reg, value.type))
        return
    assert isinstance(value, Dist)
    from tessera.lower.rules.block import store_result_tile

    store_result_tile(low, value)


__all__ = ["address", "alloc_shared", "byte_load_guarded", "load_scalar", "store_result",
           "store_scalar", "to_mem", "to_reg", "window"]
