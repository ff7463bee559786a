"""A ``@ts.kernel`` taken to a backend: the entry points above the kernel front end.

``compile`` specialises a kernel on example arguments, lowers its Tile IR to Target IR
and renders PTX (``compile_kernel``, the ``tessera ptx`` command); ``launch`` runs a
kernel on one of the backends of ``ts.launch(kernel, grid, args, backend=...)`` (the
tile simulator, the Target IR interpreter, the CUDA driver) and writes ``ts.aot``
bundles; ``check`` compares a backend's results with the tile simulator's
(``ts.check_against_reference``). They take a front-end ``Kernel`` and drive the layers
below it (``lower/``, ``interp/``, ``backend/ptx/``), so they load on first use.
"""
