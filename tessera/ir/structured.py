"""Structured control flow shared by the dialects: ``if``, ``for`` and ``while`` with
values passed through region arguments and yields (like MLIR's ``scf``). A dialect
subclasses these and says what its conditions and loop indices are."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Function, Instr, Op, Type, Value, check_count, region_types, walk


@dataclass(frozen=True)
class StructuredOp(Op, ABC):
    """Base of the structured ops: a dialect's subclass says what its conditions and
    indices are (``check_condition``, ``check_index``)."""

    pure: ClassVar[bool] = False
    #: the type of a loop index (and of the bounds of ``for``)
    index_type: ClassVar[Type]
    #: the type a condition region ends with, and its text for messages
    condition_type: ClassVar[Type]
    condition_text: ClassVar[str] = ""

    @abstractmethod
    def check_condition(self, t: Type) -> None:
        """Raise unless ``t`` is a condition of this dialect."""

    @abstractmethod
    def check_index(self, t: Type) -> None:
        """Raise unless ``t`` is a loop bound of this dialect."""


@dataclass(frozen=True)
class StructuredIf(StructuredOp):
    """``if(%cond) ({then}, {else})``: both regions take no arguments and yield the
    results."""

    num_regions: ClassVar[int] = 2

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError(f"{self.name} takes its result types from its regions")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 1)
        self.check_condition(operands[0])

    def verify_regions(self, instr: Instr) -> None:
        for k in (0, 1):
            args, yields = region_types(instr, k)
            if args or yields != [r.type for r in instr.results]:
                raise IRVerifyError(f"{self.name} region {k} must take no arguments and "
                                    "yield the result types")


@dataclass(frozen=True)
class StructuredFor(StructuredOp):
    """``for(%lo, %hi, %step, %init...)``: the region takes the index and the carried
    values and yields the next carried values; the results are the last ones."""

    num_regions: ClassVar[int] = 1

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if len(operands) < 3:
            raise IRVerifyError(f"{self.name} takes lo, hi, step and the initial values")
        for t in operands[:3]:
            self.check_index(t)
        return tuple(operands[3:])

    def verify_regions(self, instr: Instr) -> None:
        args, yields = region_types(instr, 0)
        carried = [v.type for v in instr.operands[3:]]
        if args != [self.index_type, *carried] or yields != carried:
            raise IRVerifyError(f"{self.name} region must take (index, carried...) and "
                                "yield the carried types")


@dataclass(frozen=True)
class StructuredWhile(StructuredOp):
    """``while(%init...) ({cond}, {body})``: both regions take the carried values; the
    first ends with the dialect's condition, the second yields the next values."""

    num_regions: ClassVar[int] = 2

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return tuple(operands)

    def verify_regions(self, instr: Instr) -> None:
        carried = [v.type for v in instr.operands]
        args, cond = region_types(instr, 0)
        if args != carried or cond != [self.condition_type]:
            raise IRVerifyError(f"{self.name} condition region must take the carried "
                                f"values and end with {self.condition_text}")
        args, yields = region_types(instr, 1)
        if args != carried or yields != carried:
            raise IRVerifyError(f"{self.name} body must take and yield the carried values")


def value_slots(instr: Instr) -> list[tuple[list[Value], list[Value]]]:
    """Per result of a structured ``if`` / ``for`` / ``while``, ``(sources, targets)``:
    the values that flow into that slot (a loop's initial value, the yields of its
    regions) and the values that receive them (the region arguments, the result). An
    ``if``'s condition and a ``while``'s condition region's flag are no slot."""
    op = instr.op
    if isinstance(op, StructuredIf):
        carried: Sequence[Value] = []
        bodies, arg_lists = instr.regions, []
    elif isinstance(op, StructuredFor):  # the body's first argument is the index
        carried, bodies = instr.operands[3:], instr.regions
        arg_lists = [bodies[0].block.args[1:]]
    else:  # while: (condition, body), both taking the carried values
        carried, bodies = instr.operands, instr.regions[1:]
        arg_lists = [region.block.args for region in instr.regions]
    yields = [r.block.terminator.operands if r.block.terminator else [] for r in bodies]
    return [([*carried[k:k + 1], *(y[k] for y in yields if k < len(y))],
             [result, *(args[k] for args in arg_lists if k < len(args))])
            for k, result in enumerate(instr.results)]


def forward_closure(fn: Function, makes: Callable[[Instr], bool],
                    passes: Callable[[Instr], bool],
                    admits: Callable[[Value], bool] = lambda v: True) -> set[Value]:
    """The least set of values of ``fn`` (those ``admits`` accepts) that holds the
    results of every instruction that ``makes`` one, the results of every instruction
    that ``passes`` an operand of the set on, and the targets of every structured slot
    with a source in the set (:func:`value_slots`; a fixpoint, so over loops too)."""
    found: set[Value] = set()
    changed = True
    while changed:
        changed = False
        for instr in walk(fn.body):
            new: list[Value] = []
            if makes(instr) or (passes(instr) and any(v in found for v in instr.operands)):
                new = list(instr.results)
            elif isinstance(instr.op, StructuredOp):
                for sources, targets in value_slots(instr):
                    if any(v in found for v in sources):
                        new += targets
            for v in new:
                if v not in found and admits(v):
                    found.add(v)
                    changed = True
    return found


__all__ = ["StructuredFor", "StructuredIf", "StructuredOp", "StructuredWhile",
           "forward_closure", "value_slots"]
