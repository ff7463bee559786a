"""sm_90a building blocks: ``wgmma`` descriptors and blocks (``gemm``), TMA copies and
mbarrier rings (``tma``), and their use by the lowering rules (``mma``)."""
