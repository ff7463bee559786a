"""One printer and one parser for every IR level.

The generic form of an instruction is::

    %3, %4 = dialect.op(%1, %2) {attr = value} ({ regions }) : (operand types) -> result types

Attributes equal to the op's defaults are not printed. ``print → parse → print`` is the
identity (tested), so every level can be dumped after any pass, edited, and read back.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import IRParseError, Loc
from tessera.ir.core import OPS, Block, Function, Instr, IRRegion, Module, Op, Type, Value
from tessera.ir.types import (
    Dense,
    Element,
    TensorType,
    element_text,
    parse_element,
    parse_tensor_type,
)
from tessera.numerics import DType, Policy, PolicyClass

#: type keyword -> parser of the text between the angle brackets; dialects add theirs
TYPE_PARSERS: dict[str, Callable[[str], Type]] = {"tensor": parse_tensor_type}


# ----------------------------------------------------------------------------- printing
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
        return f"dense<{attr_text(value.array.tolist())}>"
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


# ------------------------------------------------------------------------------ parsing
_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<value>%[\w$.]+)
  | (?P<symbol>@[\w$.]+)
  | (?P<element>\#[\w.]+(?:@\w+(?:\([^)]*\))?)*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<arrow>->)
  | (?P<number>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)|-?inf\b|nan\b)
  | (?P<word>\^?[A-Za-z_][\w.]*)
  | (?P<punct>[(){}\[\],:=<>!])
""", re.VERBOSE)


class Parser:
    """Recursive-descent parser of the generic text form."""

    def __init__(self, text: str, file: str = "<ir>") -> None:
        self.text = text
        self.file = file
        self.pos = 0
        self.scopes: list[dict[str, Value]] = []

    # -- lexing
    def _line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def error(self, message: str) -> IRParseError:
        return IRParseError(message, loc=Loc(self.file, self._line()),
                            hint="compare with the output of the IR printer")

    def _skip(self) -> None:
        while True:
            m = _TOKEN.match(self.text, self.pos)
            if m is None or m.lastgroup != "ws":
                return
            self.pos = m.end()

    def peek(self) -> tuple[str, str]:
        self._skip()
        if self.pos >= len(self.text):
            return "eof", ""
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            raise self.error(f"unexpected character {self.text[self.pos]!r}")
        return m.lastgroup or "", m.group()

    def next(self) -> tuple[str, str]:
        kind, tok = self.peek()
        self.pos += len(tok)
        return kind, tok

    def expect(self, tok: str) -> None:
        _, got = self.next()
        if got != tok:
            raise self.error(f"expected {tok!r}, found {got or 'end of text'!r}")

    def accept(self, tok: str) -> bool:
        if self.peek()[1] == tok:
            self.next()
            return True
        return False

    # -- types and attributes
    def type(self) -> Type:
        kind, word = self.next()
        if word == "!":
            kind, word = self.next()
        if kind != "word" or word not in TYPE_PARSERS:
            raise self.error(f"expected a type, found {word!r}")
        self._skip()
        if self.text[self.pos] != "<":
            raise self.error("expected '<' after the type keyword")
        depth, start = 0, self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            depth += ch == "<"
            depth -= ch == ">"
            self.pos += 1
            if depth == 0:
                break
        try:
            return TYPE_PARSERS[word](self.text[start + 1:self.pos - 1])
        except IRParseError as err:
            raise self.error(err.message) from None

    def attr(self) -> Any:
        kind, tok = self.peek()
        if kind == "number":
            self.next()
            return float(tok) if any(c in tok for c in ".eEn") else int(tok)
        if kind == "string":
            self.next()
            return json.loads(tok)
        if kind == "element":
            self.next()
            return parse_element(tok[1:])
        if tok == "[":
            self.next()
            items: list[Any] = []
            while not self.accept("]"):
                items.append(self.attr())
                self.accept(",")
            return tuple(items)
        if tok == "!":
            return self.type()
        if tok in ("true", "false", "none"):
            self.next()
            return {"true": True, "false": False, "none": None}[tok]
        if tok == "c":
            self.next()
            self.expect("(")
            re_, _, im = self.attr(), self.expect(","), self.attr()
            self.expect(")")
            return complex(re_, im)
        if tok == "dense":
            self.next()
            self.expect("<")
            data = self.attr()
            self.expect(">")
            return Dense(np.array(data))
        raise self.error(f"expected an attribute value, found {tok!r}")

    def attr_dict(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if self.accept("{"):
            while not self.accept("}"):
                _, key = self.next()
                self.expect("=")
                attrs[key] = self.attr()
                self.accept(",")
        return attrs

    # -- values
    def use(self) -> Value:
        kind, tok = self.next()
        if kind != "value":
            raise self.error(f"expected a value, found {tok!r}")
        for scope in reversed(self.scopes):
            if tok in scope:
                return scope[tok]
        raise self.error(f"value {tok} is used before it is defined")

    def define(self, name: str, value: Value) -> None:
        if any(name in scope for scope in self.scopes):
            raise self.error(f"value {name} is defined twice")
        self.scopes[-1][name] = value

    def block_args(self, block: Block) -> None:
        self.expect("(")
        while not self.accept(")"):
            _, name = self.next()
            self.expect(":")
            value = block.add_arg(self.type(), name[1:] if not name[1:].isdigit() else "")
            self.define(name, value)
            self.accept(",")

    # -- structure
    def instr(self, block: Block) -> None:
        names: list[str] = []
        while self.peek()[0] == "value":
            names.append(self.next()[1])
            if not self.accept(","):
                self.expect("=")
                break
        line = self._line()
        _, opname = self.next()
        if opname not in OPS:
            raise self.error(f"unknown op {opname!r}")
        self.expect("(")
        operands = []
        while not self.accept(")"):
            operands.append(self.use())
            self.accept(",")
        attrs = self.attr_dict()
        regions: list[IRRegion] = []
        if self.accept("("):
            while not self.accept(")"):
                regions.append(self.region())
                self.accept(",")
        self.expect(":")
        self.expect("(")
        otypes = []
        while not self.accept(")"):
            otypes.append(self.type())
            self.accept(",")
        self._check_signature(opname, operands, otypes)
        self.expect("->")
        if self.accept("("):
            rtypes = []
            while not self.accept(")"):
                rtypes.append(self.type())
                self.accept(",")
        else:
            rtypes = [self.type()]
        loc = Loc(self.file, line)
        if self.accept("loc"):
            self.expect("(")
            file = json.loads(self.next()[1])
            self.expect(":")
            loc = Loc(file, int(self.next()[1]))
            self.expect(")")
        try:
            op = OPS[opname].from_attrs(attrs) if hasattr(OPS[opname], "from_attrs") \
                else OPS[opname](**attrs)
        except TypeError as err:
            raise self.error(f"bad attributes for {opname}: {err}") from None
        if len(names) != len(rtypes):
            raise self.error(f"{opname} names {len(names)} results but has {len(rtypes)} types")
        instr = Instr(op, operands, [], regions, loc)
        instr.results = [Value(t, instr) for t in rtypes]
        for name, value in zip(names, instr.results):
            self.define(name, value)
        block.append(instr)

    def _check_signature(self, opname: str, operands: list[Value], types: list[Type]) -> None:
        """The signature's operand types are a claim about the operands: check it, so a
        mistyped line is an error here and not silently rewritten on reprint."""
        if len(types) != len(operands):
            raise self.error(f"{opname} has {len(operands)} operands but its signature "
                             f"lists {len(types)} types")
        for k, (v, t) in enumerate(zip(operands, types)):
            have = v.type
            if isinstance(t, TensorType) and t.sharding is None \
                    and isinstance(have, TensorType):
                # a signature without a placement is the text before shard propagation
                have = dataclasses.replace(have, sharding=None)
            if have != t:
                raise self.error(f"operand {k} of {opname} has type {v.type}, but the "
                                 f"signature says {t}")

    def region(self) -> IRRegion:
        self.expect("^bb")
        self.scopes.append({})
        block = Block()
        self.block_args(block)
        self.expect("{")
        while not self.accept("}"):
            self.instr(block)
        self.scopes.pop()
        return IRRegion([block])

    def function(self) -> Function:
        loc = Loc(self.file, self._line())
        _, kind = self.next()
        _, sym = self.next()
        self.scopes.append({})
        body = Block()
        self.block_args(body)
        self.expect("->")
        self.expect("(")
        results = []
        while not self.accept(")"):
            results.append(self.type())
            self.accept(",")
        attrs = {}
        if self.accept("attributes"):
            attrs = self.attr_dict()
        self.expect("{")
        while not self.accept("}"):
            self.instr(body)
        self.scopes.pop()
        return Function(sym[1:], body, results, kind, attrs, loc)

    def module(self) -> Module:
        if self.peek()[1] != "module":
            module = Module("main")
            while self.peek()[0] != "eof":
                module.add(self.function())
            return module
        self.next()
        _, sym = self.next()
        module = Module(sym[1:])
        self.expect("{")
        while not self.accept("}"):
            module.add(self.function())
        return module


def parse_module(text: str, file: str = "<ir>") -> Module:
    """Parse module text (or bare functions, which land in a module named ``main``)."""
    return Parser(text, file).module()


def parse_function(text: str, file: str = "<ir>") -> Function:
    """Parse the text of one function."""
    return Parser(text, file).function()


__all__ = ["TYPE_PARSERS", "Element", "attr_text", "parse_function", "parse_module",
           "print_function", "print_module"]
