"""PTX rules of ``ptx.ld_table`` and ``ptx.module_var``
(:mod:`tessera.ir.dialects.target.tables`): a table's address (``mov.u64`` of the module
symbol), plus the index times the entry size, then ``ld.global.nc``; a variable's
address. The renderer declares each table and variable the kernel uses once, before the
``.entry`` (:func:`declarations`); a ``.global`` variable without an initializer is
zero when the module is loaded (PTX ISA sec. 5.4.4), so no launch argument carries it."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, mem_type, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.tables import ModuleVar, TableLoad, table


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


@rule(ModuleVar)
def _module_var(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    e.module_vars[op.sym] = (op.size, op.align, op.words)
    e.out(f"mov.u64 {e.regs.one(instr.result)}, {op.sym};")


def declarations(names: set[str],
                 variables: dict[str, tuple[int, int, tuple[int, ...]]] | None = None,
                 ) -> list[str]:
    """The module-scope ``.global`` declarations of the tables ``names`` and the
    ``variables`` (symbol -> size, alignment, initial ``u32`` words), in name order."""
    lines = []
    for sym, (size, align, words) in sorted((variables or {}).items()):
        if words:  # the words, then zeros (PTX ISA sec. 5.4.4: the rest is zero)
            init = ", ".join(str(w) for w in words)
            lines.append(f".global .align {align} .u32 {sym}[{size // 4}] = {{{init}}};")
        else:
            lines.append(f".global .align {align} .b8 {sym}[{size}];")
    for name in sorted(names):
        tab = table(name)
        bits = RegType(tab.elem).bits
        init = ", ".join(f"0x{b:0{bits // 4}X}" for b in tab.bits)
        lines.append(f".global .align {bits // 8} .b{bits} {name}[{tab.size}] = {{{init}}};")
    return lines


__all__ = ["declarations"]
