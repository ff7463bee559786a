"""``cooperative_reduction`` (programming-model-guide.md, "Tile Groups and
Synchronization"), as written and corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/cooperative_reduction.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.cooperative_reduction import (
    block_reduction,
    cooperative_reduction,
    main,
)

__all__ = ["block_reduction", "cooperative_reduction", "main"]

if __name__ == "__main__":
    main()
