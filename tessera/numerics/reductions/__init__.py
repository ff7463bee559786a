"""Reductions whose bits depend on the exact values only: the basis of determinism.

* :mod:`.rounding` -- the levels of a correctly rounded reduction: the interval test,
  ``round_fraction`` and ``round_double_double``.
* :mod:`.exact` -- exact (Fraction) and double-double sums of float64 terms.
* :mod:`.sums` -- ``sum_rounded``, correctly rounded sums and means.
* :mod:`.matmul` -- ``matmul_rounded``, the correctly rounded matrix product.
* :mod:`.treesum` -- the fixed float64 tree of a tile ``row_sum`` and its exact shortcut.
* :mod:`.accumulator` -- exact accumulators of the tile level's exact ``mma``: lazy
  sums of products rounded by ``matmul_rounded``, and the Kulisch reference.
"""
