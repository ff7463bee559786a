"""An fp8 (e4m3) GEMM with f32 accumulation, ``B`` stored ``N x K`` ("TN").

The kernel and its NumPy check live in ``tessera/conformance/kernels/fp8_gemm.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.fp8_gemm import fp8_gemm, main

__all__ = ["fp8_gemm", "main"]

if __name__ == "__main__":
    main()
