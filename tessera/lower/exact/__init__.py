"""Exact accumulation in PTX: the lowering of ``exact = true`` Tile IR ops.

``longacc``: the long fixed-point accumulator (deposit, carry normalisation, one
rounding); ``reduce``: exact row sums and means (``tile.reduce {exact}``);
``msetable``: an mse's table of terms, deposited without building it; ``carried``:
carried exact sums (``tile.reduce(x, c)``), rows walked in blocks into one long
accumulator per result element; ``flatten``: a block's tile flattened into its terms
in place; ``mma``: the exact ``mma`` accumulator, one per output element; ``chains``
and ``accplan``: the chains an accumulator flows through (``mma`` or carried sums),
their buffers in shared memory and the rounding at their uses; ``f64acc``: the exact
``mma`` chains one f64 per element sums exactly (fp8_e4m3); ``intmma``: the integer
``mma``, exact int64 sums per thread saturated once (lowered from the ``tile.mma``
rule of :mod:`tessera.lower.rules.block`). Importing the package registers the rules
with :data:`tessera.lower.core.EXACT_RULES`.
"""

from tessera.lower.exact import mma, reduce  # noqa: F401
