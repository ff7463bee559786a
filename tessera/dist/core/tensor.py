"""Distributed tensors: a global value held as per-device shards of a simulated mesh.

Along every mesh axis a :class:`DistTensor` is in one of three placement states:

* ``"sharded"``: the layout (a :class:`ShardSpec`) splits a dim over the axis; each
  device along it holds its ``numpy.array_split`` piece;
* ``"replicated"``: every device along the axis holds the same values;
* ``"partial"``: each device along the axis holds its own summand, and the global value
  is their sum in rank order (what a matmul over a sharded contraction dim leaves).
  Over several partial axes the summands are added in device-index order (row-major
  over the partial axes in mesh axis order), as ``all_reduce(t, t.partial_axes)`` does.
  It is also the state in which devices hold values of their own: ``broadcast`` takes
  one device's, ``ppermute`` moves them, ``all_reduce(op="max")`` combines them.

Devices that hold the same values hold the *same array object*: a shard is looked up by
its *block key*, the device's coordinates on the sharded and partial axes (0 on the
replicated ones), and each block is made once. Blocks are read-only. A tensor built from
one global array serves its shards as views of that array; a tensor without data makes
each block as zeros on first access, so a 10^6 x 10^6 tensor is metadata only.

Making values is bounded: a global value (``np.asarray``) or a lazy tensor's block of
more than ``DistTensor.max_materialize_bytes`` (8 GiB) is a :class:`MaterializeError` that names its
size, raised before anything is allocated (not NumPy's MemoryError, or a machine that
starts swapping).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import DimAxes, ShardSpec, device_slices
from tessera.errors import MaterializeError, MeshError, ShapeError, user_api
from tessera.frontend.graph.arraylike import Operators
from tessera.frontend.graph.dist_arg import DistValue
from tessera.mesh_checks import as_tuple
from tessera.numerics import Element, storage_of

SHARDED, REPLICATED, PARTIAL = "sharded", "replicated", "partial"
BlockKey = tuple[int, ...]
BlockSource = Callable[[BlockKey], np.ndarray]


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself when it is read-only already).

    A view, never a flag flip on ``a``: an array the user handed in stays writeable for
    the user, while no shard handed out can write into the shared memory. A NumPy
    scalar (what indexing a 0-d block with ``()`` gives) becomes a 0-d array.
    """
    a = np.asarray(a)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


class DistTensor(DistValue, Operators):
    """A tensor distributed over a :class:`Mesh` (build it with ``dist.tensor``,
    ``dist.from_numpy`` or ``dist.from_shards``; the collectives return new ones).

    ``np.asarray(t)`` is the global value (the rank-order sum of the summands when the
    tensor is partial). ``t.shard(device)`` is one device's local array.

    ``+ - * / ** @``, unary ``-`` and the comparisons are the ``ts.*`` operators: each
    is placed by shard propagation (with the collectives it needs) and run on the
    mesh, with the bits one device would compute; the result is a DistTensor. Like a
    NumPy array, a DistTensor is not hashable.
    """

    __slots__ = ("_blocks", "_dim_axes", "_dims", "_element", "_global", "_mesh",
                 "_partial", "_shape", "_source")
    __array_priority__ = 1000
    #: The most bytes one global value or lazy block may take when it is made (8 GiB);
    #: raise it (``dist.DistTensor.max_materialize_bytes = 64 << 30``) on a larger machine.
    max_materialize_bytes: int = 8 << 30

    @user_api
    def __init__(self, shape: Sequence[int], element: Element, mesh: Mesh,
                 dim_axes: DimAxes, *, partial: Sequence[str] = (),
                 dims: Sequence[str | None] | None = None,
                 global_array: np.ndarray | None = None,
                 source: BlockSource | None = None) -> None:
        """Internal: the constructors in :mod:`tessera.dist.core.construct` check inputs.

        Give ``global_array`` (non-partial data, served as views), or ``source`` (a
        function from block key to block), or neither (every block is zeros).
        """
        self._shape, self._dim_axes = _checked(shape, mesh, dim_axes)
        self._element = element
        self._mesh = mesh
        self._partial = tuple(a for a in mesh.axes if a in set(partial))
        self._dims = None if dims is None else tuple(dims)
        self._global = None if global_array is None else frozen(global_array)
        self._source = source
        self._blocks: dict[BlockKey, np.ndarray] = {}

    # -- metadata -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The global shape."""
        return self._shape

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self._shape)

    @property
    def element(self) -> Element:
        """The element type: a DType or a numerics Policy (``bf16 @accum(f32)``)."""
        return self._element

    @property
    def dtype(self) -> Any:
        """The storage format (a tessera DType)."""
        return storage_of(self._element)

    @property
    def mesh(self) -> Mesh:
        """The mesh the tensor lives on."""
        return self._mesh

    @property
    def dims(self) -> tuple[str | None, ...] | None:
        """The dim names given at construction (for ShardSpecs that name dims), or None."""
        return self._dims

    @property
    def dim_axes(self) -> DimAxes:
        """For every dim, the mesh axes that split it (empty when unsharded)."""
        return self._dim_axes

    @property
    def layout(self) -> ShardSpec:
        """The layout in normal form: int dims in increasing order."""
        return ShardSpec.from_dim_axes(self._dim_axes)

    @property
    def partial_axes(self) -> tuple[str, ...]:
        """The axes along which the tensor is partial, in mesh axis order."""
        return self._partial

    @property
    def sharded_axes(self) -> tuple[str, ...]:
        """The axes that split some dim, in mesh axis order."""
        used = {a for axes in self._dim_axes for a in axes}
        return tuple(a for a in self._mesh.axes if a in used)

    def placement(self, axis: str) -> str:
        """``"sharded"``, ``"replicated"`` or ``"partial"`` along ``axis``."""
        self._mesh.axis_position(axis)
        if axis in self._partial:
            return PARTIAL
        return SHARDED if axis in self.sharded_axes else REPLICATED

    @property
    def placements(self) -> tuple[str, ...]:
        """The placement along each mesh axis, in mesh axis order."""
        return tuple(self.placement(a) for a in self._mesh.axes)

    def replicated_over(self, axis: str) -> bool:
        """True when every device along ``axis`` holds the same values."""
        return self.placement(axis) == REPLICATED

    def sharded_dim(self, axis: str) -> int | None:
        """The dim that ``axis`` splits, or None."""
        self._mesh.axis_position(axis)
        return next((d for d, axes in enumerate(self._dim_axes) if axis in axes), None)

    @property
    def nbytes(self) -> int:
        """Bytes of the global value (whether or not any of it is allocated)."""
        return int(np.prod(self._shape, dtype=np.int64)) * self.dtype.np_dtype.itemsize

    @property
    def materialized_nbytes(self) -> int:
        """Bytes this tensor holds now: its global array, or its blocks made so far."""
        if self._global is not None:
            return int(self._global.nbytes)
        seen = {id(b): b.nbytes for b in self._blocks.values()}
        return int(sum(seen.values()))

    @property
    def backing(self) -> np.ndarray | None:
        """The one global array whose views are the shards, or None (blocks held apart)."""
        return self._global

    @property
    def is_lazy(self) -> bool:
        """True when the tensor has no data: every block is zeros made on first access."""
        return self._global is None and self._source is None

    def __repr__(self) -> str:
        where = ", ".join(f"{a}: {self._describe(a)}" for a in self._mesh.axes)
        return f"DistTensor(shape={self._shape}, element={self._element}, {where})"

    def _repr_html_(self) -> str:  # a notebook shows which device holds which block
        from tessera.explain.notebook import dist_html

        return dist_html(self)

    def _describe(self, axis: str) -> str:
        p = self.placement(axis)
        return f"sharded(dim {self.sharded_dim(axis)})" if p == SHARDED else p

    # -- devices and blocks ---------------------------------------------------------
    def block_key(self, index: int) -> BlockKey:
        """The key of the block device ``index`` holds (equal keys: the same array)."""
        varying = set(self.sharded_axes) | set(self._partial)
        c = self._mesh.coords(index)
        return tuple(ci if a in varying else 0 for a, ci in zip(self._mesh.axes, c))

    def block_keys(self) -> list[BlockKey]:
        """Every distinct block key, in device order of their first holder."""
        varying = set(self.sharded_axes) | set(self._partial)
        ranges = [range(s) if a in varying else range(1)
                  for a, s in zip(self._mesh.axes, self._mesh.shape)]
        return list(itertools.product(*ranges))

    def region(self, key: BlockKey) -> tuple[slice, ...]:
        """The global region a block covers."""
        return device_slices(self._dim_axes, self._shape, self._mesh, self._mesh.index(key))

    def block(self, key: BlockKey) -> np.ndarray:
        """The block with this key, made on first access (read-only)."""
        got = self._blocks.get(key)
        if got is None:
            if self._global is not None:
                # A 0-d array indexed with () would be a NumPy scalar: keep the array.
                got = self._global[self.region(key)] if self._global.ndim else self._global
            elif self._source is not None:
                got = frozen(self._source(key))
            else:
                shape = tuple(s.stop - s.start for s in self.region(key))
                got = frozen(self._allocate(shape, np.zeros, f"block {key} of"))
            self._blocks[key] = got
        return got

    def shard(self, device: Any) -> np.ndarray:
        """The local array of ``device`` (a device id of the mesh, or an index)."""
        return self.block(self.block_key(self._mesh.device_index(device)))

    def local_shape(self, device: Any) -> tuple[int, ...]:
        """The shape of ``device``'s shard (no data is made)."""
        return tuple(s.stop - s.start for s in self.slices(device))

    def offsets(self, device: Any) -> tuple[int, ...]:
        """Where ``device``'s shard starts in the global array, per dim."""
        return tuple(s.start for s in self.slices(device))

    def slices(self, device: Any) -> tuple[slice, ...]:
        """The global region ``device``'s shard covers."""
        return device_slices(self._dim_axes, self._shape, self._mesh,
                             self._mesh.device_index(device))

    @property
    def shards(self) -> ShardList:
        """The per-device shards, in device-index order, each made on first access."""
        return ShardList(self)

    # -- the global value -----------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The global value in the storage format (read-only when it is held as is)."""
        if self._global is not None:
            return self._global
        if self.is_lazy:  # a tensor made without data holds zeros
            return self._allocate(self._shape, np.zeros, "the global value of")
        # the simulator's rank-order sum: the runtime sits above the values it runs on
        from tessera.mesh_sim.reduce import reduce_in_order

        out = self._allocate(self._shape, np.empty, "the global value of")
        pos = [self._mesh.axis_position(a) for a in self._partial]
        for key in self.block_keys():
            if any(key[p] for p in pos):
                continue  # the block is one summand; it is added with rank 0's below
            summands = [self.block(self._with(key, pos, c))
                        for c in itertools.product(*(range(self._mesh.shape[p]) for p in pos))]
            out[self.region(key)] = reduce_in_order(summands, self._element)
        return out

    def _allocate(self, shape: tuple[int, ...], make: Callable[..., np.ndarray], what: str
                  ) -> np.ndarray:
        """A new array of ``shape`` in the storage format, its size checked first."""
        itemsize = self.dtype.np_dtype.itemsize
        nbytes = math.prod(shape) * itemsize
        limit = DistTensor.max_materialize_bytes
        if nbytes > limit:
            raise MaterializeError(
                f"{what} a DistTensor of shape {self._shape} ({self._element}) would take "
                f"{nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB), more than the "
                f"{limit / 2**30:g} GiB limit",
                hint="work on smaller pieces (t.shard(device) reads one device's "
                     "block), or raise dist.DistTensor.max_materialize_bytes if "
                     "the machine has that much memory")
        try:
            return make(shape, self.dtype.np_dtype)
        except MemoryError:
            raise MaterializeError(f"{what} a DistTensor of shape {self._shape} needs "
                                   f"{nbytes:,} bytes, which this machine cannot allocate",
                                   hint="read single shards (t.shard(device))") from None

    @staticmethod
    def _with(key: BlockKey, positions: list[int], coords: tuple[int, ...]) -> BlockKey:
        k = list(key)
        for p, c in zip(positions, coords):
            k[p] = c
        return tuple(k)

    def __bool__(self) -> bool:
        """The truth of a one-element tensor (``if a < b:``); any other is refused."""
        if math.prod(self._shape) != 1:
            raise ShapeError(f"bool() of a DistTensor of shape {self._shape}: only a tensor "
                             "with one element has a single truth value",
                             hint="reduce it first (ts.max, ts.sum), or test the global "
                                  "value: np.asarray(t).all()")
        return bool(self.numpy().reshape(()))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        if dtype is not None and np.dtype(dtype) != out.dtype:
            return out.astype(dtype)
        return out.copy() if copy else out


def _checked(shape: Any, mesh: Any, dim_axes: Any) -> tuple[tuple[int, ...], DimAxes]:
    """The shape and layout of a directly built DistTensor, in their normal form."""
    hint = "build distributed tensors with dist.tensor, dist.from_numpy or dist.from_shards"
    if not isinstance(mesh, Mesh):
        raise MeshError(f"a DistTensor needs a dist.Mesh, got {type(mesh).__name__}", hint=hint)
    sizes = as_tuple(shape, "shape", MeshError, hint)
    layout = as_tuple(dim_axes, "dim_axes", MeshError, hint)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
               for n in sizes) or len(layout) != len(sizes) or not all(
            isinstance(d, (tuple, list)) and all(isinstance(a, str) and a in mesh.axes
                                                 for a in d) for d in layout):
        raise MeshError(f"shape {shape!r} and dim_axes {dim_axes!r} do not describe a tensor "
                        f"on {mesh!r}", hint=hint)
    return tuple(int(n) for n in sizes), tuple(tuple(d) for d in layout)


class ShardList(Sequence[np.ndarray]):
    """The shards of a DistTensor by device index; each is made when first indexed."""

    def __init__(self, tensor: DistTensor) -> None:
        self._t = tensor

    def __len__(self) -> int:
        return self._t.mesh.size

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._t.shard(k) for k in range(len(self))[i]]
        if not isinstance(i, int) or not -len(self) <= i < len(self):
            raise MeshError(f"shard index {i!r} is not in 0..{len(self) - 1}",
                            hint="index shards by device index")
        return self._t.block(self._t.block_key(i % len(self)))

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))


__all__ = ["PARTIAL", "REPLICATED", "SHARDED", "BlockKey", "DistTensor", "ShardList",
           "frozen"]
