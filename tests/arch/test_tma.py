"""Tensor maps and TMA tile copies.

cuda.h / CUDA Driver API "Tensor Map Object Management", cuTensorMapEncodeTiled: rank
1..5; globalAddress 16-byte aligned; globalDim in 1..2^32; globalStrides multiples of 16
and < 2^40; boxDim 1..256 with boxDim[0] * elementSize a multiple of 16 and, with a
swizzle, no wider than the swizzle span; elementStrides 1..8; NaN fill only for floats.
PTX ISA 9.x, "cp.async.bulk.tensor" (Data Movement instructions) and sec. 5.5 "Tensors":
out-of-bound elements of a load are filled (zero by default); a store skips them.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import (
    AlignmentError,
    OobFill,
    Swizzle,
    TensorMap,
    TensorMapDataType,
    TensorMapError,
    row_major_2d,
    swizzle_address,
    tma_data_type,
    tma_load,
    tma_store,
)
from tessera.arch.tma import tma_box
from tessera.errors import ArgumentError

BF16 = TensorMapDataType.BFLOAT16


def _map(**changes) -> TensorMap:
    base = TensorMap(BF16, 0, (256, 100), (512,), (64, 32), swizzle=Swizzle.B128)
    return dataclasses.replace(base, **changes)


def test_ptx_elements_map_to_cuda_h_data_types() -> None:
    # fp8 has no cuda.h data type: TMA copies it as bytes
    assert tma_data_type("bf16") is BF16 and tma_data_type("e4m3").size == 1
    with pytest.raises(ArgumentError, match="TMA cannot copy 'f8'"):
        tma_data_type("f8")
    with pytest.raises(ArgumentError, match="use one of u8"):
        row_major_2d("f8", 0, (64, 64), (64, 64))


def test_valid_map_passes() -> None:
    assert _map().validate().box_bytes == 64 * 32 * 2


@pytest.mark.parametrize(("changes", "rule"), [
    ({"global_dims": (), "global_strides": (), "box_dims": ()}, "tensorRank"),
    ({"global_dims": (16,) * 6, "global_strides": (32,) * 5, "box_dims": (8,) * 6},
     "tensorRank"),
    ({"global_address": 8}, "globalAddress"),
    ({"global_dims": (256, 0)}, "globalDim"),
    ({"global_dims": (256, (1 << 32) + 1)}, "globalDim"),
    ({"global_strides": (520,)}, "globalStrides"),
    ({"global_strides": (1 << 40,)}, "globalStrides"),
    ({"box_dims": (64, 0)}, "boxDim"),
    ({"box_dims": (64, 257)}, "boxDim"),
    ({"box_dims": (12, 32), "swizzle": Swizzle.NONE}, "multiple of 16"),
    ({"box_dims": (128, 32)}, "span"),
    ({"box_dims": (32, 32), "swizzle": Swizzle.B32}, "span"),
    ({"element_strides": (1, 9)}, "elementStrides"),
    ({"element_strides": (1, 0)}, "elementStrides"),
    ({"dtype": TensorMapDataType.UINT16, "oob_fill": OobFill.NAN_REQUEST_ZERO_FMA}, "NaN"),
    ({"global_strides": ()}, "rank 2 needs"),
])
def test_each_rule_violation_raises(changes: dict, rule: str) -> None:
    with pytest.raises(TensorMapError, match=rule):
        _map(**changes).validate()


def test_swizzle_span_limit_is_inclusive() -> None:
    # 128B swizzle with bf16: at most 64 inner elements (128 bytes).
    _map(box_dims=(64, 8)).validate()
    _map(box_dims=(16, 8), swizzle=Swizzle.B32).validate()


def _reference_box(g: np.ndarray, x: int, y: int, bw: int, bh: int) -> np.ndarray:
    out = np.zeros((bh, bw), g.dtype)
    for r in range(bh):
        for c in range(bw):
            if 0 <= y + r < g.shape[0] and 0 <= x + c < g.shape[1]:
                out[r, c] = g[y + r, x + c]
    return out


@settings(max_examples=40, deadline=None)
@given(x=st.integers(-80, 120), y=st.integers(-40, 60), swz=st.sampled_from(list(Swizzle)),
       seed=st.integers(0, 2**31))
def test_load_fills_out_of_bounds_with_zero_and_swizzles(x: int, y: int, swz: Swizzle,
                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = rng.integers(1, 1 << 16, (50, 72)).astype(np.uint16)  # no zeros in bounds
    bw = 64 if swz in (Swizzle.NONE, Swizzle.B128) else swz.span // 2
    tmap = TensorMap(BF16, 0, (72, 50), (144,), (bw, 16), swizzle=swz)
    smem = np.full(8192, 0xEE, np.uint8)
    dst = 2048
    tx = tma_load(tmap, g, (x, y), smem, dst)
    assert tx == bw * 16 * 2  # the full box, even when partly out of bounds
    dense = _reference_box(g, x, y, bw, 16).view(np.uint8).ravel()
    where = swizzle_address(dst + np.arange(dense.size), swz)
    assert np.array_equal(smem[where], dense)
    untouched = np.ones(smem.size, bool)
    untouched[where] = False
    assert np.all(smem[untouched] == 0xEE)


def test_nan_fill_for_floats() -> None:
    g = np.ones((4, 8), ml_dtypes.bfloat16)
    tmap = TensorMap(BF16, 0, (8, 4), (16,), (8, 8), oob_fill=OobFill.NAN_REQUEST_ZERO_FMA)
    smem = np.zeros(256, np.uint8)
    tma_load(tmap, g, (0, 0), smem, 0)
    box = smem[:128].view(ml_dtypes.bfloat16).astype(np.float32).reshape(8, 8)
    assert np.all(box[:4] == 1) and np.all(np.isnan(box[4:]))


def test_three_d_load_with_element_strides() -> None:
    # cuda.h: with elementStrides[i] = s TMA loads ceil(boxDim[i] / s) elements along i.
    g = np.arange(4 * 10 * 8, dtype=np.uint32).reshape(4, 10, 8)
    tmap = TensorMap(TensorMapDataType.UINT32, 0, (8, 10, 4), (32, 320), (4, 5, 2),
                     element_strides=(1, 2, 1))
    assert tmap.smem_box == (4, 3, 2)
    smem = np.zeros(1024, np.uint8)
    assert tma_load(tmap, g, (4, 1, 1), smem, 128) == 4 * 3 * 2 * 4
    got = smem[128:128 + 96].view(np.uint32).reshape(2, 3, 4)
    assert np.array_equal(got, g[1:3, 1:7:2, 4:8])


def test_store_skips_out_of_bounds_and_round_trips() -> None:
    rng = np.random.default_rng(4)
    tmap = TensorMap(BF16, 0, (72, 50), (144,), (64, 8), swizzle=Swizzle.B128)
    src = rng.integers(0, 1 << 16, (50, 72)).astype(np.uint16)
    smem = np.zeros(4096, np.uint8)
    tma_load(tmap, src, (40, 45), smem, 1024)
    out = np.zeros_like(src)
    tma_store(tmap, smem, 1024, (40, 45), out)
    want = np.zeros_like(src)
    want[45:50, 40:72] = src[45:50, 40:72]
    assert np.array_equal(out, want)


def test_batched_over_ctas_and_alignment() -> None:
    g = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    tmap = TensorMap(BF16, 0, (64, 64), (128,), (64, 8), swizzle=Swizzle.B128)
    smem = np.zeros((3, 2048), np.uint8)
    coords = np.array([[0, 0], [0, 8], [0, 60]])
    tma_load(tmap, g, coords, smem, 1024)
    for c in range(3):
        one = np.zeros(2048, np.uint8)
        tma_load(tmap, g, coords[c], one, 1024)
        assert np.array_equal(smem[c], one)
    with pytest.raises(AlignmentError, match="128"):
        tma_load(tmap, g, (0, 0), np.zeros(4096, np.uint8), 1024 + 64)


@pytest.mark.parametrize("x, y", [(0, 0), (64, 5), (64, 48), (32, 7)])
def test_box_gathered_by_rows_equals_the_elements(x: int, y: int) -> None:
    """Boxes whose rows start at multiples of the row's bytes are gathered a row at a
    time; the others (x = 32: rows start mid-row) element by element. Both give the
    tensor's elements in box order."""
    g = np.random.default_rng(x + y).integers(0, 1 << 16, (64, 128)).astype(np.uint16)
    tmap = TensorMap(BF16, 0, (128, 64), (256,), (64, 16), swizzle=Swizzle.B128)
    got = tma_box(tmap, g, np.array([x, y]))
    assert np.array_equal(got, _reference_box(g, x, y, 64, 16).view(np.uint8).ravel())
    batched = tma_box(tmap, g, np.array([[x, y], [0, 1]]))
    assert np.array_equal(batched[0], got)
    assert np.array_equal(batched[1], _reference_box(g, 0, 1, 64, 16).view(np.uint8).ravel())
