"""Texture and surface objects for ``ts.ptx`` launches: :func:`texture` makes the
argument of a ``cudaTextureObject_t`` parameter (a ``.u64`` handle in PTX) from a NumPy
array and the sampling modes ``cudaCreateTextureObject``'s texture descriptor sets, and
:func:`surface` that of a ``cudaSurfaceObject_t``; the launch gives each a handle, and
its ``tex``, ``suld`` and ``sust`` instructions reach the array through it
(:mod:`tessera.arch.texture`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.arch.texture import ADDRESS_MODES, FILTERS, READS, Surface, Texture
from tessera.errors import ArgumentError

#: the channel types a texture holds (cudaChannelFormatKind with 8 to 32 bits)
CHANNEL_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "float32")
#: the first handle a launch gives a texture argument (CUDA's handles are small integers
#: too; 0 is no texture)
FIRST_HANDLE = 1


@dataclass(frozen=True, eq=False)
class TextureArgument:
    """A texture or surface object to pass as a kernel argument: what :func:`texture`
    and :func:`surface` return."""

    texture: Texture | Surface
    #: the array it was made from, and whether kernels write it (a surface)
    array: np.ndarray | None = None
    writes: bool = False


def texture(array: np.ndarray, *, channels: int = 1, filter: str = "point",
            address: str | Sequence[str] = "clamp", read: str = "element",
            normalized_coords: bool = False,
            border: Sequence[float] = (0.0, 0.0, 0.0, 0.0)) -> TextureArgument:
    """A texture over ``array``: 1-, 2- or 3-D texels (``(width,)``, ``(height,
    width)``, ``(depth, height, width)``), with a last axis of ``channels`` (2 or 4)
    when there is more than one. ``filter`` is ``"point"`` or ``"linear"``, ``address``
    one mode or one per axis (x first) of ``"wrap"``, ``"clamp"``, ``"mirror"``,
    ``"border"``, ``read`` ``"element"`` or ``"normalized"`` (8- and 16-bit integers
    read as floats), as ``cudaTextureDesc`` sets them. The texture reads ``array`` when
    the kernel runs."""
    if not isinstance(array, np.ndarray) or array.dtype.name not in CHANNEL_DTYPES:
        raise ArgumentError("a texture holds a NumPy array of 8- to 32-bit integers, "
                            "float16 or float32", hint=f"not {type(array).__name__} "
                            f"{getattr(array, 'dtype', '')}")
    if channels not in (1, 2, 4) or (channels > 1 and array.shape[-1:] != (channels,)):
        raise ArgumentError(f"channels={channels}: a texture has 1, 2 or 4 channels, the "
                            "last axis of the array when more than one",
                            hint=f"the array's shape is {array.shape}")
    dims = array.ndim - (channels > 1)
    if not 1 <= dims <= 3:
        raise ArgumentError(f"a texture has 1 to 3 dimensions, not {dims}")
    modes = (address,) * 3 if isinstance(address, str) else tuple(address)
    modes = (*modes, *("clamp",) * (3 - len(modes)))
    if len(modes) != 3 or any(m not in ADDRESS_MODES for m in modes):
        raise ArgumentError(f"address {address!r}: one or one per axis of "
                            f"{', '.join(ADDRESS_MODES)}")
    if filter not in FILTERS or read not in READS:
        raise ArgumentError(f"filter {filter!r} and read {read!r}: filter is one of "
                            f"{', '.join(FILTERS)}, read one of {', '.join(READS)}")
    shape = (*(1,) * (3 - dims), *array.shape[:dims], channels)
    tex = Texture(np.ascontiguousarray(array).reshape(shape), dims, modes, filter, read,
                  bool(normalized_coords), tuple(float(b) for b in border))
    if (why := tex.problem()) is not None:
        raise ArgumentError(f"cudaCreateTextureObject would refuse this texture: {why}")
    return TextureArgument(tex, array)


def surface(array: np.ndarray, *, channels: int = 1) -> TextureArgument:
    """A surface over ``array`` (``(width,)``, ``(height, width)`` or ``(depth, height,
    width)`` elements, with a last axis of ``channels`` when there is more than one): the
    kernel's ``suld``/``sust`` read and write the array itself, x a byte offset in a
    row."""
    if not isinstance(array, np.ndarray) or array.dtype.name not in CHANNEL_DTYPES or \
            not array.flags.c_contiguous or not array.flags.writeable:
        raise ArgumentError("a surface is a writeable C-contiguous NumPy array of 8- to "
                            "32-bit integers, float16 or float32")
    dims = array.ndim - (channels > 1)
    if channels not in (1, 2, 4) or not 1 <= dims <= 3 or \
            (channels > 1 and array.shape[-1:] != (channels,)):
        raise ArgumentError(f"a surface has 1 to 3 dimensions of 1, 2 or 4 channels, not "
                            f"shape {array.shape} with channels={channels}")
    rows = array.reshape(*(1,) * (3 - dims), *array.shape[:dims], -1)
    return TextureArgument(Surface(rows.view(np.uint8).reshape(*rows.shape[:2], -1), dims),
                           array, writes=True)


__all__ = ["CHANNEL_DTYPES", "FIRST_HANDLE", "TextureArgument", "surface", "texture"]
