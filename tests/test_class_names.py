"""No two public classes of the package share a name, so an import or a search for a
class name finds one class.

IR op classes are the one exception, by rule rather than by name: each dialect module
defines the op classes of its own ops (``graph.Cast``, ``tile_compute.Cast``), named for
the op, identified by their op name (``"graph.cast"``) and read through their dialect's
module, as MLIR names the ops of each dialect.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

import tessera
from tessera.ir.core import Op

PACKAGE = Path(tessera.__file__).parent
#: names that may be defined by classes of several modules (none, beyond op classes)
ALLOWED: frozenset[str] = frozenset()


def public_classes() -> dict[str, list[str]]:
    """Class name -> the modules that define a public class of that name at top level."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(module)
    return found


def is_op_class(module: str, name: str) -> bool:
    """Whether ``module.name`` is an IR op class (a subclass of ``ir.core.Op``)."""
    cls = getattr(importlib.import_module(module), name)
    return isinstance(cls, type) and issubclass(cls, Op)


def test_public_class_names_are_unique() -> None:
    classes = public_classes()
    assert len(classes) > 100  # the walk found the package
    shared = {name: modules for name, modules in classes.items()
              if len(modules) > 1 and name not in ALLOWED
              and not all(is_op_class(m, name) for m in modules)}
    assert shared == {}, "rename one of each pair to say what it is"


def test_the_op_class_rule_admits_only_op_classes() -> None:
    """Op classes with shared names exist (so the rule is needed), and the rule does not
    admit a helper class that happens to live in a dialect module."""
    classes = public_classes()
    assert all(is_op_class(m, "Cast") for m in classes["Cast"]) and len(classes["Cast"]) > 1
    assert not is_op_class("tessera.ir.core", "Block")
