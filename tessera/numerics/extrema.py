"""IEEE 754-2019 ``maximum`` and ``minimum`` of two arrays, as Tessera's interpreters
(graph, tile, and the Target IR interpreter's ``max``/``min``) and a GPU compute them:
``+0`` ranks above ``-0``.

NumPy's ``np.maximum(a, b)`` returns ``b`` where ``a == b``, so of two zeros of
different signs it returns whichever came second: ``maximum(-0, +0)`` is ``+0`` but
``maximum(+0, -0)`` is ``-0``. That makes the result depend on the order of the
operands, and differ from PTX's ``max.f32`` and ``min.f32``, which order ``-0`` below
``+0`` (PTX ISA, "Floating Point Instructions: max, min"). NaN operands are the
callers' to settle (they write the default NaN).
"""

from __future__ import annotations

import numpy as np


def signed_zeros(out: np.ndarray, a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    """``out`` (NumPy's maximum or minimum of ``a`` and ``b``) with the zeros of
    ``maximum(-0, +0)`` made ``+0`` and those of ``minimum(-0, +0)`` made ``-0``."""
    with np.errstate(invalid="ignore"):
        zeros = (a == 0) & (b == 0)
    if not np.any(zeros):
        return out
    negative = np.signbit(a) & np.signbit(b) if is_max else np.signbit(a) | np.signbit(b)
    return np.where(zeros, np.where(negative, -np.abs(out), np.abs(out)), out)


def maximum(a: np.ndarray, b: np.ndarray, **kwargs: object) -> np.ndarray:
    """``np.maximum`` with ``+0`` above ``-0`` (``kwargs``: the ufunc's, e.g. dtype)."""
    return signed_zeros(np.maximum(a, b, **kwargs), a, b, True)


def minimum(a: np.ndarray, b: np.ndarray, **kwargs: object) -> np.ndarray:
    """``np.minimum`` with ``-0`` below ``+0`` (``kwargs``: the ufunc's, e.g. dtype)."""
    return signed_zeros(np.minimum(a, b, **kwargs), a, b, False)


__all__ = ["maximum", "minimum", "signed_zeros"]
