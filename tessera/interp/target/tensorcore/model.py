"""The accumulation of one tensor-core step under the launch's model.

``"exact"`` (the default) is the golden convention, the meaning of a kernel, computed
by :mod:`tessera.interp.target.tensorcore.exact_mma`; ``"hopper"`` is what an
H100/H200 returns, :mod:`tessera.arch.mma_hopper` (``run_target(...,
tensor_cores="hopper")``, ``tessera check-ptx --tensor-cores hopper``). Both compute
float64 D; the hardware model's values are already f32 and are stored as plain f32
registers (:func:`result`), so nothing after them is wide.
"""

from __future__ import annotations

import numpy as np

from tessera.arch import mma_hopper
from tessera.interp.target.numeric import canonical_nans
from tessera.interp.target.state import Machine
from tessera.interp.target.tensorcore.exact_mma import Operand, mma, mma_operands


def step(m: Machine, a: Operand | np.ndarray, b: Operand | np.ndarray, c: np.ndarray,
         fa: str | None = None, fb: str | None = None, c_unsigned_zeros: bool = False,
         c_private: bool = False) -> np.ndarray:
    """``D = C + A @ B`` of one instruction (batched) under ``m.tensor_cores``: prepared
    :class:`Operand` pairs, or element arrays with their formats ``fa``/``fb``;
    ``c_unsigned_zeros`` as in :func:`~.exact_mma.mma`; ``c_private``: nothing reads
    ``c`` after this step, which may then return it, holding D."""
    # A NaN element of D (a NaN operand, inf - inf, 0 * inf) has the canonical NaN's bits:
    # the tensor cores' adders write it as the f32 ``add`` does (canonical_nans).
    if isinstance(a, Operand) and isinstance(b, Operand):
        if m.tensor_cores == "hopper":
            d = mma_hopper.mma(a.elements, b.elements, c, a.fmt, b.fmt)
        else:
            d = mma_operands(a, b, c, c_unsigned_zeros, _scratch(m, c_private))
        return canonical_nans(d, wide=True)  # f32 values, held in float64
    assert fa is not None
    if m.tensor_cores == "hopper":
        d = mma_hopper.mma(a, b, c, fa, fb)
    else:
        d = mma(a, b, c, fa, fb, c_unsigned_zeros, _scratch(m, c_private))
    return canonical_nans(d, wide=True)


def _scratch(m: Machine, c_private: bool) -> dict[tuple[int, ...], np.ndarray] | None:
    """The launch's product arrays by shape (:func:`~.exact_mma.mma_operands`) when
    C is the caller's to overwrite."""
    return m.__dict__.setdefault("mma_products", {}) if c_private else None


def result(m: Machine, values: np.ndarray) -> np.ndarray:
    """A tensor-core step's D registers as the model holds them: wide (float64) under
    ``"exact"``, where later additions keep the exact sum as the tile simulator does;
    plain f32 under ``"hopper"``, where the hardware's ``add.f32`` rounds."""
    return values.astype(np.float32) if m.tensor_cores == "hopper" else values


__all__ = ["result", "step"]
