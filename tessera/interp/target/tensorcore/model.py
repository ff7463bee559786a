"""The accumulation of one tensor-core step under the launch's model.

``"exact"`` (the default) is the golden convention, the meaning of a kernel, computed
by :mod:`tessera.interp.target.tensorcore.exact_mma`; ``"hopper"`` is what an
H100/H200 returns, :mod:`tessera.arch.mma_hopper` (``run_target(...,
tensor_cores="hopper")``, ``tessera check-ptx --tensor-cores hopper``). Both give
float64 D; the hardware model's values are already f32, so the register write that
rounds D to f32 leaves them as they are.
"""

from __future__ import annotations

import numpy as np

from tessera.arch import mma_hopper
from tessera.interp.target.state import Machine
from tessera.interp.target.tensorcore.exact_mma import Operand, mma, mma_operands


def step(m: Machine, a: Operand | np.ndarray, b: Operand | np.ndarray, c: np.ndarray,
         fa: str | None = None, fb: str | None = None) -> np.ndarray:
    """``D = C + A @ B`` of one instruction (batched) under ``m.tensor_cores``: prepared
    :class:`Operand` pairs, or element arrays with their formats ``fa``/``fb``."""
    if isinstance(a, Operand) and isinstance(b, Operand):
        if m.tensor_cores == "hopper":
            return mma_hopper.mma(a.elements, b.elements, c, a.fmt, b.fmt)
        return mma_operands(a, b, c)
    assert fa is not None
    if m.tensor_cores == "hopper":
        return mma_hopper.mma(a, b, c, fa, fb)
    return mma(a, b, c, fa, fb)


__all__ = ["step"]
