"""The Target IR interpreter's tensor-core instructions: ``mma`` (``ldmatrix``,
``mma.sync``, ``wgmma``), ``wgmma_rs`` (``wgmma`` with A in registers), ``exact_mma``
(the tensor-core step as one float64 matmul where no partial sum can round, else the
ascending loop) and ``fragment_maps`` (fragment layouts as index gathers)."""
