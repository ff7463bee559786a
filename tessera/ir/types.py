"""Types and attribute values shared by every IR level.

``tensor<4x8xbf16@accum(f32)>`` is a tensor type: static dims (or ``{N}`` symbolic
dims), then the element: a format or a numerics policy in its compact text form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import DTypeError, IRParseError
from tessera.ir.core import Type
from tessera.numerics import DType, Policy, PolicyClass, element, parse_policy

Element = DType | Policy | PolicyClass
Dim = int | str

#: precision-policy classes by name, so IR text that names one can be parsed again
POLICY_CLASSES: dict[str, PolicyClass] = {}


def element_text(e: Element) -> str:
    """The compact text of an element type (no spaces, so it fits inside ``tensor<...>``)."""
    if isinstance(e, Policy):
        return e.text
    if isinstance(e, PolicyClass):
        POLICY_CLASSES.setdefault(str(e), e)
    return str(e)


def parse_element(text: str) -> Element:
    """Parse the text form of an element type back to its value."""
    if text in POLICY_CLASSES:
        return POLICY_CLASSES[text]
    try:
        return parse_policy(text)
    except DTypeError as err:
        raise IRParseError(f"unknown element type {text!r}", hint=err.hint) from None


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor of static (or symbolic) shape and an element format or policy."""

    shape: tuple[Dim, ...]
    element: Element

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "element", element(self.element))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod([d for d in self.shape if isinstance(d, int)], dtype=np.int64))

    def with_shape(self, shape: tuple[Dim, ...]) -> TensorType:
        return TensorType(tuple(shape), self.element)

    def with_element(self, elem: Element) -> TensorType:
        return TensorType(self.shape, elem)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" if isinstance(d, int) else f"{{{d}}}x" for d in self.shape)
        return f"tensor<{dims}{element_text(self.element)}>"


def parse_tensor_type(body: str) -> TensorType:
    """Parse the inside of ``tensor<...>``."""
    dims: list[Dim] = []
    rest = body
    while True:
        if rest.startswith("{"):
            end = rest.find("}x")
            if end < 0:
                break
            dims.append(rest[1:end])
            rest = rest[end + 2:]
            continue
        head, sep, tail = rest.partition("x")
        if sep and head.isdigit():
            dims.append(int(head))
            rest = tail
            continue
        break
    return TensorType(tuple(dims), parse_element(rest))


@dataclass(frozen=True, eq=False)
class Dense:
    """A constant array attribute (compared and hashed by dtype, shape and bytes)."""

    array: np.ndarray

    def __post_init__(self) -> None:
        arr = np.asarray(self.array)
        if arr.dtype.kind == "c":
            arr = arr.astype(np.complex128)
        elif arr.dtype.kind == "b":
            arr = arr.astype(np.bool_)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        else:
            arr = arr.astype(np.float64)
        arr.setflags(write=False)
        object.__setattr__(self, "array", arr)

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, Dense) and self.array.dtype == other.array.dtype
                and self.array.shape == other.array.shape
                and self.array.tobytes() == other.array.tobytes())

    def __hash__(self) -> int:
        return hash((self.array.dtype.str, self.array.shape, self.array.tobytes()))
