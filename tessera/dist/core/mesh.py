"""Device meshes: named axes over a list of (virtual) devices.

A :class:`Mesh` is an immutable, hashable value. Device ``index`` ``i`` (its position in
``devices``) sits at the row-major coordinates of ``i`` in ``shape``, one coordinate per
axis in axis order. The coordinate of a device along an axis is its *rank* in that axis.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from tessera.errors import MeshError, user_api
from tessera.mesh_checks import MAX_DEVICES, as_tuple

Device = Hashable
"""A device id as the user gave it: ``"cuda:3"``, ``3``, or any hashable value."""

AxisSpec = Union[str, Sequence[str]]  # noqa: UP007 - a runtime alias, also on 3.10
"""One axis name, or several (grouped row-major in the order given)."""

#: The GB200 NVL72 rack: 72 GPUs as 4-way data, 9-way tensor and 2-way pipeline parallel.
NVL72_FACTORS = {"dp": 4, "tp": 9, "pp": 2}


def _infer_shape(axes: tuple[str, ...], n: int) -> tuple[int, ...]:
    if len(axes) == 1:
        return (n,)
    if n == 72 and sorted(axes) == sorted(NVL72_FACTORS):
        return tuple(NVL72_FACTORS[a] for a in axes)
    raise MeshError(
        f"cannot infer the shape of a mesh with axes {axes} over {n} devices",
        hint=f"pass shape=(...), one size per axis, whose product is {n}; a shape is "
             "inferred only for one axis, or for 72 devices with axes dp, tp, pp (4, 9, 2)")


def _normalise_device(d: Any) -> Device:
    if isinstance(d, bool):
        raise MeshError(f"device id {d!r} is a bool", hint='name devices "cuda:0" or 0')
    if hasattr(d, "__index__") and not isinstance(d, int):
        return int(d)  # numpy integers become plain ints so that ids compare and hash alike
    try:
        hash(d)
    except TypeError:
        raise MeshError(f"device id {d!r} is not hashable",
                        hint='name devices with strings such as "cuda:0" or ints') from None
    return d  # type: ignore[no-any-return]


@dataclass(frozen=True, init=False)
class Mesh:
    """A device mesh: named ``axes`` with sizes ``shape`` over ``devices``.

    ``Mesh(axes=["tp", "pp", "dp"], devices=range(72))`` and
    ``dist.mesh(devices=..., axes=..., shape=...)`` build the same value. Without a
    ``shape`` it is inferred for one axis (``(len(devices),)``) and for 72 devices with
    axes ``{dp, tp, pp}`` (dp=4, tp=9, pp=2, in the given axis order). Without
    ``devices`` the mesh has virtual devices ``0 .. prod(shape)-1``.
    """

    axes: tuple[str, ...]
    shape: tuple[int, ...]
    devices: tuple[Device, ...]

    @user_api
    def __init__(self, axes: AxisSpec, devices: Iterable[Any] | None = None,
                 shape: Sequence[int] | None = None) -> None:
        axes_t = (axes,) if isinstance(axes, str) else as_tuple(
            axes, "mesh axes", MeshError, 'write axes=("dp", "tp")')
        if not axes_t or not all(isinstance(a, str) and a for a in axes_t):
            raise MeshError(f"mesh axes must be non-empty strings, got {axes!r}",
                            hint='write axes=("dp", "tp")')
        dupes = sorted({a for a in axes_t if axes_t.count(a) > 1})
        if dupes:
            raise MeshError(f"duplicate mesh axis name(s) {dupes} in {axes_t}",
                            hint="give every axis its own name")
        shape_t = None if shape is None else tuple(_size(s) for s in as_tuple(
            shape, "mesh shape", MeshError, "write shape=(2, 4), one size per axis"))
        if devices is None:
            if shape_t is None:
                raise MeshError("a mesh needs devices or a shape",
                                hint="pass devices=[...] or shape=(...)")
            if math.prod(shape_t) > MAX_DEVICES:
                raise MeshError(f"mesh shape {shape_t} has {math.prod(shape_t)} devices, more "
                                f"than the simulator's {MAX_DEVICES}",
                                hint="simulate a smaller mesh (an NVL72 rack has 72 devices)")
            devices = range(math.prod(shape_t))
        devs = tuple(_normalise_device(d) for d in as_tuple(
            devices, "devices", MeshError, 'write devices=["cuda:0", "cuda:1"] or range(8)'))
        if not devs:
            raise MeshError("a mesh needs at least one device", hint="pass devices=[...]")
        seen: set[Device] = set()
        repeated = [d for d in devs if d in seen or seen.add(d)]  # type: ignore[func-returns-value]
        if repeated:
            raise MeshError(f"device(s) {repeated} appear more than once in the mesh",
                            hint="list every device exactly once")
        if shape_t is None:
            shape_t = _infer_shape(axes_t, len(devs))
        if len(shape_t) != len(axes_t):
            raise MeshError(f"the mesh has {len(axes_t)} axes {axes_t} but shape {shape_t} "
                            f"has {len(shape_t)} entries", hint="give one size per axis")
        if math.prod(shape_t) != len(devs):
            raise MeshError(f"mesh shape {shape_t} holds {math.prod(shape_t)} devices but "
                            f"{len(devs)} were given",
                            hint="make the product of the shape equal the number of devices")
        object.__setattr__(self, "axes", axes_t)
        object.__setattr__(self, "shape", shape_t)
        object.__setattr__(self, "devices", devs)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{a}={s}" for a, s in zip(self.axes, self.shape))
        return f"Mesh({sizes}; {len(self.devices)} devices)"

    @property
    def size(self) -> int:
        """The number of devices."""
        return len(self.devices)

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.axes)

    def axis_position(self, axis: str) -> int:
        """The position of ``axis`` in ``axes`` (MeshError for an unknown axis)."""
        if not isinstance(axis, str) or axis not in self.axes:
            raise MeshError(f"axis {axis!r} is not an axis of {self!r}",
                            hint=f"use one of {self.axes}")
        return self.axes.index(axis)

    def axis_tuple(self, axis: AxisSpec) -> tuple[str, ...]:
        """``axis`` as a tuple of checked axis names (each known, none repeated)."""
        names = (axis,) if isinstance(axis, str) else tuple(axis)
        if not names:
            raise MeshError("an empty tuple of axes", hint=f"name one of {self.axes}")
        for a in names:
            self.axis_position(a)
        if len(set(names)) != len(names):
            raise MeshError(f"axis named twice in {names}", hint="name each axis once")
        return names

    def axis_size(self, axis: AxisSpec) -> int:
        """The size of an axis (the product of sizes for a tuple of axes)."""
        return math.prod(self.shape[self.axis_position(a)] for a in self.axis_tuple(axis))

    def coords(self, index: int) -> tuple[int, ...]:
        """The coordinates of device ``index``, one per axis, row-major in axis order."""
        index = self._check_index(index)
        out = []
        for size in reversed(self.shape):
            index, c = divmod(index, size)
            out.append(c)
        return tuple(reversed(out))

    def index(self, coords: Sequence[int] | Mapping[str, int]) -> int:
        """The device index at ``coords`` (a sequence in axis order or ``{axis: c}``)."""
        if isinstance(coords, Mapping):
            unknown = [a for a in coords if a not in self.axes]
            if unknown:
                raise MeshError(f"unknown axis {unknown[0]!r} in coordinates",
                                hint=f"use the axes {self.axes}")
            coords = [coords.get(a, 0) for a in self.axes]
        coords = tuple(coords)
        if len(coords) != self.ndim or not all(
                isinstance(c, int) and 0 <= c < s for c, s in zip(coords, self.shape)):
            raise MeshError(f"coordinates {coords} are not in a mesh of shape {self.shape}",
                            hint="give one coordinate per axis, each below the axis size")
        index = 0
        for c, size in zip(coords, self.shape):
            index = index * size + c
        return index

    def device_index(self, device: Any) -> int:
        """The index of ``device``: a device id of this mesh, or else an int index."""
        try:
            return self.devices.index(_normalise_device(device))
        except (ValueError, MeshError):
            pass
        if isinstance(device, int) and not isinstance(device, bool):
            return self._check_index(device)
        raise MeshError(f"device {device!r} is not in {self!r}",
                        hint=f"use a device id such as {self.devices[0]!r} or an index "
                             f"0..{self.size - 1}")

    def rank_in(self, axis: AxisSpec, index: int) -> int:
        """The rank of device ``index`` along ``axis`` (row-major over a tuple of axes)."""
        names = self.axis_tuple(axis)
        c = self.coords(index)
        rank = 0
        for a in names:
            p = self.axis_position(a)
            rank = rank * self.shape[p] + c[p]
        return rank

    def groups(self, axis: AxisSpec) -> list[list[int]]:
        """The device indices of every group along ``axis``, each list in rank order.

        A group is the set of devices whose coordinates agree on every other axis; the
        groups are ordered by the lowest device index they contain.
        """
        names = self.axis_tuple(axis)
        found: dict[tuple[int, ...], list[int]] = {}
        others = [p for p, a in enumerate(self.axes) if a not in names]
        for i in range(self.size):
            c = self.coords(i)
            found.setdefault(tuple(c[p] for p in others), []).append(i)
        return [sorted(g, key=lambda i: self.rank_in(names, i)) for g in found.values()]

    def group_of(self, axis: AxisSpec, index: int) -> list[int]:
        """The group along ``axis`` that contains device ``index``, in rank order."""
        index = self._check_index(index)
        return next(g for g in self.groups(axis) if index in g)

    def _check_index(self, index: Any) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or \
                not 0 <= index < self.size:
            raise MeshError(f"device index {index!r} is not in 0..{self.size - 1}",
                            hint="use mesh.device_index(device) to look an id up")
        return index


def _size(s: Any) -> int:
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or int(s) < 1:
        raise MeshError(f"mesh axis size {s!r} is not a positive int",
                        hint="every axis size must be an int >= 1")
    return int(s)


@user_api
def mesh(devices: Iterable[Any] | None = None, axes: AxisSpec = ("x",),
         shape: Sequence[int] | None = None) -> Mesh:
    """Build a :class:`Mesh`; the same value as ``Mesh(axes=..., devices=..., shape=...)``."""
    return Mesh(axes=axes, devices=devices, shape=shape)


__all__ = ["NVL72_FACTORS", "AxisSpec", "Device", "Mesh", "mesh"]
