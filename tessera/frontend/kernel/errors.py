"""Errors of the ``@ts.kernel`` front end (all :class:`~tessera.errors.TesseraError`)."""

from __future__ import annotations

from tessera.errors import TesseraError


class KernelCompileError(TesseraError):
    """A kernel body that cannot be compiled to Tile IR (unsupported syntax, a type or
    shape that does not fit, a tile API call with bad arguments)."""

    kind = "kernel compile error"


class UndefinedNameError(KernelCompileError):
    """A name in a kernel body that is not a local variable, a parameter, a dimension
    symbol, a tile name (``tile_m``, ``BM``, ...), a global or a builtin."""

    kind = "undefined name"


class KernelResourceError(KernelCompileError):
    """A kernel that needs more of a target resource (shared memory) than it has."""

    kind = "resource limit"


class KernelBoundsError(KernelCompileError):
    """A kernel compiled for a GPU that some tile of its launch is certain to run out
    of the bounds of a tensor with these shapes (refused before any PTX exists)."""

    kind = "out of bounds"


class AutotuneError(TesseraError):
    """No configuration of an autotuned kernel's space is valid for the call's shapes
    and the target (the message lists why each one was dropped)."""

    kind = "autotune error"


__all__ = ["AutotuneError", "KernelBoundsError", "KernelCompileError", "KernelResourceError",
           "UndefinedNameError"]
