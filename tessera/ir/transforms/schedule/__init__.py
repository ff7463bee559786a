"""The passes of Schedule IR, one per file: ``graph-to-schedule`` (convert.py),
``fuse`` (fuse.py, with its cost model in cost.py) and ``tile`` (tile.py);
``schedule_module`` runs them on a copy of a Graph IR module."""

from __future__ import annotations

from collections.abc import Sequence

from tessera.ir.core import Module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.passes import PassManager, get_pass
from tessera.ir.transforms.schedule import convert, fuse, tile

#: Graph IR to tiled Schedule IR
SCHEDULE_PIPELINE = ("graph-to-schedule", "fuse", "tile")


def schedule_module(module: Module, passes: Sequence[str] = SCHEDULE_PIPELINE,
                    mode: str = "exact") -> Module:
    """A scheduled copy of ``module`` (``module`` itself is left as it is); with
    ``mode="fast"`` the ``tile`` pass may split float contractions (``split_k``)."""
    manager = PassManager([tile.Tile(mode=mode) if name == "tile" else get_pass(name)
                           for name in passes])
    scheduled = manager.run(Module(module.name, dict(module.functions)))
    for fn in scheduled.functions.values():
        schedule_ops.check_function(fn)
    return scheduled


__all__ = ["SCHEDULE_PIPELINE", "convert", "fuse", "schedule_module", "tile"]
