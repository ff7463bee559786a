"""Texture objects of a CUDA program run by ``tessera run-cuda``: what
``cudaCreateTextureObject`` describes (runtime_texture.cpp passes the resource's memory
and the descriptors' fields) as a :class:`tessera.arch.texture.Texture` over that
memory, which kernels then fetch through by handle.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tessera.arch.texture import ADDRESS_MODES, FILTERS, READS, Texture
from tessera.errors import ArgumentError
from tessera.frontend.cuda.memory import host_view

#: cudaChannelFormatKind's signed, unsigned and float kinds, by NumPy kind letter
_KINDS = {0: "int", 1: "uint", 2: "float"}


def channel_dtype(bits: Sequence[int], kind: int) -> tuple[np.dtype, int]:
    """(the NumPy type of one channel, how many channels) of a cudaChannelFormatDesc."""
    used = [b for b in bits if b]
    if kind not in _KINDS or not used or len(used) == 3 or bits[:len(used)] != used or \
            len(set(used)) != 1 or used[0] not in (8, 16, 32) or \
            (kind == 2 and used[0] == 8):
        raise ArgumentError(f"channel format {tuple(bits)} of kind {kind}: a texture's 1, 2 "
                            "or 4 channels are 8-, 16- or 32-bit signed or unsigned "
                            "integers, or 16- or 32-bit floats, all alike")
    return np.dtype(f"{_KINDS[kind]}{used[0]}"), len(used)


def cuda_texture(data: int, strides: tuple[int, int], extent: tuple[int, int, int], dims: int,
                 bits: Sequence[int], kind: int, address: Sequence[int], filter_: int,
                 read: int, normalized: int, border: Sequence[float]) -> Texture:
    """The texture over ``extent`` = (width, height, depth) texels at address ``data``,
    rows ``strides[0]`` bytes apart and slices ``strides[1]``, with the texture
    descriptor's modes (CUDA's enumerations)."""
    dtype, channels = channel_dtype(bits, kind)
    width, height, depth = extent
    if not data or width == 0:
        raise ArgumentError("the resource has no memory or no width")
    if any(not 0 <= a < len(ADDRESS_MODES) for a in address) or \
            not 0 <= filter_ < len(FILTERS) or not 0 <= read < len(READS):
        raise ArgumentError(f"unknown modes: address {tuple(address)}, filter {filter_}, "
                            f"read {read}")
    pitch, slice_ = strides
    element = dtype.itemsize * channels
    texels = host_view(data, (depth, height, width, channels), dtype,
                       (slice_, pitch, element, dtype.itemsize))
    texture = Texture(texels, dims, tuple(ADDRESS_MODES[a] for a in address),
                      FILTERS[filter_], READS[read], bool(normalized),
                      tuple(float(b) for b in border))
    if (why := texture.problem()) is not None:
        raise ArgumentError(why)
    return texture


__all__ = ["channel_dtype", "cuda_texture"]
