"""Static loss scaling: ``f16 @loss_scale(s)`` keeps small f16 cotangents from underflowing.

The loss is ``mean(x * w) * 2**-20`` over 48 elements with ``x`` in [4096, 8192]. Its
gradient ``dL/dw = 2**-20 * x / 48`` is between 8e-5 and 1.6e-4, a normal f16 number,
but the backward pass first forms ``2**-20 / 48 = 2e-8``, below half the smallest f16
subnormal (2**-25 = 3e-8): without scaling that cotangent rounds to zero and so does
every gradient. Scaled by 1024 it is 2e-5 (a subnormal with ~9 significant bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tests.autodiff.util import close

N = 48
C = 2.0**-20
SCALE = 1024.0
RNG = np.random.default_rng(3)
X = RNG.uniform(4096.0, 8192.0, N)
W = RNG.uniform(0.5, 1.5, N)
# float64 reference of the gradient on the f16-rounded data
X16 = X.astype(np.float16).astype(np.float64)
W16 = W.astype(np.float16).astype(np.float64)
REF_DW = C * X16 / N
REF_DX = C * W16 / N
# f16 rounding of a few ops, and one subnormal intermediate with 9+ significant bits
RTOL = 4e-3


def _loss(x: Any, w: Any) -> Any:
    return ts.mean(x * w) * C


def scaled(x: ts.Tensor["N", ts.f16], w: ts.Tensor["N", ts.f16 @ ts.loss_scale(SCALE)]):
    return _loss(x, w)


def unscaled(x: ts.Tensor["N", ts.f16], w: ts.Tensor["N", ts.f16]):
    return _loss(x, w)


def test_without_loss_scaling_the_f16_gradient_underflows() -> None:
    g = ts.grad(unscaled, argnums=1)(X, W)
    assert np.asarray(g).dtype == np.float16
    assert np.all(np.asarray(g) == 0), "the unscaled backward was expected to underflow"
    # ... although the true gradient is representable in f16
    assert np.all(REF_DW.astype(np.float16) > 0)


def test_loss_scaled_gradient_matches_float64() -> None:
    g = ts.grad(scaled, argnums=1)(X, W)
    assert g.element == ts.f16 @ ts.loss_scale(SCALE)
    assert np.asarray(g).dtype == np.float16
    # unscaled: equal in magnitude to the true gradient, not 1024 times it
    close(np.asarray(g).astype(np.float64), REF_DW, rtol=RTOL, atol=0)


def test_value_is_not_scaled() -> None:
    value, g = ts.value_and_grad(scaled, argnums=1)(X, W)
    close(np.asarray(value).astype(np.float64), C * np.mean(X16 * W16), rtol=2e-3, atol=0)
    close(np.asarray(g).astype(np.float64), REF_DW, rtol=RTOL, atol=0)


def test_scale_of_one_argument_applies_to_the_whole_backward() -> None:
    """The loss scale seeds the one backward pass: the data gradient benefits too."""
    gx, gw = ts.grad(scaled, argnums=(0, 1))(X, W)
    close(np.asarray(gw).astype(np.float64), REF_DW, rtol=RTOL, atol=0)
    # dL/dx = 2**-20 * w / 48 (1e-8 to 3e-8) is below f16's subnormal spacing 2**-24:
    # it comes back within one spacing of the true value, never scaled up
    ref = REF_DX
    assert np.max(np.abs(np.asarray(gx).astype(np.float64) - ref)) <= 2.0**-24


def test_loss_scale_under_jit_and_bf16() -> None:
    """The same policy through @ts.jit, and with bf16 storage (which has f32's range)."""
    g = ts.grad(ts.jit(scaled), argnums=1)(X, W)
    close(np.asarray(g).astype(np.float64), REF_DW, rtol=RTOL, atol=0)

    def bf16_loss(x: ts.Tensor["N", ts.bf16], w: ts.Tensor["N", ts.bf16 @ ts.loss_scale(256.0)]):
        return _loss(x, w)

    gb = ts.grad(bf16_loss, argnums=1)(X, W)
    ref = C * X.astype(np.float32).astype(np.float64) / N
    # bf16 keeps 8 significant bits: a few roundings stay within 2**-6 relative
    close(np.asarray(gb).astype(np.float64), ref, rtol=2**-6, atol=0)


def test_conflicting_loss_scales_are_an_error() -> None:
    def two(x: ts.Tensor["N", ts.f16 @ ts.loss_scale(8.0)],
            w: ts.Tensor["N", ts.f16 @ ts.loss_scale(SCALE)]):
        return ts.sum(x) + ts.sum(w)

    with pytest.raises(ts.GradError, match="different loss scales"):
        ts.grad(two, argnums=(0, 1))(X, W)
