"""Flash attention on sm_90a: the K/V ring (``plan``, ``ring``, ``loop``), the
consumer warpgroups that split the query tile (``split``, ``order``) and the orders of
the key loop (``defer``, ``fa3``); docs/ptx-backend.md, "Flash attention on sm_90a"."""
