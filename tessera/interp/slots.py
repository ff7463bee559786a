"""What the tile and Target IR interpreters share: register slots for SSA values and
rule tables of step factories keyed by op class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.ir.core import Op, Value


class Slots:
    """Numbers SSA values with register slots, each on first use."""

    def __init__(self) -> None:
        self.slots: dict[Value, int] = {}

    def slot(self, v: Value) -> int:
        """The register slot of ``v``."""
        found = self.slots.get(v)
        if found is None:
            found = self.slots[v] = len(self.slots)
        return found


def rule_decorator(table: dict[type[Op], Any]) -> Callable[..., Callable[[Any], Any]]:
    """A decorator ``@rule(OpA, OpB)`` that enters a function into ``table``."""
    def rule(*classes: type[Op]) -> Callable[[Any], Any]:
        def register(fn: Any) -> Any:
            for cls in classes:
                table[cls] = fn
            return fn
        return register
    return rule


__all__ = ["Slots", "rule_decorator"]
