"""Passes and the pass manager.

A pass has a kebab-case ``name`` and ``apply(module) -> module``. The pass manager runs a
flat list of passes, verifies the IR after each one, can print the IR after any of them
(``print_after={"cse"}`` or ``"all"``) and times each pass.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TextIO

from tessera.errors import StageError
from tessera.ir.core import Block, Module, walk
from tessera.ir.verifier import verify_module

if TYPE_CHECKING:  # networkx costs 0.1 s to import: loaded when a graph is asked for
    import networkx as nx


class Pass(Protocol):
    """A named IR transformation."""

    name: str

    def apply(self, module: Module) -> Module: ...


#: every pass by name, so pipelines can be written as lists of names
PASSES: dict[str, Callable[[], Pass]] = {}


def register_pass(cls: type) -> type:
    """Class decorator: make a pass constructible by name."""
    PASSES[cls.name] = cls
    return cls


def get_pass(name: str) -> Pass:
    """Construct a registered pass by name."""
    if name not in PASSES:
        raise StageError(f"unknown pass {name!r}",
                         hint=f"known passes: {', '.join(sorted(PASSES))}")
    return PASSES[name]()


@dataclass
class PassManager:
    """Runs passes in order with verification, optional printing and timing."""

    passes: list[Pass]
    verify_each: bool = True
    print_after: set[str] | str = field(default_factory=set)
    stream: TextIO | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_names(cls, names: Iterable[str], **kwargs: object) -> PassManager:
        return cls([get_pass(n) for n in names], **kwargs)  # type: ignore[arg-type]

    def run(self, module: Module) -> Module:
        """Run every pass on ``module`` and return the result."""
        if self.verify_each:
            verify_module(module)
        for p in self.passes:
            start = time.perf_counter()
            module = p.apply(module)
            self.timings[p.name] = self.timings.get(p.name, 0.0) + time.perf_counter() - start
            if self.verify_each:
                verify_module(module)
            if self.print_after == "all" or p.name in self.print_after:
                out = self.stream or sys.stdout
                out.write(f"// ----- IR after {p.name} ----- //\n{module}")
        return module

    def timing_report(self) -> str:
        """A table of wall time per pass."""
        rows = [f"{name:<24} {secs * 1e3:9.3f} ms" for name, secs in self.timings.items()]
        return "\n".join(rows)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with Python's cyclic garbage collector paused (a no-op where it is
    paused already).

    Compiling a program builds tens of thousands of IR objects that point at each other
    (an instruction and its results, a block and its instructions): the allocations
    start full collections that walk every live object, which took a third of a
    transformer block's compile time. Paused, the objects' cycles are collected after
    the compile, as the collector next runs."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def dependence_graph(block: Block) -> nx.DiGraph:
    """The def-use graph of ``block``'s instructions (nested regions included).

    Nodes are instructions; an edge ``a -> b`` means ``b`` uses a result of ``a``. Block
    arguments are nodes too (the values themselves), so sources are explicit.
    """
    import networkx as nx

    graph = nx.DiGraph()
    producer = {}
    for arg in block.args:
        graph.add_node(arg)
        producer[arg] = arg
    for instr in walk(block):
        graph.add_node(instr)
        for result in instr.results:
            producer[result] = instr
        for region in instr.regions:
            for inner in region.blocks:
                for arg in inner.args:
                    producer[arg] = instr
    for instr in walk(block):
        for operand in instr.operands:
            if operand in producer and producer[operand] is not instr:
                graph.add_edge(producer[operand], instr)
    return graph
