"""The conformance cases, one module per area. :func:`load_all` imports (and so
registers) every area, in the order of the stack: numerics and policies, graph
programs, the graph-level and distribution seeds, autodiff, tile kernels (their seeds
included), their semantics and reduction orders, the sanitizers, collectives on a
72-device mesh."""

from __future__ import annotations

import importlib

#: the area modules, in report order
AREAS = ("numerics", "policy", "graph", "seeds_graph", "seeds_mesh", "autodiff", "kernels",
         "tile", "tile_order", "sanitizer", "mesh")


def load_all() -> None:
    """Import every area module (each registers its cases once)."""
    for name in AREAS:
        importlib.import_module(f"{__name__}.{name}")
