"""``optimized_memory_access`` (programming-model-guide.md, "Memory Access
Patterns"), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/optimized_memory_access.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.optimized_memory_access import main, optimized_memory_access

__all__ = ["main", "optimized_memory_access"]

if __name__ == "__main__":
    main()
