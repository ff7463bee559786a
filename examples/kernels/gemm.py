"""Tensor-core GEMM (overview-and-quickstart.md, Example 2), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/gemm.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.gemm import gemm, main, tolerance

__all__ = ["gemm", "main", "tolerance"]

if __name__ == "__main__":
    main()
