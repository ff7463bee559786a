"""``process_chunks`` (programming-model-guide.md, "Tile Ranges and Iteration"), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/process_chunks.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.process_chunks import main, process, process_chunks

__all__ = ["main", "process", "process_chunks"]

if __name__ == "__main__":
    main()
