"""``wmma`` instructions as Target IR (PTX ISA sec. 9.7.14.4; the ops and the fragment
layout the interpreter chooses are in :mod:`tessera.ir.dialects.target.wmma`):
``m16n16k16`` with f16 or bf16 A and B and f32 accumulators, in global, shared or
generic memory."""

from __future__ import annotations

from tessera.ir.dialects.target import wmma as wmma_ops
from tessera.ir.text.ptx.arith import handler
from tessera.ir.text.ptx.context import InstrBuilder

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


__all__: list[str] = []
