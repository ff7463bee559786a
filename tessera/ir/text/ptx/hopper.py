"""The asynchronous barriers and sm_90 instructions as Target IR (PTX ISA sec. 9.7.9.27,
9.7.13.15, 9.7.15): ``mbarrier`` (sm_80's ``init``, ``arrive``, ``test_wait`` and
``cp.async.mbarrier.arrive``, sm_90's forms), TMA loads and stores
(``cp.async.bulk.tensor.2d``) and the bulk groups of stores, ``wgmma``, ``stmatrix``,
``elect.sync`` and ``setmaxnreg``; the cluster instructions ``mapa``, ``getctarank`` and
``barrier.cluster`` (sec. 9.7.9.21, 9.7.9.22, 9.7.13.2).

``mbarrier.try_wait`` and ``test_wait`` (polling instructions, used in a loop) become
the interpreter's blocking wait, which lands the copies on the barrier and reports a
phase that cannot complete; the predicate they return is then true. ``setmaxnreg``
only moves registers between warpgroups and changes no value: it is accepted.
"""

from __future__ import annotations

from tessera.arch.mbarrier import TX_LIMIT
from tessera.ir.core import Value
from tessera.ir.dialects.target import REG_TYPES, RegType, mbarrier_ops, memory_ops, ptx_ops
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.wgmma_rs import A_REGS, WgmmaRegA
from tessera.ir.text.ptx.arith import count, handler
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.lexer import parse_int
from tessera.ir.text.ptx.memory import hinted, plain_address
from tessera.ir.text.ptx.warp import read_member_mask

_SHARED = ("shared", "shared::cta", "shared::cluster")


def _constant(b: InstrBuilder, token: str, what: str) -> int:
    value = parse_int(token)
    if value is None:
        raise b.unsupported(f"{what} in a register")
    return value


@handler("mbarrier")
def _mbarrier(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    kind = mods[0] if mods else ""
    if mods[-1:] != ["b64"]:
        raise b.syntax(f"mbarrier.{kind} works on a .b64 barrier: end the opcode with .b64")
    if not set(_SHARED) & set(mods):
        raise b.unsupported(f"mbarrier.{kind} at a generic address (say .shared::cta)")
    if len([f for f in mods if f in _SHARED]) > 1:
        raise b.syntax(f"mbarrier.{kind} names one state space")
    rest = [f for f in mods[1:] if f not in _SHARED and f not in ("b64", "release", "cta",
                                                                  "acquire", "relaxed",
                                                                  "cluster")]
    remote = kind == "arrive" and "shared::cluster" in mods  # maybe another CTA's barrier
    if "cta" in mods and not {"release", "acquire", "relaxed"} & set(mods):
        raise b.syntax(f"mbarrier.{kind}'s scope .cta needs an order (.release, .acquire "
                       "or .relaxed)")
    if kind == "init" and not rest:
        count(b, ops, 2)
        at = plain_address(b, ops[0], "u32")
        arrivals = parse_int(ops[1])
        if arrivals is None:  # cuda::barrier's init(&bar, block.size())
            b.emit(target_async.MbarrierInit(0), [at, b.read(ops[1], "u32")])
        elif not 1 <= arrivals <= TX_LIMIT:
            raise b.syntax(f"an arrival count of {arrivals}: mbarrier.init counts 1 to "
                           "2^20 - 1 arrivals")
        else:
            b.emit(target_async.MbarrierInit(arrivals), [at])
    elif kind == "inval" and not rest:
        count(b, ops, 1)
        b.emit(target_async.MbarrierInval(), [plain_address(b, ops[0], "u32")])
    elif kind == "arrive" and rest in ([], ["expect_tx"]):
        if len(ops) not in ((3,) if rest else (2, 3)):
            raise b.syntax(f"expected state, [addr]{', tx' if rest else '{, count}'}")
        fixed = parse_int(ops[2]) if rest else 0
        counted = bool(ops[2:]) and not rest
        in_register = counted and parse_int(ops[2]) is None  # libcu++'s barrier arrive(n)
        arrivals = 1 if in_register or not counted else _arrival_count(b, ops[2])
        state = ops[0].strip() != "_"
        if remote and state:
            raise b.syntax("an arrival on a .shared::cluster barrier returns no state: "
                           "its destination is the sink _")
        at = [plain_address(b, ops[1], "u32")]
        if in_register:
            b.require("mbarrier.arrive with an arrival count", 90, (7, 8))
            token = b.emit(target_async.MbarrierArrive(0, 1, state, count_operand=True,
                                                       remote=remote),
                           [*at, b.read(ops[2], "u32")])
        elif fixed is None:  # the byte count in a register (CUB's bulk copies)
            token = b.emit(target_async.MbarrierArrive(0, 1, state, True, remote=remote),
                           [*at, b.read(ops[2], "u32")])
        else:
            token = b.emit(target_async.MbarrierArrive(fixed, arrivals, state,
                                                       remote=remote), at)
        if state:
            b.write(ops[0], b.bitcast(token[0], "b64"))
    elif kind in ("try_wait", "test_wait") and rest in (["parity"], []):
        if len(ops) not in (3, 4) or (kind == "test_wait" and len(ops) != 3):
            raise b.syntax(f"expected p, [addr], {'parity' if rest else 'state'}"
                           f"{'{, suspend hint}' if kind == 'try_wait' else ''}")
        if len(ops) == 4:  # a suspend-time hint in nanoseconds: no effect on values
            b.read(ops[3], "u32")
        if rest:
            if (value := parse_int(ops[2].strip())) is not None and value not in (0, 1):
                raise b.syntax(f"an immediate phase parity is 0 or 1, not {value}")
            parity = b.read(ops[2], "u32")
        else:  # the phase an arrival's state token names: its parity bit
            low = b.emit(target_ops.Cvt("u32", "u64"), [b.read(ops[2], "u64")])[0]
            parity = b.emit(target_ops.Binary("and", "u32"), [low, b.const(1, "u32")])[0]
        b.emit(target_async.MbarrierWait(), [plain_address(b, ops[1], "u32"), parity])
        b.write(ops[0], b.const(True, "pred"))
    else:
        raise b.unsupported(f"mbarrier.{'.'.join(mods)}")


def _arrival_count(b: InstrBuilder, token: str) -> int:
    """``mbarrier.arrive ... _, [addr], count`` is sm_90's and PTX 7.8's (ptxas 13.5
    refuses it before, as the ISA's notes say), for 1 to 2^20 - 1 arrivals."""
    b.require("mbarrier.arrive with an arrival count", 90, (7, 8))
    arrivals = _constant(b, token, "the arrival count")
    if arrivals < 1:
        raise b.syntax(f"an arrival count of {arrivals}: it is 1 or more")
    if arrivals > TX_LIMIT:  # ptxas takes it; the ISA gives it no meaning
        raise b.unsupported(f"an arrival count of {arrivals} (the ISA's range: 1 to 2^20 - 1)")
    return arrivals


def cp_async_arrive(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cp.async.mbarrier.arrive{.noinc}.shared{::cta}.b64 [addr]`` (sm_80)."""
    flags = [f for f in mods[2:] if f != "noinc"]
    if flags not in (["shared", "b64"], ["shared::cta", "b64"]):
        raise b.syntax("cp.async.mbarrier.arrive is "
                       "cp.async.mbarrier.arrive{.noinc}.shared{::cta}.b64 [addr]")
    count(b, ops, 1)
    b.emit(target_async.CpAsyncArrive("noinc" in mods), [plain_address(b, ops[0], "u32")])


def bulk_copy(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cp.async.bulk...``: 2-D TMA loads and stores, the bulk groups of stores, and 1-D
    bulk loads from global memory; a copy's ``.L2::cache_hint`` takes a cache policy
    last (:func:`~tessera.ir.text.ptx.memory.hinted`)."""
    if "L2::cache_hint" in mods:
        if mods[1:2] in (["commit_group"], ["wait_group"]):
            raise b.syntax(f"cp.async.bulk.{mods[1]} takes no .L2::cache_hint")
        ops = hinted(b, mods, ops, None)
        mods = [f for f in mods if f != "L2::cache_hint"]
    if mods == ["bulk", "commit_group"]:
        count(b, ops, 0)
        b.emit(target_async.BulkCommit())
    elif mods[:2] == ["bulk", "wait_group"] and mods[2:] in ([], ["read"]):
        count(b, ops, 1)
        b.emit(target_async.BulkWait(_constant(b, ops[0], "the group count"), bool(mods[2:])))
    elif mods[:2] == ["bulk", "tensor"] and "bulk_group" in mods:
        _tma_store(b, mods, ops)
    elif mods[:2] == ["bulk", "tensor"]:
        tma_load(b, mods, ops)
    elif mods[:1] == ["bulk"] and mods[1:2] in (["shared::cta"], ["shared::cluster"]) and \
            mods[2:] == ["global"]:
        raise b.syntax("a bulk copy into shared memory completes on an mbarrier: "
                       "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes")
    elif mods[:1] == ["bulk"] and mods[1:2] in (["shared::cta"], ["shared::cluster"]) and \
            mods[2:] == ["global", "mbarrier::complete_tx::bytes"]:
        count(b, ops, 4)
        b.emit(target_async.BulkLoad(), [
            plain_address(b, ops[0], "u32"), plain_address(b, ops[1], "u64"),
            b.read(ops[2], "u32"), plain_address(b, ops[3], "u32")])
    else:
        raise b.unsupported(f"cp.async.{'.'.join(mods)}")


def _shared_operand(b: InstrBuilder, token: str) -> Value:
    """A TMA copy's shared-memory address, ``[a]`` or (as ptxas also takes it) a bare
    register."""
    t = token.strip()
    if not b.is_register(t):
        if parse_int(t) is not None:
            raise b.syntax(f"an immediate shared-memory address {t}: give a register")
        if not t.startswith("["):  # ptxas takes a float literal here too
            raise b.unsupported(f"a TMA copy's shared-memory address {t}")
        return plain_address(b, t, "u32")
    kind = b.scope.registers[b.register(t)]
    if REG_TYPES[kind][1] in "fp" or REG_TYPES[kind][0] < 32:  # what ptxas makes of it
        raise b.unsupported(f"a TMA copy's shared-memory address in .{kind} register {t}")
    return plain_address(b, f"[{t}]", "u32")


def _tensor_operand(b: InstrBuilder, token: str) -> list[Value]:
    """``[tmap, {c0, c1}]``: the tensor map and the two ``s32`` coordinates."""
    inner = token.strip()[1:-1]
    tmap_token, _, coords = inner.partition(",")
    parts = [c.strip() for c in coords.strip()[1:-1].split(",")]
    if len(parts) != 2:
        raise b.syntax("a 2-D TMA copy takes two coordinates {c0, c1}")
    (tmap,) = b.emit(ptx_ops.TensorMapAt(), [b.read(tmap_token, "u64")])
    return [tmap, b.read(parts[0], "s32"), b.read(parts[1], "s32")]


def _tma_store(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [tmap, {c0, c1}], [src]``."""
    body = [f for f in mods if f not in ("tile",)]
    if body[2:] != ["2d", "global", "shared::cta", "bulk_group"]:
        raise b.unsupported(f"cp.async.{'.'.join(mods)} (2-D TMA stores from shared::cta "
                            "are supported)")
    count(b, ops, 2)
    b.emit(target_async.TmaStore(), [_shared_operand(b, ops[1]), *_tensor_operand(b, ops[0])])


def tma_load(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes``."""
    body = [f for f in mods if f not in ("tile",)]
    multicast = body[-1:] == ["multicast::cluster"]
    if multicast:
        body = body[:-1]
    if body[:3] != ["bulk", "tensor", "2d"] or body[3] not in _SHARED or \
            body[4:] != ["global", "mbarrier::complete_tx::bytes"]:
        raise b.unsupported(f"cp.async.{'.'.join(mods)} (2-D TMA loads into shared memory, "
                            "multicast or not, are supported)")
    count(b, ops, 4 if multicast else 3)
    args = [_shared_operand(b, ops[0]), *_tensor_operand(b, ops[1]), _shared_operand(b, ops[2])]
    if multicast:  # the CTA mask: a 16-bit register or literal
        args.append(b.read(ops[3], "u16"))
    b.emit(target_async.TmaLoad(multicast), args)


@handler("wgmma")
def _wgmma(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    body = [f for f in mods if f not in ("sync", "aligned")]
    if body in (["fence"], ["commit_group"]):
        count(b, ops, 0)
        b.emit(target_async.WgmmaFence() if body == ["fence"] else target_async.WgmmaCommit())
        return
    if body == ["wait_group"]:
        count(b, ops, 1)
        b.emit(target_async.WgmmaWait(_constant(b, ops[0], "the group count")))
        return
    sat = int("satfinite" in body)  # integer products: ...m64nNk32.satfinite.s32.s8.s8
    if sat:
        body.remove("satfinite")
    if len(body) != 5 or body[0] != "mma_async" or body[2] not in ("f32", "s32") or \
            not body[1].startswith("m64n"):
        raise b.unsupported(f"wgmma.{'.'.join(mods)} (shared-memory A and B, f32 or s32 "
                            "accumulators are supported)")
    n = int(body[1][4:].split("k")[0])
    ctype, atype, btype = body[2], body[3], body[4]
    if ops[1:2] and ops[1].strip().startswith("{") and ctype == "f32":  # A in registers
        _wgmma_rs(b, n, atype, btype, ops)
        return
    if ctype == "s32":  # integer inputs take no scale or transpose immediates
        if len(ops) != 4:
            raise b.syntax("expected {d}, descA, descB, scale-d")
        trans = [0, 0]
    else:
        if len(ops) not in (6, 8):
            raise b.syntax("expected {d}, descA, descB, scale-d, scale-a, scale-b{, tA, tB}")
        _scales(b, ops[4:6])
        trans = [_flag(b, o) for o in ops[6:8]] or [0, 0]
    acc = b.read(ops[0], ctype)
    if acc.type != RegType(ctype, n // 2):
        raise b.syntax(f"m64n{n} takes {n // 2} accumulator registers")
    desc_a, desc_b = b.read(ops[1], "u64"), b.read(ops[2], "u64")
    scale = b.read(ops[3], "pred")
    (d,) = b.emit(target_async.Wgmma(n, atype, btype, trans[0], trans[1], ctype, sat),
                  [acc, desc_a, desc_b, scale])
    b.write(ops[0], d)


def _scales(b: InstrBuilder, tokens: list[str]) -> None:
    """``wgmma``'s ``imm-scale-a``/``imm-scale-b``: 1 or -1 (negating A or B, which the
    interpreter does not model)."""
    values = [_constant(b, t, "a wgmma scale") for t in tokens]
    if any(v not in (1, -1) for v in values):
        raise b.syntax(f"wgmma's scales of A and B are 1 or -1, not {values}")
    if -1 in values:
        raise b.unsupported("wgmma with negated A or B (scale -1)")


def _flag(b: InstrBuilder, token: str) -> int:
    """A ``wgmma`` transpose flag: 0 or 1."""
    value = _constant(b, token, "a transpose flag")
    if value not in (0, 1):
        raise b.syntax(f"a wgmma transpose flag is 0 or 1, not {value}")
    return value


def _wgmma_rs(b: InstrBuilder, n: int, atype: str, btype: str, ops: list[str]) -> None:
    if len(ops) != 7:
        raise b.syntax("expected {d}, {a0, a1, a2, a3}, descB, scale-d, scale-a, scale-b, tB")
    _scales(b, ops[4:6])
    acc = b.read(ops[0], "f32")
    if acc.type != RegType("f32", n // 2):
        raise b.syntax(f"m64n{n} takes {n // 2} accumulator registers")
    a = b.read(ops[1], "b32")
    if a.type != A_REGS:
        raise b.syntax("wgmma's register A is four b32 registers")
    (d,) = b.emit(WgmmaRegA(n, atype, btype, 0, _flag(b, ops[6])),
                  [acc, a, b.read(ops[2], "u64"), b.read(ops[3], "pred")])
    b.write(ops[0], d)


@handler("mapa", "getctarank")
def _cluster_address(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``mapa{.shared::cluster}.type d, a, rank`` and ``getctarank{...}.type d, a``."""
    space = "shared::cluster" if mods[:1] == ["shared::cluster"] else ""
    rest = mods[1:] if space else mods
    if rest not in (["u32"], ["u64"]):
        raise b.syntax(f"{b.head} is {b.head}{{.shared::cluster}}.u32 or .u64")
    b.require(b.head, 90, (7, 8))
    elem = rest[0]
    if not space and elem == "u32":
        raise b.unsupported(f"{b.head}.u32 of a 32-bit generic address (.address_size 32)")
    count(b, ops, 3 if b.head == "mapa" else 2)
    addr = b.read(ops[1], elem)  # a register, a shared variable or one plus an offset
    if b.head == "mapa":
        (d,) = b.emit(memory_ops.Mapa(space), [addr, b.read(ops[2], "u32")])
    else:
        (d,) = b.emit(memory_ops.GetCtaRank(space), [addr])
    b.write(ops[0], d)


def cluster_barrier(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``barrier.cluster.arrive{.release|.relaxed}{.aligned}`` and
    ``barrier.cluster.wait{.acquire}{.aligned}``."""
    kind, rest = (mods[1] if len(mods) > 1 else ""), mods[2:]
    aligned = "aligned" in rest
    order = [f for f in rest if f != "aligned"]
    allowed = {"arrive": (["release"], ["relaxed"], []), "wait": (["acquire"], [])}
    if kind not in allowed or order not in allowed[kind] or rest.count("aligned") > 1:
        raise b.syntax("barrier.cluster is barrier.cluster.arrive{.release|.relaxed}"
                       "{.aligned} or barrier.cluster.wait{.acquire}{.aligned}")
    count(b, ops, 0)
    b.require("barrier.cluster", 90, (8, 0) if order else (7, 8))
    b.emit(mbarrier_ops.ClusterArrive(order == ["relaxed"], aligned) if kind == "arrive"
           else mbarrier_ops.ClusterWait(aligned))


@handler("elect")
def _elect(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if mods != ["sync"]:
        raise b.unsupported(f"elect.{'.'.join(mods)}")
    count(b, ops, 2)
    mask, args = read_member_mask(b, ops[1])
    lane, pred = b.emit(ptx_ops.Elect(mask), args)
    dests = [d.strip() for d in ops[0].split("|")]
    if len(dests) != 2:
        raise b.syntax("elect.sync writes d|p")
    if dests[0] != "_":  # the sink: the lane id is not wanted
        b.write(dests[0], lane)
    b.write(dests[1], pred)


@handler("stmatrix")
def _stmatrix(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 2)
    num = next((int(f[1:]) for f in mods if f in ("x1", "x2", "x4")), 0)
    extra = set(mods) - {"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared",
                         "shared::cta", "b16"}
    if not num or extra or "m8n8" not in mods:
        raise b.unsupported(f"stmatrix.{'.'.join(mods)}")
    b.emit(ptx_ops.Stmatrix(num, "trans" in mods),
           [plain_address(b, ops[0], "u32"), b.read(ops[1], "b32")])


@handler("setmaxnreg")
def _setmaxnreg(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if not mods or mods[0] not in ("inc", "dec"):
        raise b.unsupported(f"setmaxnreg.{'.'.join(mods)}")
    count(b, ops, 1)
    value = parse_int(ops[0])
    if value is None or value % 8 or not 24 <= value <= 256:
        raise b.syntax(f"setmaxnreg takes a multiple of 8 from 24 to 256, not {ops[0]}")
    # no register value changes: nothing to emit


@handler("griddepcontrol")
def _griddepcontrol(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """Programmatic dependent launch (PTX ISA sec. 9.7.13.9): ``.wait`` waits for the
    grids this one depends on, ``.launch_dependents`` lets the next one start early.
    Launches run one after another here, each after the last has finished and its
    memory is visible, so both hold already: nothing to emit."""
    if mods not in (["wait"], ["launch_dependents"]):
        raise b.syntax("griddepcontrol takes .wait or .launch_dependents")
    count(b, ops, 0)


__all__ = ["bulk_copy", "tma_load"]
