"""Values read from shared memory that was never written, followed until they matter.

A GPU loads whatever bytes an unwritten shared address holds; the load itself is not
an error, and code that reads past a range and then discards what it read (a merge's
look at the element after its last, as CUB's ``SerialMerge`` does) is correct. What
is wrong is a result that depends on such bytes. So a plain ``ld`` of unwritten shared
bytes marks its destination registers as *uninitialised* in the threads that read them,
register instructions pass the mark on, and the fault comes where the value would
change what the kernel does: a branch or guard, an address, a store, an atomic, a
warp-wide exchange. It is reported at the read, with the instruction the value reached.

Like Valgrind's Memcheck (Seward and Nethercote, "Using Valgrind to detect undefined
value errors with bit-precision", USENIX 2005), the marks are exact where a defined
operand decides the result: ``selp`` passes on only the mark of the operand it selects,
and an ``and`` of predicates is defined where either side is a defined false (``or``: a
defined true). Every other instruction marks its results where any operand is marked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.target.state import TargetFault
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.cfg import Guard, PtxInstr

#: opcodes whose Target IR is pure but whose lanes exchange operands
_CROSS_LANE = ("mma", "wgmma", "wmma")


class Poison:
    """Per register, the origin of each thread's uninitialised value (0: defined)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.regs: dict[str, np.ndarray] = {}
        #: origin ids - 1 -> (the reading instruction, the shared address it read)
        self.origins: list[tuple[PtxInstr, str]] = []
        self.fresh: np.ndarray | None = None  # threads the running instruction marked

    @property
    def active(self) -> bool:
        """Whether any register holds an uninitialised value."""
        return bool(self.regs)

    def note_read(self, pi: PtxInstr, who: np.ndarray, where: str) -> None:
        """Threads ``who`` (global ids) read unwritten shared bytes (``where``) in ``pi``."""
        self.origins.append((pi, where))
        if self.fresh is None:
            self.fresh = np.zeros(self.n, np.int32)
        self.fresh[who] = len(self.origins)

    def check_guard(self, m: Any, guard: Guard | None, mask: np.ndarray, use: str) -> None:
        """Fault where ``guard`` (deciding ``use``) is uninitialised in threads ``mask``."""
        if guard is not None and guard[0] in self.regs:
            self._fault_if(m, self.regs[guard[0]], mask, use)

    def check_uses(self, m: Any, pi: PtxInstr, sink: bool, mask: np.ndarray) -> None:
        """Fault where instruction ``pi``, one that reaches past its registers
        (``sink``), reads an uninitialised register in the threads ``mask``."""
        if sink:
            for _, names in pi.reads:
                for name in names:
                    if name in self.regs:
                        self._fault_if(m, self.regs[name], mask, f"{pi.text} (PTX line "
                                       f"{pi.loc.line})")

    def propagate(self, pi: PtxInstr, rule: tuple[Any, ...] | None,
                  phys: dict[str, np.ndarray], mask: np.ndarray) -> None:
        """Mark (or clear) the registers ``pi`` writes in the threads ``mask``; called
        after its steps ran, before its results are written (``phys`` still holds the
        operands)."""
        fresh, self.fresh = self.fresh, None
        if not self.regs and fresh is None:
            return
        marks = self._derived(pi, rule, phys)
        if fresh is not None:
            marks = np.where(fresh > 0, fresh, marks)
        for _, names in pi.writes:
            for name in names:
                old = self.regs.get(name)
                new = np.where(mask, marks, 0 if old is None else old)
                if new.any():
                    self.regs[name] = new
                else:
                    self.regs.pop(name, None)

    def _mark(self, names: tuple[str, ...] | None) -> np.ndarray:
        out = np.zeros(self.n, np.int32)
        for name in names or ():
            if name in self.regs:
                out = np.maximum(out, self.regs[name])
        return out

    def _derived(self, pi: PtxInstr, rule: tuple[Any, ...] | None,
                 phys: dict[str, np.ndarray]) -> np.ndarray:
        if rule is None:
            return self._mark(tuple(n for _, names in pi.reads for n in names))
        kind, names = rule
        if kind == "selp":  # (on true, on false, pred)
            a, b, pred = names
            p = phys[pred[0]].astype(bool)
            return np.maximum(self._mark(pred), np.where(p, self._mark(a), self._mark(b)))
        x, y = names  # and / or of predicates
        settles = kind == "or"  # the value that decides the result alone
        mx, my = self._mark(x), self._mark(y)
        vx = phys[x[0]].astype(bool) if x else None
        vy = phys[y[0]].astype(bool) if y else None
        x_decides = (mx == 0) & (vx == settles) if vx is not None else np.zeros(self.n, bool)
        y_decides = (my == 0) & (vy == settles) if vy is not None else np.zeros(self.n, bool)
        return np.where(x_decides | y_decides, 0, np.maximum(mx, my))

    def _fault_if(self, m: Any, marks: np.ndarray, mask: np.ndarray, use: str) -> None:
        hit = np.flatnonzero(mask & (marks > 0))
        if not len(hit):
            return
        who = int(hit[0])
        pi, where = self.origins[int(marks[who]) - 1]
        c = int(m.cta[who])
        raise TargetFault("uninitialised shared read", f"{where} was never written; the "
                          f"value read reaches {use}", kernel=m.fn.name, op=pi.text,
                          loc=pi.loc, thread=int(m.tid[who]),
                          cta=tuple(int(v) for v in m.cta_xyz(c)),
                          hint="write the shared buffer (or copy into it and wait) first")


def classify(pi: PtxInstr) -> tuple[bool, bool, tuple[Any, ...] | None]:
    """(whether ``pi`` is a plain load that may read unwritten shared bytes, whether it
    reaches past its registers, its exact marking rule or None)."""
    head = pi.text.split(None, 1)[0] if pi.text else ""
    opcode = head.split(".")[0]
    loads = opcode == "ld" and ".param" not in head
    sink = opcode in _CROSS_LANE or any(not i.op.pure for i in pi.instrs)
    return loads, sink, _rule(pi, opcode, head)


def _rule(pi: PtxInstr, opcode: str, head: str) -> tuple[Any, ...] | None:
    """The exact marking rule of ``selp`` and of ``and``/``or`` of predicates."""
    named = {id(v): names for v, names in pi.reads}
    ops = [i for i in pi.instrs if not isinstance(i.op, target_ops.Const)]
    if len(ops) != 1:
        return None
    (op,) = ops
    args = tuple(named.get(id(v)) for v in op.operands)
    if opcode == "selp" and isinstance(op.op, target_ops.Selp) and args[2] is not None:
        return ("selp", args)
    if opcode in ("and", "or") and head.endswith(".pred") and len(args) == 2:
        return (opcode, args)
    return None


__all__ = ["Poison", "classify"]
