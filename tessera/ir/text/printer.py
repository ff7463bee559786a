"""The IR printer: every level's text in the generic form (see :mod:`tessera.ir.text`)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import numpy as np

from tessera.errors import IRParseError
from tessera.ir.core import Block, Function, Instr, IRRegion, Module, Op, Type, Value
from tessera.ir.types import Dense, element_text
from tessera.numerics import DType, Policy, PolicyClass


def attr_text(value: Any) -> str:
    """The text form of one attribute value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(value, complex):
        return f"c({attr_text(value.real)}, {attr_text(value.imag)})"
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    if isinstance(value, Dense):
        arr = value.array
        flat = arr.reshape(-1)
        if flat.size > 1 and flat.tobytes() == flat[:1].tobytes() * flat.size:
            # one value repeated (a gradient's 1/n, a mask of ones): say it once
            return f"dense<splat {attr_text(flat[0].item())}, {attr_text(list(arr.shape))}>"
        return f"dense<{attr_text(arr.tolist())}>"
    if isinstance(value, (DType, Policy, PolicyClass)):
        return "#" + element_text(value)
    if isinstance(value, Type):
        return "!" + str(value)
    raise IRParseError(f"attribute value {value!r} has no text form")


class Printer:
    """Names values (arguments by their hints, results by number) and prints text."""

    def __init__(self, locs: bool = False) -> None:
        self.locs = locs
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.counter = 0
        self.lines: list[str] = []

    def name(self, value: Value) -> str:
        if value not in self.names:
            raise IRParseError(f"value {value!r} is used before it is defined")
        return self.names[value]

    def define(self, value: Value, hint: str = "") -> str:
        base = re.sub(r"[^\w]", "_", hint) if hint else ""
        if base and not base[0].isdigit() and base not in self.taken:
            name = base
        else:
            while str(self.counter) in self.taken:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.taken.add(name)
        self.names[value] = "%" + name
        return "%" + name

    def block_args(self, block: Block) -> str:
        return ", ".join(f"{self.define(a, a.hint)}: {a.type}" for a in block.args)

    def emit(self, instr: Instr, indent: str) -> None:
        """Print one instruction (and its regions) at ``indent``."""
        operands = ", ".join(self.name(v) for v in instr.operands)
        results = ", ".join(self.define(r) for r in instr.results)
        attrs = op_attr_text(instr.op)
        head = f"{indent}{results + ' = ' if results else ''}{instr.op.name}({operands})"
        head += f" {attrs}" if attrs else ""
        if instr.regions:
            self.lines.append(head + " (")
            for k, region in enumerate(instr.regions):
                if k:
                    self.lines.append(indent + "  ,")
                self.region(region, indent + "  ")
            head = indent + ")"
        sig = f" : ({', '.join(str(v.type) for v in instr.operands)}) -> "
        sig += str(instr.results[0].type) if len(instr.results) == 1 else \
            "(" + ", ".join(str(r.type) for r in instr.results) + ")"
        loc = f" loc({json.dumps(instr.loc.file)}:{instr.loc.line})" if self.locs else ""
        self.lines.append(head + sig + loc)

    def region(self, region: IRRegion, indent: str) -> None:
        for block in region.blocks:
            self.lines.append(f"{indent}^bb({self.block_args(block)}) {{")
            self.block(block, indent + "  ")
            self.lines.append(indent + "}")

    def block(self, block: Block, indent: str) -> None:
        for instr in block.instrs:
            self.emit(instr, indent)

    def function(self, fn: Function, indent: str = "") -> None:
        args = self.block_args(fn.body)
        results = ", ".join(str(t) for t in fn.result_types)
        head = f"{indent}{fn.kind} @{fn.name}({args}) -> ({results})"
        if fn.attrs:
            head += " attributes {" + ", ".join(
                f"{k} = {attr_text(v)}" for k, v in sorted(fn.attrs.items())) + "}"
        self.lines.append(head + " {")
        self.block(fn.body, indent + "  ")
        self.lines.append(indent + "}")


def op_attr_text(op: Op) -> str:
    """``{name = value, ...}`` for the attributes that differ from their defaults."""
    shown = []
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        if f.default is not dataclasses.MISSING and _same(value, f.default):
            continue
        shown.append(f"{f.name} = {attr_text(value)}")
    return "{" + ", ".join(shown) + "}" if shown else ""


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def print_function(fn: Function, *, locs: bool = False) -> str:
    """The text of one function."""
    printer = Printer(locs)
    printer.function(fn)
    return "\n".join(printer.lines) + "\n"


def print_module(module: Module, *, locs: bool = False) -> str:
    """The text of a module: its functions inside ``module @name { ... }``."""
    printer = Printer(locs)
    printer.lines.append(f"module @{module.name} {{")
    for fn in module.functions.values():
        printer.names.clear()
        printer.taken.clear()
        printer.counter = 0
        printer.function(fn, "  ")
    printer.lines.append("}")
    return "\n".join(printer.lines) + "\n"
