"""Row softmax: ``BM`` rows per tile, the whole row in registers.

The kernel and its NumPy check live in ``tessera/conformance/kernels/row_softmax.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.row_softmax import main, reference, row_softmax

__all__ = ["main", "reference", "row_softmax"]

if __name__ == "__main__":
    main()
