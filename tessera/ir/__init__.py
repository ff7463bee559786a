"""The IR stack: one core, one module per level, one printer/parser, passes.

Importing the package registers every dialect (Graph, Tile and Target IR) with the
parser and the op registry.
"""

from tessera.ir import transforms
from tessera.ir.core import (
    Block,
    Builder,
    Function,
    Instr,
    IRRegion,
    Module,
    Op,
    Type,
    Value,
    clone_block,
    walk,
)
from tessera.ir.dialects import graph
from tessera.ir.passes import PASSES, Pass, PassManager, dependence_graph, get_pass
from tessera.ir.text import parse_function, parse_module, print_function, print_module
from tessera.ir.types import Dense, TensorType
from tessera.ir.verifier import verify_function, verify_module

__all__ = [
    "PASSES", "Block", "Builder", "Dense", "Function", "IRRegion", "Instr", "Module", "Op",
    "Pass", "PassManager", "TensorType", "Type", "Value", "clone_block", "dependence_graph",
    "get_pass", "graph", "parse_function", "parse_module", "print_function", "print_module",
    "transforms", "verify_function", "verify_module", "walk",
]

# Every dialect registers its types and ops with the parser on import, so that
# ``import tessera.ir`` alone parses the text of every level: Schedule, Tile and Target IR.
from tessera.ir.dialects import schedule, target, tile  # noqa: F401
from tessera.ir.dialects.target import async_ops, guarded, ops, tables, wgmma_rs  # noqa: F401
from tessera.ir.dialects.tile import compute, ids, memory  # noqa: F401
