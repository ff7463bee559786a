"""``ptx.ld_table`` in the Target IR interpreter: entry ``index`` of a read-only module
table (:mod:`tessera.ir.dialects.target.tables`) for the active threads; an index past
the table's end faults as the out-of-bounds global read it would be."""

from __future__ import annotations

import numpy as np

from tessera.interp.target.state import DTYPES, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import REG_TYPES
from tessera.ir.dialects.target.tables import TableLoad, table


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


__all__: list[str] = []
