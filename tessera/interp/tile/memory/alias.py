"""Kernel arguments that share memory: found at launch, checked as one memory.

A launch may pass overlapping arrays as two parameters (``k(a, a)``, ``k(a[1:], a)``).
On a GPU both pointers reach the same bytes, so a tile that reads through one what
another tile writes through the other is a race, while a tile that reads and writes
only its own elements is fine (an in-place update). The simulator keeps that meaning:
the sanitizer shadows of overlapping parameters (owner, reader, epochs, last reducing
group) are views of one shadow buffer laid over the bytes they cover, so a write
through one parameter is seen by the checks of a read through the other, and every
schedule reports the same race.

The shadow buffer holds one int32 per *unit*: the greatest common divisor of the
arrays' item sizes, strides and relative offsets, so that every element of every
member starts on a unit (for arrays of one dtype, a unit is an element).
"""

from __future__ import annotations

import math

import numpy as np

#: the per-element shadows of a global tensor and the value that means "nobody"
SHADOWS = {"owner": -1, "owner_epoch": 0, "reader": -1, "reader_group": -1,
           "reader_epoch": 0, "last_group": -1}


def _extent(a: np.ndarray) -> tuple[int, int]:
    """The lowest and one past the highest byte address that ``a`` covers."""
    lo = hi = a.__array_interface__["data"][0]
    for n, s in zip(a.shape, a.strides):
        if n > 1:
            if s < 0:
                lo += s * (n - 1)
            else:
                hi += s * (n - 1)
    return lo, hi + a.itemsize


def alias_groups(arrays: list[np.ndarray | None],
                 written: list[bool] | None = None) -> list[list[int]]:
    """Indices of the arrays whose byte ranges overlap that of a written one (``written``
    None: every array counts as written), in groups of two or more; arrays that are only
    read may overlap freely, nothing can race.

    Ranges are compared, not elements (``np.may_share_memory``'s bounds test, a fraction
    of a microsecond a pair): interleaved arrays (``a[::2]``, ``a[1::2]``) form a group
    too, which costs a shared shadow but reports nothing, since their elements map to
    different units."""
    live = [(k, a) for k, a in enumerate(arrays) if a is not None and a.size]
    if written is None:
        written = [True] * len(arrays)
    group: dict[int, int] = {}  # union-find over argument indices, made on a first overlap

    def root(k: int) -> int:
        while group.get(k, k) != k:
            k = group[k]
        return k

    for i, (k, a) in enumerate(live):
        for j, b in live[i + 1:]:
            if (written[k] or written[j]) and np.may_share_memory(a, b):
                group[root(j)] = root(k)
    if not group:
        return []  # the common case: no written array overlaps another
    found: dict[int, list[int]] = {}
    for k, _ in live:
        found.setdefault(root(k), []).append(k)
    return [g for g in found.values() if len(g) > 1]


class AliasSpace:
    """One shadow buffer per shadow kind over the bytes of a group of arrays."""

    def __init__(self, arrays: list[np.ndarray], names: list[str]) -> None:
        self.names = names
        extents = [_extent(a) for a in arrays]
        self.base = min(lo for lo, _ in extents)
        top = max(hi for _, hi in extents)
        unit = 0
        for a in arrays:
            unit = math.gcd(unit, a.itemsize, a.__array_interface__["data"][0] - self.base,
                            *(abs(s) for n, s in zip(a.shape, a.strides) if n > 1))
        self.unit = unit
        self.size = (top - self.base) // unit
        self.buffers: dict[str, np.ndarray] = {}

    def view(self, a: np.ndarray, attr: str) -> np.ndarray:
        """The ``attr`` shadow of array ``a`` (a member): a writable strided view."""
        buf = self.buffers.get(attr)
        if buf is None:
            buf = self.buffers[attr] = np.full(self.size, SHADOWS[attr], np.int32)
        first = (a.__array_interface__["data"][0] - self.base) // self.unit
        strides = tuple(s // self.unit * buf.itemsize for s in a.strides)
        return np.lib.stride_tricks.as_strided(buf[first:], a.shape, strides)

    def reset(self) -> None:
        """Forget every entry (a launch that starts again from the saved arrays)."""
        for attr, buf in self.buffers.items():
            buf.fill(SHADOWS[attr])


__all__ = ["SHADOWS", "AliasSpace", "alias_groups"]
