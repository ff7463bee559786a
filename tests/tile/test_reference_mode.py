"""``mode="reference"``: the plain definition of Tile IR, op by op and group after group,
with none of the simulator's fast paths. Checked mode keeps every fast path and must
give the reference's bits and reports."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
import tessera.interp.tile.flow as flow
from tessera.interp.tile import exec as tile_exec
from tests.tile import bugs, bugs_order, correct_order
from tests.tile.fastpaths import block_reduction
from tests.tile.test_schedules import SUITES, _report
from tests.tile.test_seeds import example
from tests.tile.test_simulator import gemm_f32, split_k

FA = example("flash_attention")


def _bits(arrays: Any) -> list[bytes]:
    return [np.ascontiguousarray(a).tobytes() for a in arrays]


@pytest.mark.parametrize("suite, k", SUITES,
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}-{k}" for m, k in SUITES])
def test_reference_reports_what_checked_mode_reports(suite: Any, k: int) -> None:
    _name, bad, good, launch, make = suite.BUGS[k - 1]
    assert _report(bad, make(), mode="reference", **launch) == \
        _report(bad, make(), mode="checked", **launch)
    ref, chk = make(), make()
    good(*ref, mode="reference", **launch)
    good(*chk, mode="checked", **launch)
    assert _bits(ref) == _bits(chk)


@pytest.mark.parametrize("case", correct_order.CASES, ids=[c[0] for c in correct_order.CASES])
def test_reference_runs_the_correct_kernels_to_the_same_bits(case: Any) -> None:
    _name, kernel, launch, make, _reference = case
    ref, chk = make(), make()
    kernel(*ref, mode="reference", **launch)
    kernel(*chk, mode="checked", **launch)
    assert _bits(ref) == _bits(chk)


def test_reference_takes_no_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop fast paths and the fusions are never consulted in reference mode."""
    def refuse(*_args: Any) -> Any:
        raise AssertionError("a fast path was consulted")
    for name in ("strided_sum", "tree_sum", "deferrable", "staged_loop"):
        monkeypatch.setattr(flow, name, refuse)
    monkeypatch.setattr(tile_exec, "fusions", refuse)
    monkeypatch.setattr(tile_exec, "quiet_accesses", refuse)
    data = np.arange(2048, dtype=np.float32)
    total = np.zeros(1, np.float32)
    block_reduction()(data, total, grid=4, group_size=64, mode="reference")
    assert total[0] == data.sum()
    a = np.ones((32, 32), np.float32)
    c = np.zeros((32, 32), np.float32)
    gemm_f32(a, a, c, tile_shape=(16, 16, 8), mode="reference")
    assert (c == 32).all()


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_drawn_block_reductions_agree(groups: int, per: int, seed: int) -> None:
    """Strided per-tile sums and the shared-memory tree (both fast paths in checked)."""
    data = np.random.default_rng(seed).standard_normal(groups * 64 * per).astype(np.float32)
    out = [np.zeros(1, np.float32) for _ in range(2)]
    kernel = block_reduction()
    kernel(data, out[0], grid=groups, group_size=64, mode="reference")
    kernel(data, out[1], grid=groups, group_size=64, mode="checked")
    assert _bits(out[:1]) == _bits(out[1:])


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([(16, 16, 16), (32, 16, 8), (16, 32, 16)]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_drawn_gemms_agree(tile: tuple[int, int, int], gm: int, gn: int, gk: int,
                           seed: int) -> None:
    """K loops of ``mma`` (deferred and fused in checked mode), and split-K ``+=``."""
    bm, bn, bk = tile
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((gm * bm, gk * bk * 2)).astype(np.float32)
    b = rng.standard_normal((gk * bk * 2, gn * bn)).astype(np.float32)
    for kernel in (gemm_f32, split_k):
        out = [np.zeros((gm * bm, gn * bn), np.float32) for _ in range(2)]
        kernel(a, b, out[0], tile_shape=tile, mode="reference")
        kernel(a, b, out[1], tile_shape=tile, mode="checked")
        assert _bits(out[:1]) == _bits(out[1:])


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([64, 128, 192]), st.booleans(), st.integers(0, 2**31 - 1))
def test_drawn_flash_attention_agrees(seq: int, causal: bool, seed: int) -> None:
    """Online softmax: repeated loads of one tile (remembered in checked mode), row
    reductions, the specified exp and two ``mma`` per step."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, seq, 32)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    ref = FA.flash_attention(q, k, v, is_causal=causal, mode="reference")
    chk = FA.flash_attention(q, k, v, is_causal=causal, mode="checked")
    assert _bits([ref]) == _bits([chk])


def test_unknown_mode_lists_reference() -> None:
    with pytest.raises(ts.ArgumentError, match="reference"):
        bugs.aligned(np.zeros(8, np.float32), np.zeros(8, np.float32), mode="exact")
    assert bugs_order.BUGS  # the suites this file compares
