"""What a Tile IR value becomes in Target IR: the lowered-value records.

* :class:`Scalar` — one register per thread (a loop index, ``tile_m``, a scalar of a
  scalar kernel). In a block kernel every thread of the CTA holds the same value.
* :class:`Dist` — a tensor spread over the CTA's threads by a layout
  (:mod:`tessera.lower.layout`): the registers this thread owns, in layout order.
* :class:`Mem` — a view of global or shared memory: a base address register, a
  dynamic element offset, static shape and strides (in elements).
* :class:`Indexed` — a tensor that is a function of its element coordinates (an
  ``arange``, the masks built from it): each thread computes the elements it needs, in
  whatever layout their consumer holds (:mod:`tessera.lower.rules.masked`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Value
from tessera.numerics import Element, storage_of

#: Tessera storage format -> PTX register type of one element in registers. Floats
#: narrower than f32 live in f32 registers holding a value of their format (their
#: arithmetic computes in f32 and rounds back, as the tile interpreter does).
REG_OF = {"float32": "f32", "float64": "f64", "int64": "s32", "int32": "s32", "bool": "pred",
          "bfloat16": "f32", "float16": "f32", "int8": "s32", "uint8": "u32",
          "float8_e4m3fn": "f32", "float8_e5m2": "f32"}
#: PTX type used to move one element of a format through memory
MEM_OF = {"float32": "f32", "float64": "f64", "int64": "s64", "int32": "s32", "bool": "u8",
          "bfloat16": "b16", "float16": "b16", "int8": "s8", "uint8": "u8",
          "float8_e4m3fn": "b8", "float8_e5m2": "b8"}
#: the PTX element name of a format in the tile building blocks' boxes and tensor maps
#: (their sizes are :data:`tessera.lower.tiles.ELEM_BYTES`); mma keeps the float kinds apart
ELEM_OF = {"float32": "f32", "float64": "f64", "int64": "s64", "int32": "s32", "bool": "u8",
           "bfloat16": "bf16", "float16": "f16", "int8": "s8", "uint8": "u8",
           "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
#: the PTX ``cvt`` name of a narrow float format (its element name)
NARROW = {name: ELEM_OF[name] for name in ("bfloat16", "float16", "float8_e4m3fn",
                                           "float8_e5m2")}


def storage_name(element: Element) -> str:
    """The storage dtype name of a Tessera element (``float32``, ``bfloat16``...)."""
    return storage_of(element).np_dtype.name


def reg_type(element: Element, where: str = "") -> str:
    """The register type a value of ``element`` lives in (indices are 32-bit)."""
    name = storage_name(element)
    if name not in REG_OF:
        raise UnsupportedError(f"{where}the PTX backend has no registers for {element}",
                               hint="use f32, bf16, f16, fp8, int or bool values")
    return REG_OF[name]


def mem_type(element: Element) -> str:
    """The PTX load/store type of one element of ``element`` in memory."""
    return MEM_OF[storage_name(element)]


def elem_bytes(element: Element) -> int:
    """Bytes of one stored element of ``element``."""
    return int(storage_of(element).np_dtype.itemsize)


def ptx_elem(element: Element) -> str:
    """The PTX element name (:data:`ELEM_OF`) of ``element`` in a copied or multiplied box."""
    name = storage_name(element)
    if name not in ELEM_OF:
        raise UnsupportedError(f"the PTX backend does not copy or multiply {element} tiles",
                               hint="use f32, f64, bf16, f16, fp8, int or bool tiles")
    return ELEM_OF[name]


@dataclass
class Scalar:
    """One register (``type`` is its PTX type)."""

    reg: Value
    type: str


@dataclass
class Dist:
    """A distributed tensor: ``regs[i]`` is this thread's ``i``-th element of
    ``layout``; ``type`` is the PTX register type of every element."""

    layout: Any
    regs: list[Value]
    type: str


@dataclass
class Mem:
    """A memory view: ``base`` (``u64`` global / ``u32`` shared address of element 0 of
    the underlying buffer), ``offset`` (an ``s32`` register of elements, or None for
    0) and static ``shape``/``strides`` in elements. ``buffer`` names the shared buffer
    or global parameter, ``swizzle`` the shared buffer's swizzle span in bytes;
    ``align`` is a number of bytes the view's first element's address is sure to be a
    multiple of (:mod:`tessera.lower.multiples`)."""

    space: str
    base: Value
    offset: Value | None
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    element: Element
    buffer: str = ""
    swizzle: int = 0
    transposed: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    align: int = 1

    @property
    def contiguous_rows(self) -> bool:
        """Row-major with unit inner stride (what async copies and ``ldmatrix`` need)."""
        return not self.transposed and (not self.strides or self.strides[-1] == 1)


@dataclass
class Indexed:
    """A tensor of ``shape`` whose element is ``at(emitter, coord)``: ``coord(axis)``
    gives that element's ``s32`` coordinate along ``axis``, and ``at`` emits the
    element's computation and returns its register (of PTX type ``type``). ``trend``
    is what is known of it along its last axis: ``flat`` (constant), ``rise``
    (non-decreasing), ``fall`` (non-increasing: a bool tile whose true elements come
    first in each row, as ``offs < n`` is) or ``""`` (nothing)."""

    shape: tuple[int, ...]
    at: Callable[[Any, Callable[[int], Value]], Value]
    type: str
    trend: str = ""


Lowered = Scalar | Dist | Mem | Indexed

__all__ = ["ELEM_OF", "MEM_OF", "NARROW", "REG_OF", "Dist", "Indexed", "Lowered", "Mem",
           "Scalar", "elem_bytes", "mem_type", "ptx_elem", "reg_type", "storage_name"]
