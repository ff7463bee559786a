"""The IR core shared by every level: types, values, ops, instructions, blocks, functions.

An *op* is a small frozen dataclass: the operation's kind (its class) and attributes
(its fields). It is hashable, compares by value and knows how to infer and verify the
types of its results. An *instruction* wires an op into the SSA graph: operands,
results, nested regions and the user's source location. Rule tables (interpretation,
autodiff, PTX rendering) are keyed by op class, as JAX keys rules by primitive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tessera.errors import UNKNOWN_LOC, IRVerifyError, Loc


class Type:
    """Base class of IR types; subclasses are frozen dataclasses that print themselves."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise IRVerifyError(f"type {type(self).__name__} has no text form")


class Value:
    """An SSA value: a block argument or an instruction result."""

    __slots__ = ("hint", "owner", "type")

    def __init__(self, type: Type, owner: Instr | Block | None = None, hint: str = "") -> None:
        self.type = type
        self.owner = owner
        self.hint = hint

    def __repr__(self) -> str:
        return f"<Value {self.hint or id(self):} : {self.type}>"


OPS: dict[str, type[Op]] = {}


def register_op(cls: type[Op]) -> type[Op]:
    """Class decorator: make an op class known to the parser under its ``name``."""
    if cls.name in OPS and OPS[cls.name] is not cls:
        raise IRVerifyError(f"op {cls.name!r} is registered twice")
    OPS[cls.name] = cls
    return cls


def rule_decorator(table: dict[Any, Any], what: str = "rule") -> Callable[..., Any]:
    """A decorator ``@rule(OpA, OpB)`` entering a function into ``table`` under each op
    class: the rule tables (interpretation, autodiff, lowering, rendering) all use it.
    A second, different rule for one op class is an error."""
    def rule(*classes: Any) -> Callable[[Any], Any]:
        def register(fn: Any) -> Any:
            for cls in classes:
                if table.get(cls, fn) is not fn:
                    raise IRVerifyError(f"{getattr(cls, 'name', cls)} has two {what}s")
                table[cls] = fn
            return fn
        return register
    return rule


@dataclass(frozen=True)
class Op:
    """Base of all ops. Subclasses set ``name`` and add attribute fields."""

    name: ClassVar[str] = "core.op"
    #: number of regions the op owns (custom rules, loops, conditionals)
    num_regions: ClassVar[int] = 0
    #: a terminator ends a block (return, yield)
    terminator: ClassVar[bool] = False
    #: pure ops may be removed when unused and merged when identical
    pure: ClassVar[bool] = True

    def attributes(self) -> dict[str, Any]:
        """The op's attributes in field order (the text form prints them all)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        """The result types for these operand types; raises IRVerifyError when invalid."""
        raise IRVerifyError(f"op {self.name} cannot infer its result types")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        """Check operand and result types; by default results must equal ``infer``."""
        expected = self.infer(operands)
        if tuple(results) != tuple(expected):
            shown = ", ".join(map(str, expected))
            raise IRVerifyError(f"{self.name}: results ({', '.join(map(str, results))}) "
                                f"should be ({shown})")

    def verify_regions(self, instr: Instr) -> None:
        """Check the op's regions (their block arguments and terminators)."""


@dataclass(frozen=True)
class Terminator(Op):
    """Base of ops that end a block (return, yield): no results, not removable."""

    terminator: ClassVar[bool] = True
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return ()


def check_count(op: Op, operands: Sequence[Type], n: int) -> None:
    """Raise IRVerifyError unless ``op`` has exactly ``n`` operands."""
    if len(operands) != n:
        raise IRVerifyError(f"{op.name} takes {n} operands, got {len(operands)}")


def region_types(instr: Instr, k: int) -> tuple[list[Type], list[Type]]:
    """Argument types and yielded types of region ``k`` of a structured op (``if``,
    ``for``, ``while`` of any dialect); raises when the region has no terminator."""
    block = instr.regions[k].block
    term = block.terminator
    if term is None:
        raise IRVerifyError(f"{instr.op.name} region {k} has no terminator")
    return [a.type for a in block.args], [v.type for v in term.operands]


@dataclass(eq=False)
class Instr:
    """An op placed in a block: operands, results, regions and source location."""

    op: Op
    operands: list[Value]
    results: list[Value]
    regions: list[IRRegion] = field(default_factory=list)
    loc: Loc = UNKNOWN_LOC
    parent: Block | None = None

    @property
    def result(self) -> Value:
        """The single result of a one-result instruction."""
        if len(self.results) != 1:
            raise IRVerifyError(f"{self.op.name} has {len(self.results)} results, not one",
                                loc=self.loc)
        return self.results[0]


@dataclass(eq=False)
class Block:
    """A straight-line list of instructions with typed arguments."""

    args: list[Value] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)

    def add_arg(self, type: Type, hint: str = "") -> Value:
        value = Value(type, self, hint)
        self.args.append(value)
        return value

    def append(self, instr: Instr) -> Instr:
        instr.parent = self
        self.instrs.append(instr)
        return instr

    @property
    def terminator(self) -> Instr | None:
        return self.instrs[-1] if self.instrs and self.instrs[-1].op.terminator else None


@dataclass(eq=False)
class IRRegion:
    """A list of blocks owned by an instruction (one block is all any level needs so far)."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def block(self) -> Block:
        return self.blocks[0]


@dataclass(eq=False)
class Function:
    """A named function of one dialect (``graph.func``, ``tile.kernel``, ``ptx.kernel``)."""

    name: str
    body: Block
    result_types: list[Type]
    kind: str = "graph.func"
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: Loc = UNKNOWN_LOC

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def __str__(self) -> str:
        from tessera.ir.text import print_function

        return print_function(self)

    def _repr_html_(self) -> str:  # a notebook shows the text in a monospace box
        from tessera.explain.notebook import ir_html

        return ir_html(self)


@dataclass(eq=False)
class Module:
    """A named collection of functions: the unit passes transform."""

    name: str
    functions: dict[str, Function] = field(default_factory=dict)

    def add(self, fn: Function) -> Function:
        self.functions[fn.name] = fn
        return fn

    def __str__(self) -> str:
        from tessera.ir.text import print_module

        return print_module(self)

    def _repr_html_(self) -> str:  # a notebook shows the text in a monospace box
        from tessera.explain.notebook import ir_html

        return ir_html(self)


class Builder:
    """Appends instructions at the end of a block, inferring and checking result types."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def create(self, op: Op, operands: Sequence[Value] = (), *, loc: Loc = UNKNOWN_LOC,
               regions: Sequence[IRRegion] = (), result_types: Sequence[Type] | None = None,
               ) -> list[Value]:
        """Build ``op(operands)`` at the insertion point and return its results."""
        types = [v.type for v in operands]
        try:
            if result_types is None:
                inferred = op.infer(types)
                if type(op).verify is not Op.verify:  # the default only re-infers
                    op.verify(types, inferred)
            else:
                inferred = tuple(result_types)
                op.verify(types, inferred)
        except IRVerifyError as err:
            raise type(err)(err.message, hint=err.hint, loc=loc) from None
        instr = Instr(op, list(operands), [], list(regions), loc)
        instr.results = [Value(t, instr) for t in inferred]
        self.block.append(instr)
        return instr.results


def walk(item: Module | Function | Block | IRRegion | Instr) -> Iterator[Instr]:
    """Yield every instruction below ``item`` in program order, nested regions first-in."""
    if isinstance(item, Module):
        for fn in item.functions.values():
            yield from walk(fn.body)
    elif isinstance(item, Function):
        yield from walk(item.body)
    elif isinstance(item, IRRegion):
        for block in item.blocks:
            yield from walk(block)
    elif isinstance(item, Block):
        for instr in item.instrs:
            yield instr
            for region in instr.regions:
                yield from walk(region)
    else:
        yield item
        for region in item.regions:
            yield from walk(region)


def uses(block: Block) -> dict[Value, list[Instr]]:
    """Map each value used in ``block`` (including nested regions) to its users."""
    table: dict[Value, list[Instr]] = {}
    for instr in walk(block):
        for operand in instr.operands:
            table.setdefault(operand, []).append(instr)
    return table


def replace_all_uses(block: Block, old: Value, new: Value) -> None:
    """Make every user of ``old`` below ``block`` use ``new`` instead."""
    for instr in walk(block):
        instr.operands = [new if v is old else v for v in instr.operands]


def clone_block(block: Block, env: dict[Value, Value]) -> Block:
    """A deep copy of ``block``; ``env`` maps outer values to their replacements.

    New block arguments and results are added to ``env`` so nested regions see them.
    """
    new = Block()
    for arg in block.args:
        env[arg] = new.add_arg(arg.type, arg.hint)
    for instr in block.instrs:
        regions = [IRRegion([clone_block(b, env) for b in r.blocks]) for r in instr.regions]
        copy = Instr(instr.op, [env.get(v, v) for v in instr.operands], [], regions, instr.loc)
        copy.results = [Value(r.type, copy, r.hint) for r in instr.results]
        env.update(zip(instr.results, copy.results))
        new.append(copy)
    return new
