"""tf32 tensor-core products in the Target IR interpreter: third-party-style PTX text
with ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` (operands placed by the
fragment layouts of PTX ISA sec. 9.7.14.5, written out here from the ISA's formulas)
equals the float64 product of the tf32 values rounded once to f32, under the exact and
the Hopper model (which has no tf32 measurements and falls back to the exact one);
operands with bits a tf32 value has not are refused."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.arch import mma_hopper
from tessera.interp.target.state import TargetFault
from tessera.numerics.formats.convert import tf32_from_f32
from tests.interp.target.tensorcore.mma_text import c_fragments, d_matrix, one_mma_kernel

_KERNEL = one_mma_kernel("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "f32", "7.0")


def _run(a: np.ndarray, b: np.ndarray, c: np.ndarray, model: str) -> np.ndarray:
    """sec. 9.7.14.5 (m16n8k8, .tf32): g = lane / 4, t = lane % 4; A element i is row
    g (+8 for i = 1, 3), column t (+4 for i = 2, 3); B element i is row (k) t (+4 for
    i = 1), column g; C/D element i is row g (+8 for i = 2, 3), column 2 t + i % 2."""
    fa, fb = np.zeros((32, 4), np.float32), np.zeros((32, 2), np.float32)
    fd = np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(4):
            fa[lane, i] = a[g + 8 * (i & 1), t + 4 * (i >> 1)]
        for i in range(2):
            fb[lane, i] = b[t + 4 * i, g]
    ts.ptx.load(_KERNEL).kernel("k").run(grid=1, block=32,
                                         args=[fa, fb, c_fragments(c), fd],
                                         tensor_cores=model)
    return d_matrix(fd)


@pytest.mark.parametrize("model", ["exact", "hopper"])
def test_mma_sync_m16n8k8_tf32_equals_the_rounded_float64_product(model: str) -> None:
    rng = np.random.default_rng(5)
    # f32's exponent range (beyond f16's), 10 significand bits
    a = tf32_from_f32(np.ldexp(rng.standard_normal((16, 8)), rng.integers(-40, 40, (16, 8)))
                      .astype(np.float32))
    b = tf32_from_f32(np.ldexp(rng.standard_normal((8, 8)), rng.integers(-40, 40, (8, 8)))
                      .astype(np.float32))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    assert (a.view(np.uint32) & 0x1FFF == 0).all() and np.abs(a).max() > 65504  # not f16
    # the exact convention: the products (exact in float64) summed in ascending k
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    total = a64[:, :1] * b64[:1]
    for k in range(1, 8):
        total = total + a64[:, k:k + 1] * b64[k:k + 1]
    want = c.astype(np.float64) + total
    if model == "hopper":  # the bf16 rule, measured for tf32 through wgmma
        want = mma_hopper.mma(a, b, c, "tf32")
    np.testing.assert_array_equal(_run(a, b, c, model), want.astype(np.float32))


def test_unrounded_tf32_operands_are_refused() -> None:
    a = np.ones((16, 8), np.float32)
    a[3, 5] = 1 + 2.0**-20  # not a tf32 value
    with pytest.raises(TargetFault, match="tf32 operand"):
        _run(a, np.ones((8, 8), np.float32), np.zeros((16, 8), np.float32), "exact")
