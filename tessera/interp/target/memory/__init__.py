"""The Target IR interpreter's memories: ``state`` holds global and shared memory and
their checks, ``steps`` the loads and stores, ``async_copy`` ``cp.async``, TMA and
mbarriers (``flight`` the copies in flight), ``async_order`` what orders asynchronous
accesses (groups, mbarrier phases, the async proxy), ``bulk`` the fast paths that update
the per-byte records by row slices and 16-byte chunks."""
