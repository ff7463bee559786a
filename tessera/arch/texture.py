"""The texture unit's fetch, as the CUDA C++ Programming Guide's "Texture Fetching"
appendix describes it and the PTX ISA's ``tex`` instruction (sec. 9.7.10.3) reads it,
and surfaces, the raw byte loads and stores of ``suld.b``/``sust.b`` (sec. 9.7.11).

A texture is 1-, 2- or 3-D texels of one to four channels of one type. A fetch at float
coordinates (``tex1D``, ``tex2D``, ``tex3D``):

1. scales normalized coordinates by the texture's size (after ``wrap`` takes their
   fractional part, or ``mirror`` reflects it, which only normalized coordinates allow);
2. with ``point`` filtering, takes the texel ``floor(x)``; with ``linear`` filtering, the
   texels ``floor(x - 0.5)`` and the next, weighted by the fraction of ``x - 0.5``
   rounded to the guide's 9-bit fixed point of 8 fractional bits (a multiple of 1/256);
3. maps each texel index outside the texture by the address mode: ``clamp`` to the edge,
   ``border`` to the border colour, ``wrap`` around, ``mirror`` reflected;
4. reads each channel as its element type, or with ``normalized`` reads (8- and 16-bit
   integers) as a float: an unsigned ``v / (2^n - 1)``, a signed ``max(v / (2^(n-1) - 1),
   -1)``.

A fetch at integer coordinates (``tex1Dfetch``) takes the texel at the index, the address
mode applied; a texture of linear memory has ``border`` addressing with zeros, so that
an index outside it reads zeros.

Linear filtering interpolates in float32, along x first, then y, then z, each step
``(1 - a) * t0 + a * t1`` with each product and the sum rounded: the guide gives the
formula and the weights' precision, not the order of the rounding inside the unit, so a
GPU's last bit may differ where the product is not exact (weights are multiples of 1/256,
so small integers and halves filter exactly). Channels a format lacks read as 0 (the
public documents do not say what a GPU returns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: address modes (cudaTextureAddressMode's order)
ADDRESS_MODES = ("wrap", "clamp", "mirror", "border")
FILTERS = ("point", "linear")
READS = ("element", "normalized")


@dataclass(frozen=True, eq=False)
class Texture:
    """A texture object: ``data`` is (depth, height, width, channels) texels of the
    channel type (a view of the memory it reads, so later writes are seen), ``dims`` its
    dimensionality (1-3)."""

    data: np.ndarray
    dims: int
    address: tuple[str, str, str] = ("clamp", "clamp", "clamp")
    filter: str = "point"
    read: str = "element"
    normalized_coords: bool = False
    border: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def problem(self) -> str | None:
        """Why a GPU would refuse this texture object, or None."""
        kind = self.data.dtype.kind
        if self.data.ndim != 4 or not 1 <= self.data.shape[3] <= 4 or self.dims not in (1, 2, 3):
            return "a texture has 1 to 3 dimensions of 1 to 4 channels"
        if any(a not in ADDRESS_MODES for a in self.address) or self.filter not in FILTERS \
                or self.read not in READS:
            return f"unknown mode: address {self.address}, filter {self.filter!r}, " \
                   f"read {self.read!r}"
        if self.read == "normalized" and (kind == "f" or self.data.dtype.itemsize > 2):
            return "normalized reads take 8- and 16-bit integer channels"
        if self.filter == "linear" and kind != "f" and self.read != "normalized":
            return "linear filtering needs float results: float channels, or normalized " \
                   "reads of integer ones"
        if not self.normalized_coords and any(a in ("wrap", "mirror")
                                              for a in self.address[:self.dims]):
            return "wrap and mirror addressing need normalized coordinates"
        return None

    @property
    def float_result(self) -> bool:
        """Whether fetches return floats (``tex.*.f32``) rather than integers."""
        return self.data.dtype.kind == "f" or self.read == "normalized"

    def size(self, axis: int) -> int:
        """Texels along ``axis`` (0 x, 1 y, 2 z)."""
        return int(self.data.shape[2 - axis])

    def fetch(self, coords: Sequence[np.ndarray]) -> np.ndarray:
        """The four channels (n, 4) fetched at float32 ``coords`` (one array per
        dimension): float32 where :attr:`float_result`, else int64 values."""
        taps: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per axis: (index, weight)
        for axis in range(self.dims):
            x = np.asarray(coords[axis], np.float32)
            n = self.size(axis)
            mode = self.address[axis]
            if self.normalized_coords:
                if mode == "wrap":
                    x = x - np.floor(x)
                elif mode == "mirror":
                    whole = np.floor(x)
                    x = np.where(whole % 2 == 0, x - whole, np.float32(1) - (x - whole))
                x = (x * np.float32(n)).astype(np.float32)
            if self.filter == "point":
                taps.append([(np.floor(x), np.ones_like(x))])
            else:
                xb = (x - np.float32(0.5)).astype(np.float32)
                i = np.floor(xb)
                a = (np.rint((xb - i) * np.float32(256)) / np.float32(256)).astype(np.float32)
                taps.append([(i, np.float32(1) - a), (i + 1, a)])
        return self._combine(taps)

    def fetch_index(self, index: Sequence[np.ndarray]) -> np.ndarray:
        """The four channels (n, 4) at integer texel indices (one array per dimension,
        ``tex1Dfetch``'s), no filtering, the address modes applied."""
        return self._texel([np.asarray(i, np.int64) for i in index])

    def _combine(self, taps: list[list[tuple[np.ndarray, np.ndarray]]]) -> np.ndarray:
        """The taps' texels, interpolated along x first, then y, then z."""
        def value(axis: int, chosen: list[np.ndarray]) -> np.ndarray:
            if axis < 0:
                return self._texel(chosen)
            parts = [(value(axis - 1, [i, *chosen]), w) for i, w in taps[axis]]
            if len(parts) == 1:
                return parts[0][0]
            (t0, w0), (t1, w1) = parts
            return (w0[:, None] * t0 + w1[:, None] * t1).astype(np.float32)

        # the innermost axis is x: recurse from z down so x varies fastest
        return value(self.dims - 1, [])

    def _texel(self, index: list[np.ndarray]) -> np.ndarray:
        """The texels at per-axis indices (x first), address modes applied."""
        outside = np.zeros(len(index[0]), bool)
        fixed = []
        for axis, i in enumerate(index):
            n, mode = self.size(axis), self.address[axis]
            i = i.astype(np.int64)
            if mode == "wrap":
                i = i % n
            elif mode == "mirror":
                period = i % (2 * n)
                i = np.where(period < n, period, 2 * n - 1 - period)
            elif mode == "border":
                outside |= (i < 0) | (i >= n)
            fixed.append(np.clip(i, 0, n - 1))
        while len(fixed) < 3:
            fixed.append(np.zeros_like(fixed[0]))
        texels = self._read(fixed[2], fixed[1], fixed[0])
        if outside.any():
            border = np.asarray(self.border, texels.dtype)
            texels = np.where(outside[:, None], border, texels)
        return texels

    def _read(self, z: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """(n, 4) channel values at the texels, as the read mode gives them."""
        raw = self.data[z, y, x]  # (n, channels)
        out_type = np.float32 if self.float_result else np.int64
        out = np.zeros((len(x), 4), out_type)
        if self.read == "normalized":
            bits = 8 * self.data.dtype.itemsize
            if self.data.dtype.kind == "u":
                values = raw.astype(np.float32) / np.float32(2 ** bits - 1)
            else:
                values = np.maximum(raw.astype(np.float32) / np.float32(2 ** (bits - 1) - 1),
                                    np.float32(-1))
        else:
            values = raw.astype(out_type)
        out[:, :raw.shape[1]] = values
        return out


#: what an access outside a surface does (PTX ISA, "suld", "sust"): fault, take the
#: nearest location, or read zeros and drop stores
SURFACE_MODES = ("trap", "clamp", "zero")


@dataclass(frozen=True, eq=False)
class Surface:
    """A surface object: ``data`` is (depth, height, row bytes) of the array it reads
    and writes (a view of its memory), ``dims`` its dimensionality (1-3). Surface
    instructions move raw bytes (``suld.b``, ``sust.b``): the x coordinate is a byte
    offset into a row, y a row and z a slice."""

    data: np.ndarray
    dims: int

    def locate(self, coords: Sequence[np.ndarray], nbytes: int, mode: str
               ) -> tuple[np.ndarray, np.ndarray, tuple[int, str] | None]:
        """(flat byte offsets of each access, which are inside the surface, and the
        first faulting access with why, or None) for ``nbytes``-byte accesses at
        ``coords`` (x in bytes) under ``mode``: ``clamp`` moves each coordinate to the
        nearest inside."""
        depth, height, row = self.data.shape
        x = np.asarray(coords[0], np.int64)
        y = np.asarray(coords[1], np.int64) if self.dims > 1 else np.zeros_like(x)
        z = np.asarray(coords[2], np.int64) if self.dims > 2 else np.zeros_like(x)
        if np.any(x % nbytes):
            k = int(np.flatnonzero(x % nbytes)[0])
            return x, np.zeros(len(x), bool), (k, f"byte offset x = {int(x[k])} is not a "
                                                  f"multiple of the {nbytes}-byte access")
        inside = (x >= 0) & (x + nbytes <= row) & (y >= 0) & (y < height) & (z >= 0) & \
            (z < depth)
        if mode == "trap" and not inside.all():
            k = int(np.flatnonzero(~inside)[0])
            at = ", ".join(str(int(c[k])) for c in (x, y, z)[:self.dims])
            return x, inside, (k, f"({at}) lies outside the surface of {row} bytes by "
                                  f"{height} rows by {depth} slices")
        if mode == "clamp":
            x = np.clip(x, 0, row - nbytes)
            y, z = np.clip(y, 0, height - 1), np.clip(z, 0, depth - 1)
            inside = np.ones(len(x), bool)
        flat = (np.clip(z, 0, depth - 1) * height + np.clip(y, 0, height - 1)) * row + \
            np.clip(x, 0, row - nbytes)
        return flat, inside, None

    def load(self, flat: np.ndarray, inside: np.ndarray, nbytes: int) -> np.ndarray:
        """The bytes (n, nbytes) at ``flat``; zeros where not ``inside``."""
        raw = self.data.reshape(-1)[flat[:, None] + np.arange(nbytes)]
        return np.where(inside[:, None], raw, 0).astype(np.uint8)

    def store(self, flat: np.ndarray, inside: np.ndarray, data: np.ndarray) -> None:
        """Write ``data`` (n, nbytes) at ``flat`` where ``inside``, in thread order."""
        view = self.data.reshape(-1)
        span = np.arange(data.shape[1])
        view[flat[inside][:, None] + span] = data[inside]


__all__ = ["ADDRESS_MODES", "FILTERS", "READS", "SURFACE_MODES", "Surface", "Texture"]
