"""Tile kernels: ``@ts.kernel`` and what a launch goes through.

``entry`` holds the ``Kernel`` object and the ``ts.kernel`` decorator; ``specialise``
binds a call's arguments to one specialisation (dims, batch, grid with ``grid``, checks
with ``args``, reuse with ``memo``); ``compiler/`` compiles the function's Python AST
into Tile IR; ``tuning/`` is the autotuner with its validity checks (``bounds``,
``regs``) and its search; ``errors`` the kernel compiler's error types, which
``import tessera`` needs without the rest (so the names below load on first use).
"""

from tessera import lazy

__all__ = ["MODES", "STAGES", "Kernel", "finish_launch", "kernel"]
__getattr__, __dir__ = lazy.attach(__name__, globals(),
                                   lazy.names("tessera.frontend.kernel.entry", *__all__))
