"""Thread block clusters in the Target IR interpreter: the launch's cluster geometry and
special registers (:mod:`.geometry`) and the rules of ``mapa``, ``getctarank`` and the
cluster barrier (:mod:`.rules`). Distributed shared memory itself is the shared window's
(:mod:`tessera.interp.target.memory.window`)."""
