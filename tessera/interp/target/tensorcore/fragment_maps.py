"""Fragment layouts as flat index maps, so that a warp's (or warpgroup's) registers
become its matrix, and back, with one NumPy gather for every warp of a launch.

:func:`tessera.arch.fragments.from_fragments` scatters ``(threads, elements)`` into
``(rows, cols)`` by coordinates; every tensor-core layout holds each matrix element in
exactly one thread, so the same move is a gather by the inverse permutation. Packed
16- and 8-bit elements are the little-endian halves or bytes of their 32-bit
registers, lower index in lower bits (PTX ISA sec. 9.7.14.5), which is what viewing
the registers as ``uint16``/``uint8`` gives.
"""

from __future__ import annotations

import sys

import numpy as np

from tessera.arch.fragments import FragmentLayout

_LITTLE = sys.byteorder == "little"


class FragmentMap:
    """Index maps of one layout between flat fragments ``(threads * elements)`` and the
    flat matrix ``(rows * cols)``."""

    def __init__(self, layout: FragmentLayout) -> None:
        self.layout = layout
        flat = (layout.row * layout.cols + layout.col).reshape(-1)
        self.to_fragments = flat
        self.to_matrix = np.empty(layout.rows * layout.cols, np.int64)
        self.to_matrix[flat] = np.arange(flat.size)
        counts = np.bincount(flat, minlength=layout.rows * layout.cols)
        if not (counts == 1).all():
            raise ValueError(f"{layout.name} does not hold each element exactly once")

    def matrix(self, regs: np.ndarray, groups: np.ndarray, element_bits: int | None = None
               ) -> np.ndarray:
        """The (G, rows, cols) matrices of thread groups ``groups`` from registers
        ``regs`` (N, r) of all threads; ``element_bits`` unpacks 32-bit registers
        into 16- or 8-bit element bit patterns."""
        lay = self.layout
        per = regs.reshape(-1, lay.threads * regs.shape[-1])[groups]
        if element_bits is not None:
            assert _LITTLE, "packed registers are read as little-endian halves"
            per = np.ascontiguousarray(per, np.uint32).view(f"u{element_bits // 8}")
        # np.take keeps rows contiguous (a fancy index after a slice need not)
        return np.take(per, self.to_matrix, axis=1).reshape(len(groups), lay.rows, lay.cols)

    def scatter(self, matrix: np.ndarray, out: np.ndarray, groups: np.ndarray) -> None:
        """Write the (G, rows, cols) ``matrix`` into the registers ``out`` (N, e) of the
        threads of ``groups``."""
        lay = self.layout
        per = np.take(matrix.reshape(len(groups), -1), self.to_fragments, axis=1)
        out.reshape(-1, lay.threads * lay.elements)[groups] = per


__all__ = ["FragmentMap"]
