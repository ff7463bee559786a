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


def flash_attention(*args: object) -> list[object]:
    """Triton's descriptor attention (``attn_fwd_tma``, ``attn_fwd_ws``): Q, K, V and O
    each come as a tensor map's array of batch x heads x S rows of D, with its two sizes
    and two strides; then S, the score scale and Triton's two scratch arrays. O is
    ``softmax(Q Kᵀ scale) V`` per batch-head, in float64."""
    q, k, v = (np.asarray(a, np.float64) for a in (args[0], args[5], args[10]))
    seq, scale = int(args[20]), float(args[21])  # type: ignore[call-overload]
    d = q.shape[1]
    q, k, v = (x.reshape(-1, seq, d) for x in (q, k, v))
    s = q @ k.transpose(0, 2, 1) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (p / p.sum(axis=-1, keepdims=True) @ v).reshape(-1, d)
    return [None, None, None, out, None, None]
