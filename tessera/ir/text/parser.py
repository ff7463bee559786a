"""The IR parser: recursive descent over the generic text form (see :mod:`tessera.ir.text`)."""

from __future__ import annotations

import dataclasses
import json

from tessera.errors import Loc
from tessera.ir.core import OPS, Block, Function, Instr, IRRegion, Module, Type, Value
from tessera.ir.text.lexer import Lexer
from tessera.ir.types import TensorType


class Parser(Lexer):
    """Recursive-descent parser of the generic text form."""

    def __init__(self, text: str, file: str = "<ir>") -> None:
        super().__init__(text, file)
        self.scopes: list[dict[str, Value]] = []

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
