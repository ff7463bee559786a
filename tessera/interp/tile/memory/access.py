"""Access plans: the elements a memory op touches in every program, as one NumPy view.

An access is ``array[s_0 : s_0 + n_0, s_1 : s_1 + n_1, ...]`` per program, where the
starts ``s_d`` are program-shaped integer arrays (or plain ints when uniform) and the
sizes ``n_d`` are static. When every start is *affine* in the program coordinates
(``tile_m = g0 * BM``, ``linear_id * 1024``, ...) the whole access across all
programs is one strided view of the array (``as_strided``): no gather, no copy. Other
starts use one advanced-indexing gather. Bounds are always checked first (a strided
view outside the array would read foreign memory).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tessera.interp.tile.fastpaths.memo import ArrayMemo

_AFFINE = ArrayMemo()
#: (min, max) of read-only start arrays, for bounds checks
_RANGES = ArrayMemo()


def _affine(s: np.ndarray) -> tuple[int, dict[int, int]] | None:
    """``s == base + sum(coef[k] * arange along axis k)``? Return (base, coef) or None."""
    return _AFFINE.get(s, None, lambda: _affine_of(s))


#: shared plans (see :meth:`AccessPlan.of`)
_PLANS = ArrayMemo(512, scalar_size=64)


def strided_view(arr: np.ndarray, origin: Any, shape: tuple[int, ...],
                 strides: tuple[int, ...]) -> np.ndarray:
    """The view of ``arr`` from element ``origin`` (one index per axis) with ``shape``
    and byte ``strides``, writeable as ``arr`` is. Through the buffer protocol when
    ``arr`` is contiguous: a tenth of ``as_strided``'s cost, and NumPy checks that the
    strided extent lies inside the array."""
    offset = sum(int(b) * st for b, st in zip(origin, arr.strides))
    if arr.flags.c_contiguous:
        return np.ndarray(shape, arr.dtype, arr, offset, strides)
    out = view_in_owner(arr, offset, shape, strides, arr.flags.writeable)
    if out is not None:
        return out
    return as_strided(arr[tuple(slice(b, None) for b in origin)], shape, strides,
                      writeable=arr.flags.writeable)


def view_in_owner(arr: np.ndarray, offset: int, shape: tuple[int, ...],
                  strides: tuple[int, ...], writeable: bool) -> np.ndarray | None:
    """The view of ``shape`` and byte ``strides`` at ``offset`` bytes from ``arr``'s first
    element, made through the buffer of the C-contiguous array ``arr`` is a view of (a
    tenth of ``as_strided``'s cost; NumPy checks that the extent lies in that buffer),
    or None when there is no such array or the view would not be ``writeable`` as
    asked."""
    owner = arr
    while not owner.flags.c_contiguous:
        owner = owner.base
        if type(owner) is not np.ndarray:
            return None
    if writeable and not owner.flags.writeable:
        return None
    start = arr.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    try:
        out = np.ndarray(shape, arr.dtype, owner, start + offset, strides)
    except (ValueError, TypeError):
        return None
    if not writeable and out.flags.writeable:
        out.flags.writeable = False
    return out


def plain_ints(starts: Any) -> bool:
    """Whether every start is a plain integer (a Python ``int`` or a ``numpy.int64``
    scalar: a loop index, a constant, a coordinate of the sequential schedule's one
    group), so that an access is one window, the same in every program."""
    return all(type(s) is int or type(s) is np.int64 for s in starts)


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """``np.broadcast_shapes`` for a few short shapes, without its overhead."""
    nd = max(len(sh) for sh in shapes)
    out = [1] * nd
    for sh in shapes:
        off = nd - len(sh)
        for k, n in enumerate(sh):
            if n != 1:
                m = out[off + k]
                if m == 1:
                    out[off + k] = n
                elif m != n:
                    raise ValueError(f"shapes {shapes} do not broadcast")
    return tuple(out)


def _affine_of(s: np.ndarray) -> tuple[int, dict[int, int]] | None:
    nd = s.ndim
    origin = int(s[(0,) * nd])
    coef: dict[int, int] = {}
    expect: Any = None
    for k, n in enumerate(s.shape):
        if n > 1:
            one = [0] * nd
            one[k] = 1
            c = int(s[tuple(one)]) - origin
            coef[k] = c
            shape = [1] * nd
            shape[k] = n
            term = (c * np.arange(n, dtype=np.int64)).reshape(shape)
            expect = term + origin if expect is None else expect + term
    # expect broadcasts to s's shape (size-n axes where s has them, 1 elsewhere)
    if expect is not None and not (s == expect).all():
        return None
    return origin, coef


def c_strides(shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * int(shape[d + 1])
    return out


class AccessPlan:
    """The elements of one access in every program: program axes then tile axes."""

    __slots__ = ("affine", "bases", "coefs", "index", "injective_in", "nlead", "pshape",
                 "shape", "sizes", "squeeze", "tile_shape", "windows")

    @classmethod
    def of(cls, starts: list[Any], sizes: tuple[int, ...], squeeze: tuple[int, ...],
           nlead: int, expand: tuple[int, ...] | None = None) -> AccessPlan:
        """``AccessPlan(...)``, shared between accesses whose starts are plain integers or
        read-only arrays (program coordinates) that are the same objects: a kernel's
        accesses at ``local_id()`` or ``tile_m`` then plan once per launch geometry.
        Plans at plain integers have their own small table, which a loop's ``x[i]``
        cycles without evicting the others."""
        return _PLANS.lookup(starts, (sizes, squeeze, nlead, expand),
                             lambda: cls(starts, sizes, squeeze, nlead, expand))

    def __init__(self, starts: list[Any], sizes: tuple[int, ...], squeeze: tuple[int, ...],
                 nlead: int, expand: tuple[int, ...] | None = None) -> None:
        self.sizes = sizes
        self.squeeze = squeeze
        self.nlead = nlead
        self.tile_shape = tuple(n for d, n in enumerate(sizes) if d not in squeeze)
        self.injective_in: dict[tuple[int, ...], bool] = {}
        #: (byte offset, byte strides) of the view in a C-contiguous array, by its strides
        self.windows: dict[tuple[int, ...], tuple[int, tuple[int, ...]]] = {}
        self.index: tuple[np.ndarray, ...] | None = None
        self.affine = True
        if expand is None and plain_ints(starts):
            # one window, the same in every program: the general path below gives the
            # same plan, more slowly
            self.pshape = ()
            self.shape = self.tile_shape
            self.bases = [int(s) for s in starts]
            self.coefs = [{} for _ in starts]
            return
        arrays = [s if isinstance(s, np.ndarray) and s.dtype == np.int64 else
                  np.asarray(s, dtype=np.int64) for s in starts]
        shapes = [a.shape for a in arrays if a.ndim]
        if expand is not None:
            shapes.append(expand)
        pshape = broadcast_shape(shapes) if shapes else ()
        if pshape and len(pshape) != nlead:
            pshape = (1,) * (nlead - len(pshape)) + tuple(pshape)
        self.pshape: tuple[int, ...] = tuple(pshape)
        self.shape = self.pshape + self.tile_shape
        self.bases: list[int] = []
        self.coefs: list[dict[int, int]] = []
        for a in arrays:
            if a.ndim == 0:
                self.bases.append(int(a))
                self.coefs.append({})
                continue
            found = _affine(a)
            if found is None:
                self.affine = False
                break
            self.bases.append(found[0])
            self.coefs.append(found[1])
        if not self.affine:
            self.index = self._gather_index(arrays)

    def _gather_index(self, arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        tile = self.tile_shape
        nt = len(tile)
        index = []
        pos = 0
        for d, (a, n) in enumerate(zip(arrays, self.sizes)):
            s = np.broadcast_to(a, self.pshape) if self.pshape else a
            s = s.reshape(s.shape + (1,) * nt)
            if d in self.squeeze:
                index.append(s)
                continue
            shape = [1] * nt
            shape[pos] = n
            index.append(s + np.arange(n, dtype=np.int64).reshape(shape))
            pos += 1
        return tuple(index)

    # -- realising the plan on an array of the accessed shape
    def view(self, arr: np.ndarray) -> np.ndarray:
        """The accessed elements of ``arr``: a strided view (affine plans) or a copy."""
        if self.index is not None:
            return arr[self.index]
        if arr.flags.c_contiguous:
            # the same view as below, its geometry remembered: plans are shared by every
            # launch, and their arrays (storage, shadows) mostly keep their layout
            window = self.windows.get(arr.strides)
            if window is None:
                window = self.windows[arr.strides] = self._window(arr.strides)
            return np.ndarray(self.shape, arr.dtype, arr, *window)
        if not any(self.coefs) and all(n == 1 for n in self.pshape):  # one window: slicing
            # slices (not ints) on squeezed axes, so the result is a view even at rank 0
            window = arr[tuple(slice(b, b + n) for b, n in zip(self.bases, self.sizes))]
            return window.reshape(self.shape)
        # a view into another array (a shared buffer holding a copied tile): the same
        # geometry, remembered, placed through the buffer that array is a view of
        window = self.windows.get(arr.strides)
        if window is None:
            window = self.windows[arr.strides] = self._window(arr.strides)
        out = view_in_owner(arr, window[0], self.shape, window[1], arr.flags.writeable)
        if out is not None:
            return out
        return strided_view(arr, self.bases, self.shape, window[1])

    def _window(self, strides: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """The byte offset and byte strides of the view in an array of ``strides``."""
        pstrides = [0] * len(self.pshape)
        for coef, stride in zip(self.coefs, strides):
            for k, c in coef.items():
                pstrides[k] += c * stride
        tstrides = [st for d, st in enumerate(strides) if d not in self.squeeze]
        for k, n in enumerate(self.pshape):
            if n == 1:
                pstrides[k] = 0
        offset = sum(int(b) * st for b, st in zip(self.bases, strides))
        return offset, tuple(pstrides) + tuple(tstrides)

    def write(self, arr: np.ndarray, value: Any) -> None:
        """Assign ``value`` (broadcast to the plan's shape) to the accessed elements."""
        if self.index is not None:
            arr[self.index] = value
        else:
            np.copyto(self.view(arr), value, casting="unsafe")

    def write_mask(self, arr: np.ndarray, mask: np.ndarray, value: Any) -> None:
        """Assign ``value`` to the accessed elements at the positions where ``mask``."""
        if self.index is not None:
            arr[tuple(np.broadcast_to(i, self.shape)[mask] for i in self.index)] = value
        else:
            self.view(arr)[mask] = value

    def _steps(self, shape: tuple[int, ...]) -> list[tuple[int, int, int]]:
        """(result axis, count, flat element stride) of every axis of the access."""
        cs = c_strides(shape)
        steps = []
        for k, n in enumerate(self.pshape):
            stride = sum(coef.get(k, 0) * st for coef, st in zip(self.coefs, cs))
            steps.append((k, n, stride))
        pos = len(self.pshape)
        for d, n in enumerate(self.sizes):
            if d not in self.squeeze:
                steps.append((pos, n, cs[d]))
                pos += 1
        return steps

    def offsets(self, shape: tuple[int, ...]) -> np.ndarray:
        """Flat (C-order) element offsets into an array of ``shape``, in plan shape."""
        if self.index is not None:
            out: Any = np.int64(0)
            for idx, st in zip(self.index, c_strides(shape)):
                out = out + idx * st
            return np.broadcast_to(out, self.shape)
        total: Any = np.int64(sum(b * st for b, st in zip(self.bases, c_strides(shape))))
        nd = len(self.shape)
        for axis, n, stride in self._steps(shape):
            if n > 1 and stride:
                sh = [1] * nd
                sh[axis] = n
                total = total + stride * np.arange(n, dtype=np.int64).reshape(sh)
        return np.broadcast_to(total, self.shape)

    def injective(self, shape: tuple[int, ...]) -> bool:
        """Whether no element of an array of ``shape`` is accessed twice.

        In-bounds multi-indices map one-to-one to flat offsets, so it suffices that the
        offsets ``base + sum(j_i * stride_i)`` are distinct: true when, sorted by
        |stride|, each stride clears the span of the smaller ones. Otherwise count.
        """
        known = self.injective_in.get(shape)
        if known is None:
            known = self.injective_in[shape] = self._injective(shape)
        return known

    def _injective(self, shape: tuple[int, ...]) -> bool:
        if self.index is None:
            span = 0
            ok = True
            for _, n, stride in sorted(self._steps(shape), key=lambda s: abs(s[2])):
                if n <= 1:
                    continue
                if stride == 0 or abs(stride) <= span:
                    ok = False
                    break
                span += abs(stride) * (n - 1)
            if ok:
                return True
        offs = self.offsets(shape)
        return int(np.unique(offs).size) == int(offs.size)


def bounds_violation(starts: list[Any], sizes: tuple[int, ...], dims: tuple[int, ...],
                     lead: tuple[int, ...]) -> tuple[int, int] | None:
    """The first (flat program position, axis) whose window leaves ``[0, dim)``."""
    first: tuple[int, int] | None = None
    for d, (s, n, dim) in enumerate(zip(starts, sizes, dims)):
        if getattr(s, "ndim", 0) == 0 or s.size == 1:
            v = int(s) if not getattr(s, "ndim", 0) else int(s.reshape(-1)[0])
            if v < 0 or v + n > dim:
                return (0, d) if first is None or first[0] > 0 else first
            continue
        a = s
        lo, hi = _RANGES.get(a, None, lambda a=a: (int(a.min()), int(a.max())))
        if lo >= 0 and hi + n <= dim:
            continue
        bad = np.flatnonzero(np.broadcast_to((a < 0) | (a + n > dim), lead))
        if bad.size and (first is None or int(bad[0]) < first[0]):
            first = (int(bad[0]), d)
    return first


__all__ = ["AccessPlan", "bounds_violation", "broadcast_shape", "plain_ints", "strided_view",
           "view_in_owner"]
