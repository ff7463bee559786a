"""Register fragment layouts against the PTX ISA's written tables.

PTX ISA 9.x, sec. 9.7.14.5 "Matrix Fragments for mma.m16n8k16 with floating point type"
and "Matrix Fragments for mma.m16n8k32"; sec. 9.7.15.5.1 wgmma "Register Fragments"
(m64nNk16 D matrix).  groupID = lane >> 2, threadID_in_group = lane % 4.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import (
    from_fragments,
    mma_m16n8_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    pack_registers,
    to_fragments,
    unpack_registers,
    wgmma_accumulator,
    wgmma_accumulator_registers,
)
from tessera.errors import ArgumentError, ShapeError


def _coords(layout) -> list[list[tuple[int, int]]]:
    return [[(int(r), int(c)) for r, c in zip(layout.row[t], layout.col[t])]
            for t in range(layout.threads)]


def test_m16n8k16_a_matches_isa_table() -> None:
    # ISA: a0,a1 (g, 2t..2t+1); a2,a3 (g+8, same); a4,a5 (g, 2t+8..); a6,a7 (g+8, 2t+8..).
    got = _coords(mma_m16n8k16_a())
    for lane in range(32):
        g, t = lane // 4, lane % 4
        want = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
        assert got[lane] == want


def test_m16n8k16_b_and_c_match_isa_table() -> None:
    # ISA: B b0,b1 (k 2t..2t+1, n g); b2,b3 (k 2t+8.., n g).  C c0,c1 (g, 2t..); c2,c3 (g+8, ..).
    b, c = _coords(mma_m16n8k16_b()), _coords(mma_m16n8_c())
    for lane in range(32):
        g, t = lane // 4, lane % 4
        assert b[lane] == [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
        assert c[lane] == [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]


def test_m16n8k32_fragments_match_isa_formulas() -> None:
    # ISA (m16n8k32, 8-bit): A row = g for a0..a3, a8..a11 else g+8;
    # col = 4t + (i & 3) (+16 for i >= 8).  B row = 4t + (i & 3) (+16 for i >= 4), col = g.
    a, b = _coords(mma_m16n8k32_a()), _coords(mma_m16n8k32_b())
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(16):
            row = g if (i < 4 or 8 <= i < 12) else g + 8
            assert a[lane][i] == (row, 4 * t + (i & 3) + (16 if i >= 8 else 0))
        for i in range(8):
            assert b[lane][i] == (4 * t + (i & 3) + (16 if i >= 4 else 0), g)


@pytest.mark.parametrize("make", [mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8_c,
                                  mma_m16n8k32_a, mma_m16n8k32_b])
def test_mma_layouts_cover_matrix_once_and_fill_registers(make) -> None:
    layout = make()
    assert layout.threads == 32
    assert layout.covers_exactly_once()
    assert layout.elements * 32 == layout.rows * layout.cols
    # ISA register counts: A 4 x b32, B 2 x b32, C 4 x f32.
    assert layout.registers == {"A": 4, "B": 2, "C": 4}[layout.name.split(".")[-1]]


@pytest.mark.parametrize("n", range(8, 257, 8))
def test_wgmma_accumulator_covers_tile_exactly_once(n: int) -> None:
    # PTX ISA sec. 9.7.15.5.1: 64xN f32 D over 128 threads, N/2 registers each.
    layout = wgmma_accumulator(n)
    assert (layout.threads, layout.elements) == (128, n // 2)
    assert wgmma_accumulator_registers(n) == n // 2 == layout.registers
    assert wgmma_accumulator_registers(n, "f16") == n // 4
    assert layout.covers_exactly_once()


def test_wgmma_accumulator_is_m16n8_c_fragments_stacked() -> None:
    # Each warp w owns rows 16w..16w+15; its registers are m16n8 C fragments along N.
    n = 64
    acc, c = wgmma_accumulator(n), mma_m16n8_c()
    for thread in (0, 5, 37, 70, 127):
        w, lane = divmod(thread, 32)
        for i in range(n // 2):
            blk, j = divmod(i, 4)
            assert acc.row[thread, i] == 16 * w + c.row[lane, j]
            assert acc.col[thread, i] == 8 * blk + c.col[lane, j]
    assert (acc.row[127, -1], acc.col[127, -1]) == (63, n - 1)


@pytest.mark.parametrize("n", [0, 4, 12, 264])
def test_wgmma_rejects_bad_n(n: int) -> None:
    with pytest.raises(ArgumentError):
        wgmma_accumulator(n)


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(st.integers(1, 3), max_size=2),
       which=st.sampled_from(["a", "b", "c", "a8", "wg"]), seed=st.integers(0, 2**31))
def test_scatter_gather_round_trip(batch: list[int], which: str, seed: int) -> None:
    layout = {"a": mma_m16n8k16_a(), "b": mma_m16n8k16_b(), "c": mma_m16n8_c(),
              "a8": mma_m16n8k32_a(), "wg": wgmma_accumulator(24)}[which]
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 1 << 16, (*batch, layout.rows, layout.cols)).astype(np.uint16)
    frags = to_fragments(m, layout)
    assert frags.shape == (*batch, layout.threads, layout.elements)
    assert np.array_equal(from_fragments(frags, layout), m)
    # Element (t, i) is matrix[row[t, i], col[t, i]] -- spot-check one directly.
    t, i = layout.threads - 1, layout.elements // 2
    assert frags[(..., t, i)].tolist() == m[(..., layout.row[t, i], layout.col[t, i])].tolist()


def test_fragment_shape_errors() -> None:
    with pytest.raises(ShapeError):
        to_fragments(np.zeros((16, 8)), mma_m16n8k16_a())
    with pytest.raises(ShapeError):
        from_fragments(np.zeros((32, 4)), mma_m16n8k16_a())


def test_pack_puts_lower_element_in_low_half() -> None:
    # PTX ISA: in a .f16x2/.bf16x2 register the lower-indexed element is the low half.
    regs = pack_registers(np.array([0x1111, 0x2222, 0xABCD, 0x0001], np.uint16), 16)
    assert regs.tolist() == [0x22221111, 0x0001ABCD]
    assert pack_registers(np.array([1, 2, 3, 4], np.uint8), 8).tolist() == [0x04030201]


@settings(max_examples=30, deadline=None)
@given(bits=st.sampled_from([8, 16]), nregs=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_pack_unpack_round_trip(bits: int, nregs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    regs = rng.integers(0, 1 << 32, (3, nregs), dtype=np.uint64).astype(np.uint32)
    elems = unpack_registers(regs, bits)
    assert elems.shape == (3, nregs * 32 // bits)
    assert np.array_equal(pack_registers(elems, bits), regs)
