"""Types and attribute values shared by every IR level.

``tensor<4x8xbf16@accum(f32)>`` is a tensor type: static dims (or ``{N}`` symbolic
dims), then the element: a format or a numerics policy in its compact text form.

A tensor distributed over a device mesh also carries its placement, a
:class:`Sharding`, printed after the element (and only when set)::

    tensor<64x8192xf32, mesh<dp=4, tp=9, pp=2>[dp, tp]>          # rows over dp, cols over tp
    tensor<64x64xf32, mesh<dp=4, tp=9, pp=2>[_, _] partial(tp)>  # summands over tp
    tensor<8x8xf32, mesh<dp=2, tp=2>[(dp, tp), _]>               # rows over dp x tp
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import DTypeError, IRParseError, IRVerifyError
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


SHARDED, REPLICATED, PARTIAL = "sharded", "replicated", "partial"
PARTIAL_OPS = ("sum", "max", "min")


@dataclass(frozen=True)
class Sharding:
    """Where a tensor's values live on a mesh: one placement per mesh axis.

    ``mesh`` is the mesh's ``(axis, size)`` pairs in axis order (the shape of the mesh,
    not its device ids). ``dims`` gives, for every tensor dim, the axes that split it
    (major first, ``numpy.array_split`` pieces); ``partial`` the axes along which
    devices hold summands (``"sum"``) or per-device extrema (``"max"``, ``"min"``) of
    the value. Every other axis replicates.
    """

    mesh: tuple[tuple[str, int], ...]
    dims: tuple[tuple[str, ...], ...]
    partial: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        mesh = tuple((str(a), int(n)) for a, n in self.mesh)
        axes = [a for a, _ in mesh]
        dims = tuple(tuple(d) for d in self.dims)
        order = {a: k for k, a in enumerate(axes)}
        partial = tuple(sorted(((a, op) for a, op in self.partial), key=lambda p: order.get(
            p[0], -1)))
        used = [a for d in dims for a in d] + [a for a, _ in partial]
        if len(set(axes)) != len(axes) or any(a not in order for a in used) or \
                len(set(used)) != len(used) or any(op not in PARTIAL_OPS for _, op in partial):
            raise IRVerifyError(f"invalid placement: dims {dims}, partial {partial} on mesh "
                                f"{mesh}", hint="each mesh axis shards one dim, is partial, "
                                                "or replicates")
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "partial", partial)

    @classmethod
    def replicated(cls, mesh: tuple[tuple[str, int], ...], rank: int) -> Sharding:
        """The placement that holds the whole value on every device."""
        return cls(mesh, ((),) * rank)

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes in order."""
        return tuple(a for a, _ in self.mesh)

    def size(self, axis: str | tuple[str, ...]) -> int:
        """The number of devices along ``axis`` (the product over a tuple of axes)."""
        sizes = dict(self.mesh)
        names = (axis,) if isinstance(axis, str) else tuple(axis)
        out = 1
        for a in names:
            out *= sizes[a]
        return out

    def dim_of(self, axis: str) -> int | None:
        """The dim that ``axis`` splits, or None."""
        return next((d for d, axes in enumerate(self.dims) if axis in axes), None)

    def partial_op(self, axis: str) -> str | None:
        """The combining op of a partial axis (``"sum"``, ``"max"``, ``"min"``), or None."""
        return dict(self.partial).get(axis)

    def state(self, axis: str) -> str:
        """``"sharded"``, ``"replicated"`` or ``"partial"`` along ``axis``."""
        if self.partial_op(axis) is not None:
            return PARTIAL
        return SHARDED if self.dim_of(axis) is not None else REPLICATED

    @property
    def partial_axes(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.partial)

    @property
    def sharded_axes(self) -> tuple[str, ...]:
        """The axes that split some dim, in mesh axis order."""
        return tuple(a for a in self.axes if self.dim_of(a) is not None)

    def with_dims(self, dims: tuple[tuple[str, ...], ...]) -> Sharding:
        return Sharding(self.mesh, dims, self.partial)

    def with_partial(self, partial: tuple[tuple[str, str], ...]) -> Sharding:
        return Sharding(self.mesh, self.dims, partial)

    def __str__(self) -> str:
        mesh = ", ".join(f"{a}={n}" for a, n in self.mesh)
        dims = ", ".join("_" if not d else d[0] if len(d) == 1 else f"({', '.join(d)})"
                         for d in self.dims)
        text = f"mesh<{mesh}>[{dims}]"
        if self.partial:
            text += " partial(" + ", ".join(a if op == "sum" else f"{a}:{op}"
                                            for a, op in self.partial) + ")"
        return text


_SHARDING = re.compile(r"mesh<(?P<mesh>[^>]*)>\[(?P<dims>[^\]]*)\](?:\s*partial\((?P<partial>"
                       r"[^)]*)\))?\s*$")


def parse_sharding(text: str) -> Sharding:
    """Parse the text form of a placement (``mesh<dp=4, tp=2>[dp, _] partial(tp)``)."""
    m = _SHARDING.match(text.strip())
    if m is None:
        raise IRParseError(f"malformed placement {text!r}",
                           hint="write mesh<dp=4, tp=2>[dp, _] with an optional partial(tp)")
    try:
        mesh = tuple((a.strip(), int(n)) for a, n in (p.split("=") for p in
                                                       m["mesh"].split(",")))
    except ValueError:
        raise IRParseError(f"malformed mesh in placement {text!r}",
                           hint="write mesh<dp=4, tp=2>") from None
    dims: list[tuple[str, ...]] = []
    for item in re.findall(r"\([^)]*\)|[^,\s]+", m["dims"]):
        names = tuple(n.strip() for n in item.strip("()").split(",") if n.strip())
        dims.append(() if names == ("_",) else names)
    partial = []
    for item in (m["partial"] or "").split(","):
        if item.strip():
            axis, _, op = item.strip().partition(":")
            partial.append((axis.strip(), op.strip() or "sum"))
    try:
        return Sharding(mesh, tuple(dims), tuple(partial))
    except IRVerifyError as err:
        raise IRParseError(err.message, hint=err.hint) from None


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor of static (or symbolic) shape and an element format or policy, and, for
    a tensor distributed over a mesh, its placement (``sharding``; None: not placed)."""

    shape: tuple[Dim, ...]
    element: Element
    sharding: Sharding | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "element", element(self.element))
        if self.sharding is not None and len(self.sharding.dims) != len(self.shape):
            raise IRVerifyError(f"placement {self.sharding} has {len(self.sharding.dims)} "
                                f"dims but the tensor has shape {self.shape}",
                                hint="give one entry per dim")

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

    def placed(self, sharding: Sharding | None) -> TensorType:
        """This type with placement ``sharding`` (None: without a placement)."""
        return TensorType(self.shape, self.element, sharding)

    def unplaced(self) -> TensorType:
        """This type without a placement."""
        return self if self.sharding is None else TensorType(self.shape, self.element)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" if isinstance(d, int) else f"{{{d}}}x" for d in self.shape)
        where = "" if self.sharding is None else f", {self.sharding}"
        return f"tensor<{dims}{element_text(self.element)}{where}>"


def parse_tensor_type(body: str) -> TensorType:
    """Parse the inside of ``tensor<...>``."""
    body, _, placement = body.partition(", mesh<")
    sharding = parse_sharding("mesh<" + placement) if placement else None
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
    try:
        return TensorType(tuple(dims), parse_element(rest), sharding)
    except IRVerifyError as err:
        raise IRParseError(err.message, hint=err.hint) from None


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
