"""NumPy references for ``tessera check-ptx --reference`` on the corpus kernels: each
takes the kernel's arguments (arrays as they were before the launch) and returns the
expected arrays."""

from __future__ import annotations

import numpy as np


def saxpy(n: np.uint32, a: np.float32, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y = a * x + y`` on the first ``n`` elements (one rounding: fma)."""
    out = y.copy()
    out[:n] = (np.float64(a) * x[:n] + y[:n]).astype(np.float32)
    return out


def reduce_tree(x: np.ndarray, out: np.ndarray, n: np.uint32) -> list[object]:
    """One sum per block of 256 elements (zeros past ``n``)."""
    padded = np.zeros(len(out) * 256)
    padded[:n] = x[:n]
    return [None, padded.reshape(len(out), 256).sum(axis=1)]
