"""ldmatrix against a direct construction from the PTX ISA's description.

PTX ISA 9.x, sec. 9.7.14.5.15 "ldmatrix": threads 8k..8k+7 give the row addresses of matrix
k (16-byte aligned); .x1 uses threads 0-7, .x2 threads 0-15.  Register k of lane l holds
row l/4 of matrix k, elements 2(l%4) (low half) and 2(l%4)+1 (high half); .trans
delivers each matrix transposed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import AlignmentError, ldmatrix, mma_m16n8k16_a, pack_registers, to_fragments
from tessera.errors import ArgumentError


def _reference(smem: np.ndarray, addrs: list[int], num: int, trans: bool) -> np.ndarray:
    data = smem.tobytes()

    def elem(k: int, r: int, c: int) -> int:
        if trans:
            r, c = c, r
        start = addrs[8 * k + r] + 2 * c
        return int.from_bytes(data[start:start + 2], "little")

    out = np.zeros((32, num), np.uint32)
    for lane in range(32):
        for k in range(num):
            r, c = lane // 4, 2 * (lane % 4)
            out[lane, k] = elem(k, r, c) | (elem(k, r, c + 1) << 16)
    return out


@settings(max_examples=40, deadline=None)
@given(num=st.sampled_from([1, 2, 4]), trans=st.booleans(), seed=st.integers(0, 2**31))
def test_ldmatrix_matches_isa_description(num: int, trans: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    smem = rng.integers(0, 256, 4096, dtype=np.uint8)
    addrs = (rng.integers(0, 4096 // 16, 32) * 16).tolist()
    got = ldmatrix(smem, np.array(addrs), num, trans)
    assert got.shape == (32, num) and got.dtype == np.uint32
    assert np.array_equal(got, _reference(smem, addrs, num, trans))


@pytest.mark.parametrize("num", [1, 2])
def test_unused_lane_addresses_are_ignored(num: int) -> None:
    rng = np.random.default_rng(1)
    smem = rng.integers(0, 256, 2048, dtype=np.uint8)
    addrs = rng.integers(0, 128, 32) * 16
    junk = addrs.copy()
    junk[8 * num:] = 3  # misaligned, but only threads 0..8*num-1 supply addresses
    assert np.array_equal(ldmatrix(smem, junk, num), ldmatrix(smem, addrs, num))


def test_misaligned_row_address_raises() -> None:
    smem = np.zeros(1024, np.uint8)
    addrs = np.arange(32) * 16
    addrs[5] += 8
    with pytest.raises(AlignmentError, match="lane 5"):
        ldmatrix(smem, addrs, 4)
    with pytest.raises(ArgumentError):
        ldmatrix(smem, np.full(32, 1024), 1)
    with pytest.raises(ArgumentError):
        ldmatrix(smem, np.zeros(32, int), 3)


def test_x4_of_a_tile_gives_the_mma_a_fragment() -> None:
    # The usual pairing: a row-major 16x16 b16 tile, lane l addresses row l%16 at column
    # block 8*(l//16); ldmatrix.x4 then yields exactly the mma.m16n8k16 A registers.
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1 << 16, (16, 16)).astype(np.uint16)
    base = 256
    smem = np.zeros(2048, np.uint8)
    smem[base:base + 512] = a.view(np.uint8).ravel()
    lane = np.arange(32)
    addrs = base + (lane % 16) * 32 + (lane // 16) * 16
    want = pack_registers(to_fragments(a, mma_m16n8k16_a()), 16)
    assert np.array_equal(ldmatrix(smem, addrs, 4), want)
    # .trans of the transposed tile in memory gives the same fragment.
    smem[base:base + 512] = np.ascontiguousarray(a.T).view(np.uint8).ravel()
    addrs_t = base + (lane % 8) * 32 + (lane // 16) * 256 + ((lane // 8) % 2) * 16
    assert np.array_equal(ldmatrix(smem, addrs_t, 4, trans=True), want)


def test_batched_over_warps() -> None:
    rng = np.random.default_rng(3)
    smem = rng.integers(0, 256, (3, 1024), dtype=np.uint8)
    addrs = rng.integers(0, 64, (3, 32)) * 16
    got = ldmatrix(smem, addrs, 4, trans=True)
    for w in range(3):
        assert np.array_equal(got[w], _reference(smem[w], addrs[w].tolist(), 4, True))
