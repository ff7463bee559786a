"""Exact accumulation in PTX: the lowering of ``exact = true`` Tile IR ops.

``longacc``: the long fixed-point accumulator (deposit, carry normalisation, one
rounding); ``reduce``: exact row sums and means (``tile.reduce {exact}``); ``mma``:
the exact ``mma`` accumulator, one per output element. Importing
the package registers the rules with :data:`tessera.lower.core.EXACT_RULES`.
"""

from tessera.lower.exact import mma, reduce  # noqa: F401
