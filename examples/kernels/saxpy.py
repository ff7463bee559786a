"""SAXPY (overview-and-quickstart.md, Example 1): correct as written.

The kernel and its NumPy check live in ``tessera/conformance/kernels/saxpy.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.saxpy import main, saxpy

__all__ = ["main", "saxpy"]

if __name__ == "__main__":
    main()
