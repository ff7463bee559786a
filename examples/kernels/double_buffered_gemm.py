"""Double-buffered GEMM (programming-model-guide.md, "Double Buffering Pattern"), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/double_buffered_gemm.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.double_buffered_gemm import double_buffered_gemm, main

__all__ = ["double_buffered_gemm", "main"]

if __name__ == "__main__":
    main()
