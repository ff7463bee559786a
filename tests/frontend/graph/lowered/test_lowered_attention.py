"""Attention ``softmax(Q K^T * s [+ mask]) V`` under ``backend="target"``: the generated
kernel's second exact mma reads the softmax's register tile ``P`` staged through shared
memory (:mod:`tessera.lower.rules.stage`) and gives the graph interpreter's bits on
sm_80 and sm_90a; its PTX assembles with no advisory and no spills.

Up to 512 keys the Target program keeps a query tile's whole key rows in one tile
(``to_tile.exact_tiles``: fewer query rows for longer rows), so the kernel is one
pass over the keys. Longer rows, and scores given a ``tile_shape`` narrower than their
rows, are passes over key blocks (``to_tile.attention.keyblocks``: the row maximum, the exact row
sum carried as three f64 values, then ``P @ V``), which lower too: an f64 ``maximum``,
register broadcasts that insert an axis (staged through shared memory), the carried
row statistics read in another tile's row layout, the exact sum of the terms beside the
carried values, and score accumulators cleared on every key block. The three passes'
score accumulators share one shared buffer (their loops run one after the other), so
rows over 512 keys take blocks of up to 256 scores and a whole head of V's columns
(``to_tile.attention.keyblock_tiles.key_block_tile``)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.arch.limits import shared_limit
from tessera.frontend.graph.lowered_target import TargetGenerationError
from tessera.ir import print_module
from tessera.ir.transforms.to_tile.attention.keyblock_tiles import key_block_bytes, key_block_tile
from tessera.lower.shared import shared_allocs, shared_plan
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target


def attention(q, k, v):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def attention_4d(q, k, v):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 1, 3, 2))) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def causal_additive(q, k, v, bias):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125 + bias
    return op.matmul(op.softmax(s), v)


def projected(h, wq, wk, wv):  # type: ignore[no-untyped-def]
    """Attention of projections, as in a transformer block (2-D)."""
    q, k, v = h @ wq, h @ wk, h @ wv
    return op.matmul(op.softmax(op.matmul(q, op.transpose(k, (1, 0))) * 0.125), v)


def _inputs(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> list:
    if fmt == "bf16":  # cp.async moves rows of whole 4-byte words
        shape = (*shape[:-1], 2 * (-(-shape[-1] // 2)))
    dt = ts.bf16 if fmt == "bf16" else ts.f32
    return [ts.Tensor(rng.standard_normal(shape) * 2.0, dt).array for _ in range(3)]


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 2), st.integers(1, 16), st.integers(1, 16),
       st.sampled_from(["f32", "bf16"]), st.randoms(use_true_random=False))
def test_attention_on_target_gives_the_graph_bits(b: int, s: int, d: int, fmt: str,
                                                  r) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(r.randrange(2**32))
    same_on_target(attention, _inputs(rng, (b, s, d), fmt))


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 16), st.integers(1, 16), st.sampled_from(["f32", "bf16"]),
       st.randoms(use_true_random=False))
def test_causal_additive_attention_on_target_gives_the_graph_bits(
        s: int, d: int, fmt: str, r) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(r.randrange(2**32))
    q, k, v = _inputs(rng, (1, s, d), fmt)
    bias = np.where(np.tril(np.ones((s, s), bool)), 0.0, -1e9).astype(np.float32)
    same_on_target(causal_additive, [q, k, v, bias])


def test_4d_and_projected_attention_on_target() -> None:
    rng = np.random.default_rng(5)
    same_on_target(attention_4d, _inputs(rng, (1, 2, 13, 12), "f32"))
    h = rng.standard_normal((11, 5)).astype(np.float32)
    same_on_target(projected, [h, *(rng.standard_normal((5, 5)).astype(np.float32)
                                     for _ in range(3))])


def test_special_scores_on_target() -> None:
    """Scores of +-inf and NaN (an infinite query element) and rows of one value."""
    rng = np.random.default_rng(6)
    q, k, v = _inputs(rng, (1, 9, 4), "f32")
    q[0, 2, 1], q[0, 5, :] = np.inf, 0.0
    k[0, 3, :] = 0.0
    same_on_target(attention, [q, k, v])


@pytest.mark.parametrize("target", TARGETS)
def test_attention_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(7)
    for fn, shape in [(attention, (4, 16, 32)), (attention_4d, (1, 2, 13, 12)),
                      (attention, (2, 7, 3))]:
        args = _inputs(rng, shape, "f32")
        (kernel,) = ts.jit(fn).lower(*args).target(target).kernels
        assembles_clean(kernel)
        # P staged: stored to shared between two barriers; no tensor cores
        assert "st.shared.f32" in kernel.ptx and "bar.sync" in kernel.ptx
        assert "mma.sync" not in kernel.ptx and "wgmma" not in kernel.ptx


def test_batched_matmuls_on_target() -> None:
    """A tile of one batch element is a ``1 x M x K`` box: copied and read as 2-D."""
    rng = np.random.default_rng(8)
    for (b, m, k, n) in [(3, 20, 9, 14), (2, 40, 33, 17)]:
        x = rng.standard_normal((b, m, k)).astype(np.float32)
        y = rng.standard_normal((b, k, n)).astype(np.float32)
        same_on_target(lambda p, q: op.matmul(p, q), [x, y])


def _scores(rng: np.random.Generator, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [(rng.standard_normal(s) * 2.0).astype(np.float32) for s in shapes]


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 2), st.integers(1, 4), st.integers(17, 200), st.integers(1, 12),
       st.sampled_from(["f32", "bf16"]), st.sampled_from(TARGETS),
       st.randoms(use_true_random=False))
def test_attention_over_long_key_rows_on_target(b: int, sq: int, sk: int, d: int, fmt: str,
                                                target: str, r) -> None:  # type: ignore[no-untyped-def]
    """More than 16 keys (few queries, to keep the interpreter fast): whole key rows in
    one tile, one pass."""
    rng = np.random.default_rng(r.randrange(2**32))
    q = _inputs(rng, (b, sq, d), fmt)[0]
    k, v = _inputs(rng, (b, sk, d), fmt)[:2]
    same_on_target(attention, [q, k, v], [target])


def test_attention_at_64_and_256_keys_on_target() -> None:
    """S = 64 square (3-D, 4-D and with an additive causal mask: eight programs of eight
    query rows) and 256 keys (tiles of two query rows)."""
    rng = np.random.default_rng(9)
    same_on_target(attention, _scores(rng, (1, 64, 8), (1, 64, 8), (1, 64, 8)), ["sm_90a"])
    same_on_target(attention_4d, _scores(rng, (1, 2, 4, 8), (1, 2, 64, 8), (1, 2, 64, 8)),
                    ["sm_80"])
    bias = np.where(np.tril(np.ones((64, 64), bool)), 0.0, -1e9).astype(np.float32)
    same_on_target(causal_additive, [*_scores(rng, (1, 64, 4), (1, 64, 4), (1, 64, 4)),
                                      bias], ["sm_80"])
    q, k, v = _scores(rng, (1, 2, 8), (1, 256, 8), (1, 256, 8))
    k[0, 7, :], q[0, 1, :] = 0.0, 0.0  # a row of equal scores, a key of score 0
    same_on_target(attention, [q, k, v], ["sm_90a"])


def test_long_key_rows_ptx_assembles_without_advisories_or_spills() -> None:
    rng = np.random.default_rng(10)
    args = _scores(rng, (1, 64, 16), (1, 256, 16), (1, 256, 16))
    (kernel,) = ts.jit(attention).lower(*args).target("sm_90a").kernels
    assembles_clean(kernel)
    # heads of 256 over key blocks: blocks of 8 keys keep the loaded block at 2,048
    # elements (16 spilled on both targets); the bits were checked once (400 s, sm_80)
    args = _scores(rng, (1, 2, 256), (1, 530, 256), (1, 530, 256))
    for target in TARGETS:
        for kernel in ts.jit(attention).lower(*args).target(target).kernels:
            assembles_clean(kernel)


def test_one_query_row_over_long_key_rows_on_target() -> None:
    """Decoding: one query row over more than 512 keys passes over key blocks (its
    whole row's accumulators would not fit shared memory); the softmax reduces the key
    loop although the row has no other loop."""
    rng = np.random.default_rng(14)
    args = _scores(rng, (1, 1, 4), (1, 600, 4), (1, 600, 4))
    (kernel,) = ts.jit(attention).lower(*args).target("sm_80").kernels
    assert kernel.ptx.count("bra") > 3  # the passes' loops over the key blocks
    assembles_clean(kernel)
    same_on_target(attention, args, ["sm_80"])


def blocked(q, k, v):  # type: ignore[no-untyped-def]
    """Attention whose scores are cut into key blocks of 16 by their tile."""
    s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(8, 16)) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def blocked_4d(q, k, v):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 1, 3, 2)), tile_shape=(8, 16)) * 0.125
    return op.matmul(op.softmax(s, axis=-1), v)


def blocked_causal(q, k, v, bias):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(8, 16)) * 0.125 + bias
    return op.matmul(op.softmax(s), v)


@settings(max_examples=3, deadline=None)
@given(st.integers(1, 8), st.integers(17, 72), st.integers(1, 8),
       st.sampled_from(["f32", "bf16"]), st.sampled_from(TARGETS),
       st.randoms(use_true_random=False))
def test_attention_over_key_blocks_on_target(sq: int, sk: int, d: int, fmt: str,
                                             target: str, r) -> None:  # type: ignore[no-untyped-def]
    """Three passes over key blocks of 16 (a ragged last block masked to -inf)."""
    rng = np.random.default_rng(r.randrange(2**32))
    q = _inputs(rng, (1, sq, d), fmt)[0]
    k, v = _inputs(rng, (1, sk, d), fmt)[:2]
    same_on_target(blocked, [q, k, v], [target])


def test_4d_and_causal_attention_over_key_blocks_on_target() -> None:
    rng = np.random.default_rng(12)
    same_on_target(blocked_4d, _scores(rng, (1, 2, 8, 8), (1, 2, 64, 8), (1, 2, 64, 8)),
                    ["sm_90a"])
    bias = np.where(np.tril(np.ones((40, 40), bool)), 0.0, -1e9).astype(np.float32)
    q, k, v = _scores(rng, (1, 40, 4), (1, 40, 4), (1, 40, 4))
    q[0, 3, 1] = np.inf  # a row of NaN and infinite scores
    same_on_target(blocked_causal, [q, k, v, bias], ["sm_80"])


def _accumulators(kernel) -> list[int]:  # type: ignore[no-untyped-def]
    """The sizes of a lowered kernel's exact accumulator buffers."""
    return sorted(i.op.size for i in shared_allocs(kernel.kernel) if i.op.sym.startswith("xmma"))


@pytest.mark.parametrize("target", TARGETS)
def test_more_than_512_keys_pass_over_long_key_blocks(target: str) -> None:
    """Rows longer than an exact tile holds: the three passes over key blocks of 128
    keys under 2 query rows (600 keys: a ragged last block of 88) give the graph's
    bits; the passes' score chains take one buffer, so the accumulators are those of
    one score tile and P @ V's, not three score tiles; ptxas: no spills, no advisory."""
    rng = np.random.default_rng(11)
    args = _scores(rng, (1, 2, 4), (1, 600, 4), (1, 600, 4))
    args[0][0, 1, :] = 0.0  # a row of equal scores
    program = ts.jit(attention).lower(*args).target(target)
    assert print_module(program.tile.module).count("tile.for") == 3  # the three passes
    (kernel,) = program.kernels
    scores = program.tile.module.functions[kernel.name].attrs["tiles"]
    assert (scores[0], scores[2]) == (2, 128)
    assert _accumulators(kernel) == [176 * 2 * 4, 176 * 2 * 128]
    assembles_clean(kernel)
    same_on_target(attention, args, [target])


def test_key_blocks_of_more_query_rows_on_target() -> None:
    """Three query rows over 530 keys: blocks of 64 keys, the last of 18;
    bf16 operands on sm_90a, f32 on sm_80."""
    rng = np.random.default_rng(14)
    q, k, v = _inputs(rng, (1, 3, 6), "bf16")[0], *_inputs(rng, (1, 530, 6), "bf16")[:2]
    program = ts.jit(attention).lower(q, k, v).target("sm_90a")
    tiles = program.tile.module.functions[program.kernels[0].name].attrs["tiles"]
    assert (tiles[0], tiles[2]) == (3, 64)
    same_on_target(attention, [q, k, v], ["sm_90a"])
    same_on_target(attention, _scores(rng, (1, 3, 5), (1, 530, 5), (1, 530, 5)), ["sm_80"])


def test_key_blocks_with_a_whole_head_of_values_on_target() -> None:
    """40 columns of V in one program (a tile of 64): blocks of 32 keys, the last of
    18 (530 keys), so that 32 x 64 values load at 16 per thread; both targets."""
    rng = np.random.default_rng(16)
    args = _scores(rng, (1, 2, 8), (1, 530, 8), (1, 530, 40))
    program = ts.jit(attention).lower(*args).target("sm_80")
    (kernel,) = program.kernels
    tiles = program.tile.module.functions[kernel.name].attrs["tiles"]
    assert (tiles[0], tiles[2]) == (2, 32) and 40 in tiles  # (loops: rows, V's, keys, d)
    assert kernel.kernel.attrs["grid"][0] == 1  # one program: the scores once
    same_on_target(attention, args)


def test_key_block_tiles_fit_the_target() -> None:
    """A whole head of V's columns first (a program with fewer computes every score
    again for the others), then the most query rows, then the longest block of keys
    the registers (at most 256 scores: two accumulators per thread) and the target's
    shared memory hold; the bound the choice uses covers what the lowering allocates,
    and the kernels assemble with no spills."""
    assert key_block_tile(2, 600, 4, 4, 163 * 1024) == (2, 128, 4)
    assert key_block_tile(64, 1024, 64, 64, 163 * 1024) == (4, 32, 64)
    assert key_block_tile(64, 1024, 64, 64, 99 * 1024) == (4, 32, 64)
    assert key_block_tile(64, 1024, 64, 64, 40 * 1024) == (2, 16, 64)
    assert key_block_tile(64, 1024, 64, 128, 227 * 1024) == (2, 16, 128)
    assert key_block_tile(64, 1024, 64, 0, 163 * 1024) == (8, 32, 0)  # a row softmax
    assert key_block_tile(64, 1024, 64, 64, 1024) == (8, 16, 16)  # nothing fits
    rng = np.random.default_rng(15)
    for sq, d in [(64, 64), (2, 64), (8, 128)]:
        args = _scores(rng, (1, sq, d), (1, 1024, d), (1, 1024, d))
        for target in TARGETS:
            program = ts.jit(attention).lower(*args).target(target)
            (kernel,) = program.kernels
            tiles = program.tile.module.functions[kernel.name].attrs["tiles"]
            r, block, cols = key_block_tile(sq, 1024, d, d, shared_limit(target))
            assert (tiles[0], tiles[2], tiles[3]) == (r, block, cols)
            assert shared_plan(kernel.kernel).total <= key_block_bytes(r, block, d, cols)
            assembles_clean(kernel)


def test_wide_score_tiles_over_key_blocks_on_target() -> None:
    """A ``tile_shape`` of 32 x 16 for the scores: one score chain (90 KB) and P @ V's
    fit sm_80's 163 KB, where three score chains (270 KB) would not."""
    rng = np.random.default_rng(13)

    def wide(q, k, v):  # type: ignore[no-untyped-def]
        s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(32, 16))
        return op.matmul(op.softmax(s, axis=-1), v)

    args = _scores(rng, (1, 32, 4), (1, 50, 4), (1, 50, 4))
    same_on_target(wide, args, ["sm_80"])
    (kernel,) = ts.jit(wide).lower(*args).target("sm_80").kernels
    assert _accumulators(kernel) == [176 * 32 * 4, 176 * 32 * 16]


def test_what_key_blocks_still_refuse_names_the_graph_line() -> None:
    """Score tiles whose accumulators (one score chain and P @ V's) exceed shared
    memory: 32 x 16 scores and 32 x 16 of P @ V take 180 KB, more than sm_80's."""
    rng = np.random.default_rng(13)

    def wide(q, k, v):  # type: ignore[no-untyped-def]
        s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(32, 16))
        return op.matmul(op.softmax(s, axis=-1), v)

    args = _scores(rng, (1, 32, 4), (1, 64, 4), (1, 64, 16))
    with pytest.raises(TargetGenerationError, match="shared memory") as err:
        ts.jit(wide).lower(*args).run(*args, backend="target", target="sm_80")
    _, start = inspect.getsourcelines(wide)
    assert err.value.loc.line == start + 2  # P @ V, whose mma finds no room
