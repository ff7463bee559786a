"""Target IR -> PTX text (PTX ISA 8.x).

``emit`` holds the rule table :data:`RULES` (Target IR op class -> format function) and
the :class:`PtxWriter` a rule writes through; ``ops`` (core instructions), ``async_ops``
(asynchronous copies, barriers and matrix instructions), ``warp_ops`` (setmaxnreg,
elect.sync), ``tables`` (module lookup tables), ``ptx_ops`` (the instructions of other
compilers' PTX) and ``kernel`` (structured control flow) register their rules on
import, which this ``__init__`` does, so the table is complete whichever module is
imported first. ``regalloc`` maps SSA values to PTX registers; ``kernel.render``
writes the whole module.
"""

from __future__ import annotations

# importing a rule module registers its format functions in RULES
from tessera.backend.ptx.render import async_ops, kernel, ops, ptx_ops, tables, warp_ops  # noqa: F401
from tessera.backend.ptx.render.emit import RULES, PtxWriter
from tessera.backend.ptx.render.kernel import render
from tessera.backend.ptx.render.regalloc import RenderError

__all__ = ["RULES", "PtxWriter", "RenderError", "render"]
