"""The error hierarchy of tessera.

Every error tessera raises on purpose is a :class:`TesseraError`.  Its message starts
with the user's ``file:line`` (the innermost stack frame outside the tessera package,
or the source location recorded on the IR operation that failed) and ends with a hint
that says what to do.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True, slots=True)
class Loc:
    """A source location: the user's file and line."""

    file: str
    line: int

    def __str__(self) -> str:
        # Line 0 means the whole file (a file that does not exist, or defines no such name).
        return f"{self.file}:{self.line}" if self.line > 0 else self.file


UNKNOWN_LOC = Loc("<unknown>", 0)


def _is_internal(filename: str) -> bool:
    # Frames of tessera itself, of the interpreter's import machinery and of functools
    # wrappers are never "the user's line".
    if filename.startswith(_PACKAGE_DIR) or filename == "<string>":
        # "<string>" frames are dataclass-generated __init__/__post_init__ methods.
        return True
    return filename.startswith("<frozen ") or filename.endswith(("functools.py", "contextlib.py"))


def user_location(depth: int = 1) -> Loc:
    """Return the innermost stack frame that lies outside the tessera package."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename if filename.startswith("<") else os.path.abspath(filename)):
            return Loc(filename, frame.f_lineno)
        frame = frame.f_back
    return UNKNOWN_LOC


class TesseraError(Exception):
    """Base of every error tessera raises on purpose.

    ``message`` says what is wrong, ``hint`` what to do about it; ``loc`` is the user's
    source location (found on the stack when not given).
    """

    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None, loc: Loc | None = None):
        self.loc = loc if loc is not None else user_location(2)
        self.message = message
        self.hint = hint
        text = f"{self.loc}: {self.kind}: {message}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)

    def relocated(self, loc: Loc) -> TesseraError:
        """This error reported at ``loc`` instead (for callers that know the user's file
        better than the stack does, such as the command line)."""
        text = str(self)
        old = f"{self.loc}: "
        if text.startswith(old):
            text = f"{loc}: {text[len(old):]}"
        self.loc = loc
        self.args = (text, *self.args[1:])
        return self


class ShapeError(TesseraError):
    """Operand shapes do not fit the operator."""

    kind = "shape mismatch"


class DTypeError(TesseraError):
    """An unknown or unsupported numeric format, or formats that do not combine."""

    kind = "dtype error"


class PolicyError(TesseraError):
    """A malformed numerics policy chain (``dtype @accum(t) @stochastic_round ...``)."""

    kind = "policy error"


class DimBindingError(TesseraError):
    """A dimension symbol of a ``Tensor[...]`` annotation is unbound or bound twice differently."""

    kind = "dimension binding error"


class TraceError(TesseraError):
    """A Python function cannot be traced into Graph IR."""

    kind = "trace error"


class GradError(TesseraError):
    """A differentiation request that cannot be honoured (non-scalar output, bad argnums)."""

    kind = "autodiff error"


class TileContextError(TesseraError):
    """A ``ts.tile.*`` function was called outside a ``@ts.kernel`` body."""

    kind = "tile context error"


class IRParseError(TesseraError):
    """IR text that does not parse."""

    kind = "IR parse error"


class IRVerifyError(TesseraError):
    """IR that breaks the rules of its level."""

    kind = "IR verification error"


class StageError(TesseraError):
    """An IR stage that does not exist or is not built for this function."""

    kind = "stage error"


class InterpretError(TesseraError):
    """An operation that the interpreter cannot run on the values it was given."""

    kind = "interpreter error"


class ArgumentError(TesseraError):
    """A call with arguments of the wrong kind or number."""

    kind = "argument error"


class UnsupportedError(TesseraError):
    """A feature that exists in the specification but is not supported in this context."""

    kind = "unsupported"


# The distribution errors live here, not with the distributed API or the mesh simulator,
# because the IR's placement rules (ir/transforms/sharding/) raise them too and must not
# load either; ``ts.dist`` re-exports them.
class MeshError(TesseraError):
    """A mesh that cannot exist, or an axis or device that is not in the mesh."""

    kind = "mesh error"


class ShardingError(MeshError):
    """A ShardSpec that does not fit the tensor or the mesh it is applied to."""

    kind = "sharding error"


class PlacementError(MeshError):
    """A collective or constructor applied to a tensor in the wrong placement state
    (for example a reduce_scatter of a tensor that is not partial)."""

    kind = "placement error"


class MaterializeError(MeshError):
    """Making a tensor's values (its global value, or a block of a lazy tensor) would
    allocate more than ``DistTensor.max_materialize_bytes``."""

    kind = "materialization error"


class MeshShapeError(MeshError, ShapeError):
    """Shapes of distributed operands or shards that do not agree.

    Also a :class:`ShapeError`, so code that catches shape problems in general
    catches these too.
    """

    kind = "shape mismatch"


F = TypeVar("F", bound=Callable[..., Any])


def user_api(fn: F) -> F:
    """Decorate a public entry point so a TesseraError surfaces at the user's call.

    The internal frames between the user's call and the ``raise`` are dropped: the
    user sees their own line and the message, not the compiler's stack. A call with
    the wrong number or names of arguments (Python's TypeError) becomes an
    ArgumentError that shows the signature.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TesseraError as err:
            if os.environ.get("TESSERA_FULL_TRACEBACK"):
                raise
            raise err.with_traceback(None) from None
        except TypeError:
            # Only a call that does not bind is the caller's mistake; a TypeError from
            # inside a call that binds is left alone.
            problem = _binding_problem(fn, args, kwargs)
            if problem is None:
                raise
            raise ArgumentError(problem, hint=_signature_hint(fn)) from None

    return wrapper  # type: ignore[return-value]


def _binding_problem(fn: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> str | None:
    """Why ``fn(*args, **kwargs)`` does not bind to ``fn``'s signature, or None."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        return f"{_public_name(fn)}(): {err}"
    except ValueError:  # no signature to check against
        return None
    return None


def _public_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
    # ``Kernel.__call__`` and ``accum.__init__`` are called as ``kernel(...)``, ``accum(...)``
    for suffix in (".__init__", ".__call__"):
        name = name.removesuffix(suffix)
    return name


def _signature_hint(fn: Callable[..., Any]) -> str:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except ValueError:
        return "check the call's arguments"
    if getattr(fn, "__name__", "") in ("__init__", "__call__") and params:
        params = params[1:]  # self
    # Annotations are left out: string annotations would print as 'Any'.
    shown = [p.replace(annotation=inspect.Parameter.empty) for p in params]
    return f"call it as {_public_name(fn)}({', '.join(str(p) for p in shown)})"
