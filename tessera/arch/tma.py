"""Tensor maps (cuda.h ``cuTensorMapEncodeTiled``) and the TMA tile copies they drive.

A :class:`TensorMap` records the arguments of ``cuTensorMapEncodeTiled``; ``validate``
enforces that function's documented requirements (CUDA Driver API, "Tensor Map Object
Management").  The 128-byte packed ``CUtensorMap`` is opaque and not modelled.

:func:`tma_load` and :func:`tma_store` give the semantics of
``cp.async.bulk.tensor.Nd.shared::cluster.global.tile`` and its store direction (PTX ISA
"cp.async.bulk.tensor" (Data Movement instructions), sec. 5.5 "Tensors"): the box at the given
coordinates (innermost first, signed) is copied to shared memory densely, innermost
dimension fastest, and every byte address is then swizzled as an absolute shared address.
Elements outside the tensor are filled with zero (or NaN with
``NAN_REQUEST_ZERO_FMA``) on a load and skipped on a store.  A load always signals the
full box size to its mbarrier's tx-count, whether or not part of it is out of bounds.

Modelling choices where the documents are silent: the shared box is dense even when its
inner dimension is narrower than the swizzle span; the destination must be 128-byte
aligned; the NaN fill uses NumPy's quiet NaN of the element type.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from tessera.arch.errors import AlignmentError, TensorMapError
from tessera.arch.swizzle import Swizzle, swizzle_address
from tessera.errors import ArgumentError, ShapeError


class TensorMapDataType(enum.IntEnum):
    """``CUtensorMapDataType`` (cuda.h values) for the element types TMA copies here."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9

    @property
    def size(self) -> int:
        """Bytes per element."""
        return {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2}[int(self)]

    @property
    def is_float(self) -> bool:
        """Whether NaN out-of-bounds fill is allowed for this type."""
        return self in (TensorMapDataType.FLOAT16, TensorMapDataType.FLOAT32,
                        TensorMapDataType.FLOAT64, TensorMapDataType.BFLOAT16)


#: PTX element names -> the tensor-map data type TMA copies them as (fp8 and s8 as
#: bytes: cuda.h has no fp8 or int8 type, and a zero fill is the same bytes; 16-bit
#: patterns as UINT16; tf32 values, already rounded in f32 storage, as FLOAT32: the
#: bytes as they are)
PTX_ELEMENT_TYPES: dict[str, TensorMapDataType] = {
    "u8": TensorMapDataType.UINT8, "s8": TensorMapDataType.UINT8,
    "e4m3": TensorMapDataType.UINT8,
    "e5m2": TensorMapDataType.UINT8, "b16": TensorMapDataType.UINT16,
    "u16": TensorMapDataType.UINT16, "u32": TensorMapDataType.UINT32,
    "s32": TensorMapDataType.INT32, "u64": TensorMapDataType.UINT64,
    "s64": TensorMapDataType.INT64, "f16": TensorMapDataType.FLOAT16,
    "f32": TensorMapDataType.FLOAT32, "tf32": TensorMapDataType.FLOAT32,
    "f64": TensorMapDataType.FLOAT64,
    "bf16": TensorMapDataType.BFLOAT16,
}


def tma_data_type(elem: str, where: str = "") -> TensorMapDataType:
    """The tensor-map data type TMA copies PTX element ``elem`` as; ``where`` (such as
    ``"argument 2"``) says which argument the error for an uncopyable element is about."""
    dtype = PTX_ELEMENT_TYPES.get(elem)
    if dtype is None:
        prefix = f"{where}: " if where else ""
        raise ArgumentError(f"{prefix}TMA cannot copy {elem!r} elements: there is no "
                            "tensor-map data type for them",
                            hint=f"use one of {', '.join(PTX_ELEMENT_TYPES)}")
    return dtype


class Interleave(enum.IntEnum):
    """``CUtensorMapInterleave``; only NONE is supported by the copies here."""

    NONE = 0
    B16 = 1
    B32 = 2


class L2Promotion(enum.IntEnum):
    """``CUtensorMapL2promotion``: an L2 fetch-size hint with no effect on values."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class OobFill(enum.IntEnum):
    """``CUtensorMapFloatOOBfill``: zero, or NaN for floating-point types."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


_NAN_DTYPE = {TensorMapDataType.FLOAT16: np.float16, TensorMapDataType.FLOAT32: np.float32,
              TensorMapDataType.FLOAT64: np.float64,
              TensorMapDataType.BFLOAT16: ml_dtypes.bfloat16}


@dataclass(frozen=True)
class TensorMap:
    """The arguments of ``cuTensorMapEncodeTiled``; all dimension lists innermost first.

    ``global_strides`` has ``rank - 1`` byte strides (dimension 0 is dense).
    ``global_address`` is the tensor's global byte address; the copies take a byte
    buffer whose first byte is that address.
    """

    dtype: TensorMapDataType
    global_address: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OobFill = OobFill.NONE

    @property
    def rank(self) -> int:
        """Number of tensor dimensions."""
        return len(self.global_dims)

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides, all ones when not given."""
        return self.element_strides or (1,) * self.rank

    @property
    def smem_box(self) -> tuple[int, ...]:
        """Elements per dimension the box puts in shared memory, innermost first.

        cuda.h: with a traversal stride ``s`` TMA loads ``ceil(boxDim[i] / s)`` elements
        along dimension i; the stride of dimension 0 is ignored without interleave.
        """
        s = self.strides
        return (self.box_dims[0], *(math.ceil(b / e) for b, e in zip(self.box_dims[1:], s[1:])))

    @property
    def box_bytes(self) -> int:
        """Shared bytes one copy writes: the tx-count one load signals to its mbarrier."""
        return math.prod(self.smem_box) * self.dtype.size

    def validate(self) -> TensorMap:
        """Check the rules of ``cuTensorMapEncodeTiled``; return self or raise."""

        def fail(rule: str, hint: str) -> TensorMapError:
            return TensorMapError(f"{rule} (cuda.h cuTensorMapEncodeTiled)", hint=hint)

        r = self.rank
        if not 1 <= r <= 5:
            raise fail(f"tensorRank {r} must be 1..5", "use at most five dimensions")
        if self.interleave is not Interleave.NONE:
            raise fail("interleaved layouts are not supported here", "use Interleave.NONE")
        if self.global_address % 16:
            raise fail(f"globalAddress {self.global_address:#x} must be 16-byte aligned",
                       "allocate the tensor on a 16-byte boundary")
        if len(self.box_dims) != r or len(self.global_strides) != r - 1 or (
                self.element_strides is not None and len(self.element_strides) != r):
            raise fail(f"rank {r} needs {r} box dims, {r - 1} global strides and {r} element "
                       "strides", "give one entry per dimension, innermost first")
        for i, d in enumerate(self.global_dims):
            if not 0 < d <= 1 << 32:
                raise fail(f"globalDim[{i}] = {d} must be in 1..2^32", "check the shape")
        for i, s in enumerate(self.global_strides):
            if s % 16 or not 0 < s < 1 << 40:
                raise fail(f"globalStrides[{i}] = {s} must be a multiple of 16 and < 2^40",
                           "pad rows so every byte stride is a multiple of 16")
        for i, b in enumerate(self.box_dims):
            if not 0 < b <= 256:
                raise fail(f"boxDim[{i}] = {b} must be in 1..256", "use a smaller box")
        inner = self.box_dims[0] * self.dtype.size
        if inner % 16:
            raise fail(f"boxDim[0] * elementSize = {inner} bytes must be a multiple of 16",
                       "widen the innermost box dimension")
        if self.swizzle is not Swizzle.NONE and inner > self.swizzle.span:
            raise fail(f"inner box of {inner} bytes exceeds the {self.swizzle.span}-byte span "
                       f"of the {self.swizzle.name} swizzle",
                       f"use at most {self.swizzle.span // self.dtype.size} inner elements")
        for i, e in enumerate(self.strides):
            if not 0 < e <= 8:
                raise fail(f"elementStrides[{i}] = {e} must be in 1..8", "use strides 1..8")
        if self.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA and not self.dtype.is_float:
            raise fail("NaN out-of-bounds fill needs a floating-point data type",
                       "use OobFill.NONE")
        return self


def _box_offsets(tmap: TensorMap, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global element byte offsets (..., n) of the box and whether each is in bounds."""
    coords = np.asarray(coords, np.int64)
    if coords.shape[-1:] != (tmap.rank,):
        raise ShapeError(f"a rank-{tmap.rank} tensor map needs {tmap.rank} coordinates, "
                         f"got shape {coords.shape}")
    box = tmap.smem_box
    # Innermost dimension fastest in shared memory: grid axes are outermost first.
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in reversed(box)], indexing="ij")
    byte_strides = (tmap.dtype.size, *tmap.global_strides)
    offset = np.zeros((*coords.shape[:-1], math.prod(box)), np.int64)
    inside = np.ones_like(offset, dtype=bool)
    for dim in range(tmap.rank):
        step = tmap.strides[dim] if dim else 1
        pos = coords[..., dim, None] + grids[tmap.rank - 1 - dim].ravel() * step
        inside &= (pos >= 0) & (pos < tmap.global_dims[dim])
        offset += pos * byte_strides[dim]
    return offset, inside


def _smem_addresses(tmap: TensorMap, smem: np.ndarray, addr: int) -> np.ndarray:
    if addr % 128:
        raise AlignmentError(f"TMA shared address {addr} is not 128-byte aligned",
                             hint="align TMA destination buffers to 128 bytes (or more for "
                                  "a swizzle)")
    lin = addr + np.arange(tmap.box_bytes, dtype=np.int64)
    out = swizzle_address(lin, tmap.swizzle)
    if out.max() >= smem.shape[-1]:
        raise ArgumentError(f"the TMA box ends beyond shared memory ({smem.shape[-1]} bytes)")
    return out


def _as_bytes(buffer: np.ndarray) -> np.ndarray:
    b = np.ascontiguousarray(buffer)
    return b.reshape(-1).view(np.uint8)


def tma_load(tmap: TensorMap, global_mem: np.ndarray, coords: np.ndarray, smem: np.ndarray,
             dst_addr: int) -> int:
    """Copy the box at ``coords`` into ``smem`` at ``dst_addr``; return the tx bytes.

    ``global_mem`` is the tensor's memory (any dtype, viewed as bytes from the tensor's
    global address).  ``coords`` may carry leading batch axes matching ``smem``'s
    (``smem``: uint8 of shape ``(..., size)``) to run one copy per CTA.
    """
    data = tma_box(tmap, global_mem, coords)
    dst = _smem_addresses(tmap, smem, dst_addr)
    smem[..., dst] = data
    return tmap.box_bytes


def tma_box(tmap: TensorMap, global_mem: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """The bytes of the box at ``coords`` in box order, before the swizzle places them
    (uint8, ``(..., box_bytes)``): out-of-bounds elements zero, or NaN with
    ``OobFill.NAN_REQUEST_ZERO_FMA``. :func:`tma_load` writes them to shared memory."""
    tmap.validate()
    raw = _as_bytes(global_mem)
    offset, inside = _box_offsets(tmap, coords)
    esize = tmap.dtype.size
    if np.any(inside) and (offset[inside].min() < 0
                           or offset[inside].max() + esize > raw.size):
        raise ArgumentError("the tensor map describes more memory than the global buffer holds",
                            hint="check global dims and strides against the buffer")
    if inside.all():  # the common case: no element of the box outside the tensor
        rows = _box_rows(tmap, raw, offset)
        if rows is not None:
            return rows
        byte = offset[..., None] + np.arange(esize)
        return raw[byte].reshape(*byte.shape[:-2], -1)
    byte = offset[..., None] + np.arange(esize)
    data = np.where(inside[..., None], raw[np.where(inside[..., None], byte, 0)], 0)
    data = data.astype(np.uint8)
    if tmap.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA:
        nan = np.array(np.nan, _NAN_DTYPE[tmap.dtype]).reshape(1).view(np.uint8)
        data = np.where(inside[..., None], data, nan)
    return data.reshape(*data.shape[:-2], -1)


def _box_rows(tmap: TensorMap, raw: np.ndarray, offset: np.ndarray) -> np.ndarray | None:
    """The box's bytes gathered a whole innermost row at a time (its elements are
    consecutive in memory) when every row starts at a multiple of the row's bytes, as
    in a row-major tensor whose row pitch is a multiple of the box's rows; else None."""
    row = tmap.smem_box[0] * tmap.dtype.size
    if raw.size % row:
        return None
    starts = offset[..., :: tmap.smem_box[0]]
    if (starts % row).any():
        return None
    return np.take(raw.reshape(-1, row), starts // row, axis=0).reshape(*offset.shape[:-1], -1)


def tma_store(tmap: TensorMap, smem: np.ndarray, src_addr: int, coords: np.ndarray,
              global_mem: np.ndarray) -> None:
    """Copy the box in ``smem`` at ``src_addr`` to the tensor; out-of-bounds elements skipped.

    ``global_mem`` must be a writable, C-contiguous array; it is updated in place.
    """
    src = _smem_addresses(tmap, smem, src_addr)
    tma_box_store(tmap, global_mem, coords, smem[..., src])


def tma_box_store(tmap: TensorMap, global_mem: np.ndarray, coords: np.ndarray,
                  data: np.ndarray) -> None:
    """Write the box bytes ``data`` (uint8, ``(..., box_bytes)``, box order: the inverse
    of :func:`tma_box`) at ``coords`` of the tensor; out-of-bounds elements are skipped.
    ``global_mem`` must be a writable, C-contiguous array; it is updated in place."""
    tmap.validate()
    if not global_mem.flags.c_contiguous:
        raise ArgumentError("tma_store needs a C-contiguous global buffer")
    raw = global_mem.reshape(-1).view(np.uint8)
    offset, inside = _box_offsets(tmap, coords)
    esize = tmap.dtype.size
    if np.any(inside) and (offset[inside].min() < 0
                           or offset[inside].max() + esize > raw.size):
        raise ArgumentError("the tensor map describes more memory than the global buffer holds",
                            hint="check global dims and strides against the buffer")
    data = np.asarray(data, np.uint8).reshape(*offset.shape, esize)
    byte = offset[..., None] + np.arange(esize)
    raw[byte[inside]] = data[inside]


def row_major_2d(elem: str, address: int, shape: tuple[int, int], box: tuple[int, int],
                 swizzle: int = 0) -> TensorMap:
    """The tensor map of a dense row-major ``(rows, cols)`` array of PTX element ``elem``
    at ``address``, copied in ``box = (rows, cols)`` tiles with a ``swizzle``-byte
    swizzle (0, 32, 64, 128): dimensions innermost first, as cuda.h wants them."""
    dtype = tma_data_type(elem)
    rows, cols = shape
    return TensorMap(dtype, address, (cols, rows), (cols * dtype.size,), (box[1], box[0]),
                     swizzle=Swizzle(swizzle))
