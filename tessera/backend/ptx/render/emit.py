"""The machinery of the PTX rule table: the table itself, the :class:`PtxWriter` a rule
writes through, and how PTX spells types and immediates (PTX ISA 8.x, sec. 4.5, 5.2).

A rule writes the PTX lines of one instruction through a :class:`PtxWriter`, which owns
the registers, the labels, the kernel-scope shared buffers and the PTX version the
kernel needs. The rules live in :mod:`tessera.backend.ptx.render.ops` (core instructions),
:mod:`tessera.backend.ptx.render.async_ops` (asynchronous and matrix instructions) and
:mod:`tessera.backend.ptx.render.kernel` (control flow).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from tessera.backend.ptx.render.regalloc import Registers, RenderError
from tessera.errors import UNKNOWN_LOC, Loc
from tessera.ir.core import Block, Instr, Op, rule_decorator
from tessera.ir.dialects.target import RegType, Return

#: a format function: writes the PTX lines of one instruction through the writer
Rule = Callable[["PtxWriter", Instr], None]
#: op class -> format function; filled by render_ops, render_async and render
RULES: dict[type[Op], Rule] = {}
#: the ``.extern .shared`` array of a kernel whose buffers are dynamic shared memory
DYNAMIC_SHARED = "smem"


rule = rule_decorator(RULES, "format rule")


class PtxWriter:
    """The state of rendering one kernel: lines with their source locations, registers,
    labels, shared buffers and the minimum PTX version of what was written."""

    def __init__(self, regs: Registers, target: str, version: tuple[int, int]) -> None:
        self.regs = regs
        self.target = target
        self.version = version
        self.lines: list[tuple[str, Loc | None]] = []
        self.shared: dict[str, tuple[int, int]] = {}
        self.tables: set[str] = set()  # module lookup tables read (declared at module scope)
        #: module variables used: symbol -> (size, alignment, initial u32 words),
        #: declared at module scope
        self.module_vars: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        #: module-scope declarations of the functions the kernel calls (vprintf)
        self.externs: set[str] = set()
        #: symbol -> offset in the dynamic shared array, when the buffers are dynamic
        self.dynamic_offsets: dict[str, int] | None = None
        self.loc: Loc | None = None
        self._labels = 0
        # the last instruction loc met, and the loc its lines get (None for unknown)
        self._known: tuple[Loc, Loc | None] = (UNKNOWN_LOC, None)

    def out(self, text: str) -> None:
        """Write one instruction line (indented) for the current instruction."""
        self.lines.append(("\t" + text, self.loc))

    def label(self, name: str) -> None:
        """Write a label line."""
        self.lines.append((name + ":", self.loc))

    def new_label(self, stem: str) -> str:
        """A label unique within the kernel (``$L__<stem>_<n>``)."""
        self._labels += 1
        return f"$L__{stem}_{self._labels}"

    def require(self, version: tuple[int, int]) -> None:
        """Record that the kernel needs at least this PTX ISA version."""
        self.version = max(self.version, version)

    def sm90(self, instr: Instr) -> None:
        """Refuse an sm_90a instruction on an older target."""
        self.at_least(instr, 90)

    def at_least(self, instr: Instr, arch: int) -> None:
        """Refuse an instruction of ``sm_<arch>`` and later (90: sm_90a) on an older
        target."""
        if int(self.target[3:5]) < arch:
            want = "sm_90a" if arch >= 90 else f"sm_{arch}"
            raise RenderError(f"{instr.op.name} needs target {want}"
                              f"{'' if arch >= 90 else ' or later'}, the kernel targets "
                              f"{self.target}", hint=f'set attrs["target"] = "{want}"',
                              loc=instr.loc)

    def ordered(self, instr: Instr, head: str) -> str:
        """``head`` with the memory order of ``instr`` (``ld.volatile``,
        ``atom.acquire.gpu``), checked against the target and version it needs."""
        order = getattr(instr.op, "order", "")
        if not order:
            return head
        if order.endswith("cluster"):
            self.sm90(instr)
        self.require((8, 2) if order.startswith("mmio") else (6, 0))
        return f"{head}.{order}"

    def block(self, block: Block) -> None:
        """Render every instruction of ``block`` except its terminator."""
        term = block.terminator
        for instr in block.instrs:
            if instr is not term or isinstance(instr.op, Return):
                self.instr(instr)

    def instr(self, instr: Instr) -> None:
        """Render one instruction with its rule."""
        fn = RULES.get(type(instr.op))
        if fn is None:
            raise RenderError(f"no PTX rule for op {instr.op.name}",
                              hint="only Target IR (ptx.*) ops can be rendered; lower the "
                                   "kernel to Target IR first", loc=instr.loc)
        loc = instr.loc
        if loc is not self._known[0]:  # the instructions of one rule share their loc
            self._known = (loc, None if loc == UNKNOWN_LOC else loc)
        saved, self.loc = self.loc, self._known[1]
        fn(self, instr)
        self.loc = saved

    def move(self, dsts: Sequence[str], srcs: Sequence[str], elem: str) -> None:
        """Copy ``srcs`` into ``dsts`` as one parallel assignment (a source may be
        another pair's destination, as in a swap of loop-carried values)."""
        pairs = [(d, s) for d, s in zip(dsts, srcs) if d != s]
        targets = {d for d, _ in pairs}
        staged = []
        for d, s in pairs:
            if s in targets:
                (tmp,) = self.regs.fresh(elem)
                self.out(f"mov.{mov_type(elem)} {tmp}, {s};")
                s = tmp
            staged.append((d, s))
        for d, s in staged:
            self.out(f"mov.{mov_type(elem)} {d}, {s};")


# ------------------------------------------------------------------------ type spelling
def mov_type(elem: str) -> str:
    """The type suffix of a plain register copy (``mov``, ``selp``) of ``reg<elem>``."""
    return elem if elem in ("pred", "f32", "f64") else f"b{RegType(elem).bits}"


def mem_type(elem: str) -> str:
    """The type suffix of ``ld``/``st`` (16-bit and packed floats move as bits)."""
    if elem in ("f16", "bf16", "f16x2", "bf16x2") or elem == "pred":
        if elem == "pred":
            raise RenderError("predicates cannot be loaded or stored",
                              hint="convert to u32 with ptx.selp first")
        return f"b{RegType(elem).bits}"
    return elem


def arith_type(elem: str) -> str:
    """The type suffix of arithmetic: untyped ``bN`` registers compute as ``uN``
    (``bf16`` and ``bf16x2`` are float types and keep their names)."""
    return "u" + elem[1:] if elem[0] == "b" and elem[1:].isdigit() else elem


def immediate(value: Any, elem: str) -> str:
    """``value`` as a PTX immediate of ``reg<elem>``: floats in exact hex
    (``0f3F800000``, ``0d3FF0000000000000``), 16-bit floats as their bits."""
    t = RegType(elem)
    if elem == "pred":
        return "1" if value else "0"
    if elem == "f32":
        return f"0f{int(np.float32(value).view(np.uint32)):08X}"
    if elem == "f64":
        return f"0d{int(np.float64(value).view(np.uint64)):016X}"
    if elem in ("f16", "bf16"):
        dtype = np.float16 if elem == "f16" else ml_dtypes.bfloat16
        return f"0x{int(np.array(value, dtype).view(np.uint16)):04X}"
    if elem in ("f16x2", "bf16x2"):
        if isinstance(value, (tuple, list)):  # (low, high) halves
            lo, hi = (int(immediate(v, elem[:-2]), 16) for v in value)
            return f"0x{lo | hi << 16:08X}"
        return f"0x{int(value) & 0xFFFFFFFF:08X}"
    if t.kind == "b":
        return f"0x{int(value) & ((1 << t.bits) - 1):X}"
    if t.kind == "u":
        return str(int(value) & ((1 << t.bits) - 1))
    return str(int(value))


def address(e: PtxWriter, instr: Instr, offset: int = 0) -> str:
    """``[%reg]`` or ``[%reg+offset]`` of the instruction's first operand."""
    reg = e.regs.one(instr.operands[0])
    return f"[{reg}+{offset}]" if offset else f"[{reg}]"


__all__ = ["DYNAMIC_SHARED", "RULES", "PtxWriter", "Rule", "address", "arith_type",
           "immediate", "mem_type", "mov_type", "rule"]
