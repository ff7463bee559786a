"""PTX rule of ``ptx.ld_table`` (:mod:`tessera.ir.dialects.target.tables`): the table's
address (``mov.u64`` of the module symbol), plus the index times the entry size, then
``ld.global.nc``. The renderer declares each table the kernel reads once, before the
``.entry`` (:func:`declarations`)."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, mem_type, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.tables import TableLoad, table


@rule(TableLoad)
def _ld_table(e: PtxWriter, instr: Instr) -> None:
    name = instr.op.table
    tab = table(name)
    e.tables.add(name)
    base, offset = e.regs.fresh("u64", 2)
    size = RegType(tab.elem).bits // 8
    e.out(f"mov.u64 {base}, {name};")
    e.out(f"mul.wide.u32 {offset}, {e.regs.one(instr.operands[0])}, {size};")
    e.out(f"add.u64 {base}, {base}, {offset};")
    e.out(f"ld.global.nc.{mem_type(tab.elem)} {e.regs.one(instr.result)}, [{base}];")


def declarations(names: set[str]) -> list[str]:
    """The module-scope ``.global`` declarations of the tables ``names``, in name order."""
    lines = []
    for name in sorted(names):
        tab = table(name)
        bits = RegType(tab.elem).bits
        init = ", ".join(f"0x{b:0{bits // 4}X}" for b in tab.bits)
        lines.append(f".global .align {bits // 8} .b{bits} {name}[{tab.size}] = {{{init}}};")
    return lines


__all__ = ["declarations"]
