"""The lowering rules of Tile IR, one module per op family; importing the package
registers every rule with :mod:`tessera.lower.core`.

``block``: whole-tile loads, stores, copies and ``mma``; ``fastmath``: ops lowered only
in fast mode (``log``); ``flow``: loops and branches; ``masked``: ``arange``, masks and
masked accesses; ``memory``: views, addresses and shared buffers; ``reduce``: row
reductions; ``scalar``: scalar arithmetic and program ids; ``tensor``: elementwise tile
ops.
"""

from tessera.lower.rules import (  # noqa: F401
    block,
    fastmath,
    flow,
    masked,
    memory,
    reduce,
    scalar,
    tensor,
)
