"""A global store of ``x + y`` (or ``- * /``) computes straight into the destination:
the same bits as the two ops, and the store's checks still come first."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
import tessera.interp.tile.memory.globals as global_mem

SOURCE = Path(__file__).read_text().splitlines()


@ts.kernel
def add(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    out[tile_m:tile_m + BM] = x[tile_m:tile_m + BM] + y[tile_m:tile_m + BM]


@ts.kernel
def div_shifted(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    out[tile_m + 1:tile_m + BM + 1] = x[tile_m:tile_m + BM] / 3.0


@ts.kernel
def add_bf16(x: ts.Tensor["N", ts.bf16], y: ts.Tensor["N", ts.bf16],
             out: ts.Tensor["N", ts.bf16]):
    out[tile_m:tile_m + BM] = x[tile_m:tile_m + BM] * y[tile_m:tile_m + BM]


@ts.kernel
def overlapping(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    out[0:BM] = x[tile_m:tile_m + BM] - 1.0  # every tile writes the same window


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts stores computed in place."""
    calls: list[int] = []
    original = global_mem.store_computed

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(global_mem, "store_computed", spy)
    return calls


@pytest.mark.parametrize("mode", ["checked", "fast"])
def test_computed_in_place_with_the_same_bits(direct: list[int], mode: str) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 4096)).astype(np.float32)
    out = np.full_like(x, np.nan)
    add(x, y, out, tile_shape=(256,), mode=mode)
    assert direct and np.array_equal(out, x + y)
    add(x, y, x, tile_shape=(256,), mode=mode)  # the destination is an operand
    assert np.array_equal(x, out)


def test_other_dtypes_take_the_two_ops(direct: list[int]) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(512).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal(512).astype(ml_dtypes.bfloat16)
    out = np.zeros_like(x)
    add_bf16(x, y, out, tile_shape=(128,))
    want = (x.astype(np.float32) * y.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert not direct and np.array_equal(out.view(np.uint16), want.view(np.uint16))


def test_out_of_bounds_store_is_still_reported() -> None:
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        div_shifted(x, out, tile_shape=(128,))
    line = next(k for k, text in enumerate(SOURCE, 1) if "x[tile_m:tile_m + BM] / 3.0" in text)
    assert info.value.loc.line == line and "bounds" in info.value.kind
    assert not out.any()  # nothing was written


def test_tiles_writing_one_element_are_reported() -> None:
    x = np.ones(512, np.float32)
    out = np.zeros(512, np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        overlapping(x, out, tile_shape=(128,))
    line = next(k for k, text in enumerate(SOURCE, 1) if "every tile writes" in text)
    assert info.value.loc.line == line and "store to" in str(info.value)


@ts.kernel
def product_stored(a: ts.Tensor[8, 8, ts.bf16], b: ts.Tensor[8, 8, ts.bf16],
                   out: ts.Tensor[8, 8, ts.f32]):
    acc = ts.tile.full((8, 8), 0.25, ts.f32)
    acc = acc + ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8])  # fused with its mma: not into the store
    out[0:8, 0:8] = acc


@pytest.mark.parametrize("mode", ["reference", "checked", "fast"])
def test_a_sum_fused_with_its_mma_is_not_fused_into_the_store(mode: str) -> None:
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((8, 8)).astype(ml_dtypes.bfloat16) for _ in range(2))
    out = np.zeros((8, 8), np.float32)
    product_stored(a, b, out, grid=1, mode=mode)
    want = (0.25 + a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    if mode == "fast":  # float32 products and sums
        assert np.allclose(out, want, rtol=1e-5, atol=1e-5)
    else:  # bf16 products are exact in float64, and so is their sum here: one rounding
        assert np.array_equal(out, want)
