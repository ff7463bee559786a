"""``@precision_policy`` classes: user-defined element types with their own methods.

The decorated class declares formats as class attributes (``storage``, ``compute``,
``accumulate`` or ``accum``, ``scale``) and may define methods such as ``quantize``
and ``dequantize``. The decorator returns a frozen :class:`PolicyClass` that is an
element type like a Policy, and that forwards attribute access to an instance of the
user's class, so ``QuantizedPolicy.quantize(x)`` calls the method with ``self`` bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tessera.errors import DTypeError, PolicyError, user_api
from tessera.numerics.formats.dtypes import DType, dtype
from tessera.numerics.policy.modifiers import check_accum, default_accum


@dataclass(frozen=True)
class PolicyClass:
    """The element type made by ``@precision_policy`` from a user's class."""

    name: str
    storage: DType
    compute: DType
    accum: DType | None
    scale: DType | float | None
    user_class: type
    instance: Any = field(compare=False, repr=False, hash=False)

    @property
    def accum_dtype(self) -> DType:
        """The declared accumulator, or the default for the compute format."""
        return self.accum if self.accum is not None else default_accum(self.compute)

    @property
    def text(self) -> str:
        """The spelling used in IR text: the class name."""
        return self.name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"PolicyClass({self.name})"

    def __getattr__(self, attr: str) -> Any:
        # Only reached for names that are not fields: forward to the user's methods.
        # Dunder and private names are not forwarded so copy/pickle probing stays sane.
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            target = object.__getattribute__(self, "instance")
        except AttributeError:
            raise AttributeError(attr) from None
        try:
            return getattr(target, attr)
        except AttributeError:
            raise AttributeError(
                f"precision policy {self.name} has no attribute {attr!r}"
            ) from None


def _format_attr(cls: type, attr: str, value: Any) -> DType:
    try:
        return dtype(value)
    except DTypeError as err:
        raise PolicyError(
            f"{cls.__name__}.{attr} = {value!r} is not a numeric format",
            hint=f"set {attr} to a tessera dtype such as ts.int8 or ts.f32",
        ) from err


# ``PolicyClass(...)`` with the wrong arguments is an ArgumentError like any tessera call.
PolicyClass.__init__ = user_api(PolicyClass.__init__)  # type: ignore[method-assign]


@user_api
def precision_policy(cls: type) -> PolicyClass:
    """Class decorator: turn a class with ``storage``/``compute``/``accumulate``/``scale``
    attributes (and any methods) into a :class:`PolicyClass` element type.

    ``storage`` is required; ``compute`` defaults to the storage format, the accumulator
    to the default for the compute format; ``scale`` is a format (the type of the
    quantization scale) or a number, or absent.
    """
    if not isinstance(cls, type):
        raise PolicyError(f"@precision_policy decorates a class, not {cls!r}",
                          hint="write @ts.precision_policy above a class statement")
    if not hasattr(cls, "storage"):
        raise PolicyError(
            f"precision policy {cls.__name__} has no 'storage' attribute",
            hint="declare the stored format, e.g. `storage = ts.int8`, in the class body",
        )
    storage = _format_attr(cls, "storage", cls.storage)
    compute = _format_attr(cls, "compute", getattr(cls, "compute", storage))
    acc_value = getattr(cls, "accumulate", getattr(cls, "accum", None))
    if hasattr(cls, "accumulate") and hasattr(cls, "accum"):
        raise PolicyError(f"precision policy {cls.__name__} sets both accumulate and accum",
                          hint="keep one of them")
    acc = None if acc_value is None else _format_attr(cls, "accumulate", acc_value)
    if acc is not None:
        check_accum(compute, acc)
    scale_value = getattr(cls, "scale", None)
    scale: DType | float | None
    if scale_value is None:
        scale = None
    elif isinstance(scale_value, (int, float)) and not isinstance(scale_value, bool):
        scale = float(scale_value)
    else:
        scale = _format_attr(cls, "scale", scale_value)
    try:
        instance = cls()
    except TypeError:
        # A constructor with required arguments: the methods still get a ``self``.
        instance = object.__new__(cls)
    return PolicyClass(cls.__name__, storage, compute, acc, scale, cls, instance)
