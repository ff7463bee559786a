"""What orders the shared-memory accesses of different threads in the Target IR
interpreter's race check beyond ``bar.sync``: strong accesses and memory fences
(:mod:`.strong`). Named barriers, mbarrier phases and ``wgmma`` groups are
:mod:`tessera.interp.target.memory.async_order`'s."""
