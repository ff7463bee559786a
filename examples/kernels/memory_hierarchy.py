"""``memory_hierarchy_example`` (programming-model-guide.md, "Memory Hierarchy
Operations"), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/memory_hierarchy.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.memory_hierarchy import main, memory_hierarchy_example

__all__ = ["main", "memory_hierarchy_example"]

if __name__ == "__main__":
    main()
