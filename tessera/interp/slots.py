"""What the tile and Target IR interpreters share: register slots for SSA values."""

from __future__ import annotations

from tessera.ir.core import Value


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


__all__ = ["Slots"]
