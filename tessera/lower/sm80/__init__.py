"""sm_80 building blocks: swizzled shared memory and ``cp.async`` copies (``copy``), and
``ldmatrix`` + ``mma.sync`` tiles with their accumulator layout (``gemm``)."""
