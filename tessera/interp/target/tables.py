"""Module-scope arrays in the Target IR interpreter
(:mod:`tessera.ir.dialects.target.tables`).

``ptx.ld_table``: entry ``index`` of a read-only module table for the active threads;
an index past the table's end faults as the out-of-bounds global read it would be.

``ptx.module_var``: each launch places the kernel's module variables, zeroed, in global
memory after the arguments (:func:`place_module_vars`), as loading the module does
once on a GPU; since a GPU keeps them from one launch to the next, a variable marked
``restored`` that the kernel leaves nonzero is a fault at the launch's end
(:func:`check_module_vars`): the next launch would start from it."""

from __future__ import annotations

import numpy as np

from tessera.interp.target.state import (
    DTYPES,
    Machine,
    Step,
    TargetCompiler,
    TargetFrame,
    step_rule,
)
from tessera.ir.core import Function, Instr, walk
from tessera.ir.dialects.target import REG_TYPES
from tessera.ir.dialects.target.tables import ModuleVar, TableLoad, table


@step_rule(TableLoad)
def _ld_table(c: TargetCompiler, instr: Instr) -> Step:
    tab = table(instr.op.table)
    dt = DTYPES[tab.elem]
    bits = REG_TYPES[tab.elem][0]
    values = np.array(tab.bits, np.dtype(f"u{bits // 8}")).view(dt)
    index, out = c.slot(instr.operands[0]), c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)
        idx = fr.regs[index].astype(np.int64)
        result = np.zeros(fr.mask.shape, dt)
        if len(act):
            bad = idx[act] >= tab.size
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                fr.m.failer(instr, act)(k, "out of bounds",
                                        f"entry {int(idx[act[k]])} of the {tab.size}-entry "
                                        f"table {instr.op.table}")
            result[act] = values[idx[act]]
        fr.regs[out] = result
    return step


def place_module_vars(m: Machine, fn: Function) -> None:
    """Global memory for each module variable of ``fn`` (one per symbol): zeros, or
    the variable's initial words."""
    m.module_vars = {}
    for instr in walk(fn.body):
        op = instr.op
        if isinstance(op, ModuleVar) and op.sym not in m.module_vars:
            array = np.zeros(op.size, np.uint8)
            array[:4 * len(op.words)] = np.array(op.words, "<u4").view(np.uint8)
            m.module_vars[op.sym] = (m.glob.add(array, op.sym), array, instr)


def check_module_vars(m: Machine) -> None:
    """Fault when a ``restored`` module variable is not all zero after the launch."""
    for sym, (_, array, instr) in m.module_vars.items():
        if instr.op.restored and array.any():
            at = int(np.flatnonzero(array)[0])
            raise m.fault(instr, "module variable", f"the kernel leaves byte {at} of {sym} "
                          "nonzero: the next launch would start from it",
                          hint="restore the variable to zero before the kernel exits")


@step_rule(ModuleVar)
def _module_var(c: TargetCompiler, instr: Instr) -> Step:
    sym, out = instr.op.sym, c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        fr.regs[out] = np.full(fr.mask.shape, fr.m.module_vars[sym][0], np.uint64)
    return step


__all__ = ["check_module_vars", "place_module_vars"]
