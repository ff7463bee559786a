"""Module-scope ``.global`` arrays of a PTX module: read-only lookup tables
(``ptx.ld_table``) and zero-initialised variables (``ptx.module_var``).

A table is a module-scope ``.global`` array with an initializer, named here once for
every kernel that reads it (:data:`TABLES`); the renderer declares the tables a kernel
uses before its ``.entry``. Threads of a warp index a table with unrelated indices
(``exp``'s 2^(j/128) per element), so the load is ``ld.global.nc`` (the read-only
data cache serves distinct addresses of a warp in one pass, while ``ld.const``
serialises them: CUDA C++ Programming Guide, "Constant Memory").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import RegType, reg_of
from tessera.numerics.transcendental import exp_table


@dataclass(frozen=True)
class Table:
    """A table's PTX element type and its entries as bit patterns of that width."""

    elem: str
    bits: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.bits)


#: every table by its PTX symbol
TABLES: dict[str, Table] = {
    "tessera_exp2_7": Table("f64", exp_table.table_bits()),
}


def table(name: str) -> Table:
    """The table named ``name``, or an IRVerifyError."""
    if name not in TABLES:
        raise IRVerifyError(f"unknown lookup table {name!r}",
                            hint=f"use one of {', '.join(sorted(TABLES))}")
    return TABLES[name]


@register_op
@dataclass(frozen=True)
class TableLoad(Op):
    """``ld.global.nc.<type> d, [table + index * size]``: entry ``index`` (``u32``)
    of the read-only module table ``table``; an index past its end is a fault."""

    name: ClassVar[str] = "ptx.ld_table"
    table: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u32")
        return (RegType(table(self.table).elem),)


@register_op
@dataclass(frozen=True)
class ModuleVar(Op):
    """``mov.u64 d, <sym>``: the address of the module-scope ``.global .b8 <sym>[size]``,
    zero when the module is loaded, or holding ``words`` (``u32`` values, the rest
    zero) from an initializer. A kernel that keeps state there across CTAs (the
    ordered updates of :mod:`tessera.lower.rules.ordered.scalar`) leaves it as it found it, so
    the next launch starts from zeros again; ``restored`` marks a variable the kernel
    must leave all zero, which the Target IR interpreter checks."""

    name: ClassVar[str] = "ptx.module_var"
    sym: str
    size: int
    align: int = 8
    restored: bool = False
    words: tuple[int, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.size <= 0 or self.size % self.align:
            raise IRVerifyError(f"module variable {self.sym} of {self.size} bytes is not a "
                                f"positive multiple of its alignment {self.align}")
        if self.words and (self.align % 4 or 4 * len(self.words) > self.size or
                           self.restored or any(not 0 <= w < 1 << 32 for w in self.words)):
            raise IRVerifyError(f"module variable {self.sym}: initial words are u32 values "
                                "of a variable aligned to 4 that holds them, not restored")
        return (RegType("u64"),)


__all__ = ["TABLES", "ModuleVar", "Table", "TableLoad", "table"]
