"""PTX warp-level instructions and CTA synchronisation as Target IR (PTX ISA sec.
9.7.12-9.7.14): ``shfl.sync``, ``vote.sync``/``activemask``, ``redux.sync``,
``match.sync`` (member masks constant or in a register), ``bar.sync``/``barrier.sync``,
``bar.arrive``, ``bar.warp.sync``, ``bar.red`` and the memory fences; and the warp-level matrix
instructions ``wmma`` (sec. 9.7.14.4; the ops and the fragment layout the interpreter
chooses are in :mod:`tessera.ir.dialects.target.wmma`): ``m16n16k16`` with f16 or bf16
A and B and f32 accumulators, in global, shared or generic memory.
"""

from __future__ import annotations

from tessera.ir.core import Value
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target import ptx_ops, warp_ops
from tessera.ir.dialects.target import wmma as wmma_ops
from tessera.ir.text.ptx.arith import count, handler
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.lexer import parse_float_bits, parse_int


@handler("shfl")
def _shfl(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if len(mods) != 3 or mods[0] != "sync" or mods[2] != "b32" or \
            mods[1] not in ("up", "down", "bfly", "idx"):
        raise b.unsupported(f"shfl.{'.'.join(mods)}")
    count(b, ops, 5)
    _integer_mask(b, ops[4])
    # b and c are .b32 operands: ptxas takes a 0f literal for them too
    args = [b.read(ops[1], "b32")] + [
        b.const(bits[0], "u32") if (bits := parse_float_bits(o.strip())) and bits[1] == 32
        else b.read(o, "u32") for o in ops[2:]]
    d, p = b.emit(ptx_ops.ShflSync(mods[1]), args)
    dests = ops[0].split("|")
    b.write(dests[0], d)
    if len(dests) == 2:
        b.write(dests[1], p)


@handler("vote", "activemask")
def _vote(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if b.head == "activemask":
        count(b, ops, 1)
        (d,) = b.emit(ptx_ops.Vote("active"))
        b.write(ops[0], d)
        return
    body = [f for f in mods if f != "sync"]
    if len(body) != 2 or body[0] not in ("all", "any", "uni", "ballot"):
        raise b.unsupported(f"vote.{'.'.join(mods)}")
    if body[1] != ("b32" if body[0] == "ballot" else "pred"):
        raise b.syntax(f"vote.{body[0]} is .{'b32' if body[0] == 'ballot' else 'pred'}")
    count(b, ops, 3)
    mask, args = read_member_mask(b, ops[2])
    (d,) = b.emit(ptx_ops.Vote(body[0], mask), [b.read(ops[1], "pred"), *args])
    b.write(ops[0], d)


def _integer_mask(b: InstrBuilder, token: str) -> None:
    """Refuse a float literal as a member mask, as ptxas does."""
    if parse_float_bits(token.strip()) is not None:
        raise b.syntax(f"{b.head}'s member mask is an integer, not a float literal")


def read_member_mask(b: InstrBuilder, token: str) -> tuple[int, list[Value]]:
    """A warp instruction's member mask: a constant, or a register (``activemask``'s)
    read as a ``b32`` operand."""
    _integer_mask(b, token)
    mask = parse_int(token)
    return (0xFFFFFFFF, [b.read(token, "b32")]) if mask is None else (mask & 0xFFFFFFFF, [])


@handler("redux")
def _redux(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    body = [f for f in mods if f != "sync"]
    if len(body) != 2 or body[0] not in warp_ops.REDUX_TYPES:
        raise b.unsupported(f"redux.{'.'.join(mods)}")
    op, t = body
    takes = warp_ops.REDUX_TYPES[op]
    if t not in takes:
        raise b.syntax(f"redux.sync.{op} takes {', '.join('.' + x for x in takes)}, not .{t}")
    count(b, ops, 3)
    mask, args = read_member_mask(b, ops[2])
    (d,) = b.emit(warp_ops.Redux(op, t, mask), [b.read(ops[1], t), *args])
    b.write(ops[0], d)


@handler("match")
def _match(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    body = [f for f in mods if f != "sync"]
    if len(body) != 2 or body[0] not in ("any", "all") or body[1] not in ("b32", "b64"):
        raise b.syntax("match is match.any.sync or match.all.sync of .b32 or .b64")
    count(b, ops, 3)
    mask, args = read_member_mask(b, ops[2])
    results = b.emit(warp_ops.Match(body[0], body[1], mask), [b.read(ops[1], body[1]), *args])
    dests = ops[0].split("|")
    if len(dests) > len(results):
        raise b.syntax("match.any writes one register (match.all: d|p)")
    for token, value in zip(dests, results):
        b.write(token, value)


@handler("bar", "barrier")
def _bar(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if b.head == "bar" and mods == ["warp", "sync"]:
        count(b, ops, 1)
        mask, args = read_member_mask(b, ops[0])
        if args:
            raise b.unsupported("bar.warp.sync with a register member mask")
        b.emit(ptx_ops.WarpSync(mask))
        return
    if b.head == "barrier" and mods[:1] == ["cluster"]:
        from tessera.ir.text.ptx.hopper import cluster_barrier

        cluster_barrier(b, mods, ops)
        return
    if b.head == "bar" and "aligned" in mods:
        raise b.syntax("bar is aligned already: .aligned belongs to barrier")
    if "cta" in mods[1:]:
        raise b.syntax(f"{b.head}'s .cta comes first: {b.head}.cta.{mods[0]}")
    if "red" in mods:
        _bar_red(b, [f for f in mods if f not in ("cta", "aligned", "red")], ops)
        return
    body = [f for f in mods if f not in ("cta", "aligned")]
    if body not in (["sync"], ["arrive"]):
        raise b.unsupported(f"{b.head}.{'.'.join(mods)}")
    arrive = body == ["arrive"]
    if len(ops) not in ((2,) if arrive else (1, 2)):
        raise b.syntax(f"{b.head}.{body[0]} takes a barrier id and "
                       f"{'a' if arrive else 'an optional'} thread count")
    ident, threads = (parse_int(o) for o in (*ops, "0")[:2])
    if ident is None or threads is None:
        raise b.unsupported(f"{b.head}.{body[0]} with a register barrier id or thread count")
    b.emit(target_ops.BarArrive(ident, threads) if arrive else target_ops.Bar(ident, threads))


def _bar_red(b: InstrBuilder, body: list[str], ops: list[str]) -> None:
    """``bar.red.popc.u32 d, id, p`` and ``bar.red.{and,or}.pred d, id, p``."""
    if body not in (["popc", "u32"], ["and", "pred"], ["or", "pred"]):
        raise b.syntax("bar.red is bar.red.popc.u32, bar.red.and.pred or bar.red.or.pred")
    if len(ops) != 3:
        raise b.unsupported("bar.red with a thread count")
    ident = parse_int(ops[1])
    if ident is None:
        raise b.unsupported("bar.red with a register barrier id")
    (d,) = b.emit(target_ops.BarRed(body[0], ident), [b.read(ops[2], "pred")])
    b.write(ops[0], d)


@handler("membar", "fence")
def _fence(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 0)
    if b.head == "fence" and mods[:1] in (["sc"], ["acq_rel"]) and len(mods) == 1:
        raise b.syntax(f"fence.{mods[0]} needs a scope (.cta, .cluster, .gpu or .sys)")
    if b.head == "fence" and mods[:2] == ["proxy", "async"]:
        if mods[2:] not in ([], ["global"], ["shared::cta"], ["shared::cluster"]):
            raise b.syntax("fence.proxy.async takes an optional .global, .shared::cta or "
                           ".shared::cluster")
        b.emit(target_async.Fence("proxy_async"))
    elif b.head == "fence" and mods == ["mbarrier_init", "release", "cluster"]:
        b.emit(target_async.Fence("mbarrier_init"))
    elif b.head == "membar" and mods in (["cta"], ["gl"], ["sys"]):
        b.emit(target_async.Fence(f"membar_{mods[0]}"))
    elif b.head == "fence" and mods and mods[0] in ("sc", "acq_rel") and \
            mods[1:] in (["cta"], ["gpu"], ["sys"], ["cluster"]):
        if mods[1] == "cluster":
            b.require("the .cluster scope", 90, (7, 8))
        b.require(f"fence.{mods[0]}", 70, (6, 0))
        b.emit(target_async.Fence(f"{mods[0]}_{mods[1]}"))
    else:
        raise b.unsupported(f"{b.head}.{'.'.join(mods)}")


# --- wmma ------------------------------------------------------------------------------
_SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared"}


def _shape(b: InstrBuilder, mods: list[str]) -> tuple[str, str, list[str]]:
    """(layout, state space, the other modifiers) of a load or store."""
    rest = [f for f in mods if f not in ("sync", "aligned")]
    if "m16n16k16" not in rest:
        raise b.unsupported(f"wmma.{'.'.join(mods)} (m16n16k16 is supported)")
    rest.remove("m16n16k16")
    layouts = [f for f in rest if f in ("row", "col")]
    spaces = [f for f in rest if f in _SPACES]
    if len(layouts) != 1:
        raise b.syntax("wmma loads and stores name one layout, .row or .col")
    others = [f for f in rest if f not in layouts and f not in spaces]
    return layouts[0], _SPACES[spaces[0]] if spaces else "", others


@handler("wmma")
def _wmma(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    kind = mods[0] if mods else ""
    if kind == "load" and len(mods) > 1:
        layout, space, rest = _shape(b, mods[2:])
        if len(rest) != 1 or len(ops) not in (2, 3):
            raise b.unsupported(f"wmma.{'.'.join(mods)}")
        addr, offset = b.read_address(ops[1], "u32" if space == "shared" else "u64")
        if offset:
            raise b.unsupported("wmma with an address offset")
        stride = b.read(ops[2], "u32") if len(ops) == 3 else b.const(16, "u32")
        (d,) = b.emit(wmma_ops.WmmaLoad(mods[1], layout, space, rest[0]), [addr, stride])
        b.write(ops[0], d)
    elif kind == "store" and mods[1:2] == ["d"]:
        layout, space, rest = _shape(b, mods[2:])
        if rest != ["f32"] or len(ops) not in (2, 3):
            raise b.unsupported(f"wmma.{'.'.join(mods)} (f32 results are supported)")
        addr, offset = b.read_address(ops[0], "u32" if space == "shared" else "u64")
        if offset:
            raise b.unsupported("wmma with an address offset")
        stride = b.read(ops[2], "u32") if len(ops) == 3 else b.const(16, "u32")
        b.emit(wmma_ops.WmmaStore(layout, space), [addr, b.read(ops[1], "f32"), stride])
    elif kind == "mma":
        rest = [f for f in mods[1:] if f not in ("sync", "aligned", "row", "col")]
        if len(ops) != 4 or not rest or rest[0] != "m16n16k16" or rest[1:2] != ["f32"]:
            raise b.unsupported(f"wmma.{'.'.join(mods)}")
        types = rest[2:]
        atype = "bf16" if "bf16" in types else "f16"
        if types not in (["f32"], ["bf16", "bf16", "f32"], ["f16", "f16", "f32"]):
            raise b.unsupported(f"wmma.mma with .{'.'.join(types)} (f32 accumulators are "
                                "supported)")
        n = wmma_ops.AB_REGS[atype]
        a, bb = b.read(ops[1], "b32"), b.read(ops[2], "b32")
        if a.type.count != n or bb.type.count != n:  # type: ignore[attr-defined]
            raise b.syntax(f"{atype} A and B fragments are {n} registers")
        (d,) = b.emit(wmma_ops.WmmaMma(atype), [a, bb, b.read(ops[3], "f32")])
        b.write(ops[0], d)
    else:
        raise b.unsupported(f"wmma.{'.'.join(mods)}")


__all__ = ["read_member_mask"]
