"""``@ts.kernel.autotune``: a deterministic cost model picks the configuration, per call
signature, and the values reach ts.tile.context()."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import ArgumentError
from tessera.frontend.kernel.tuning.autotune import Estimate, choose, configurations, estimate


@ts.kernel.autotune(space=dict(BLOCK_M=[16, 32, 64], num_warps=[4, 8]))
def scale_rows(x: ts.Tensor["M", "N", ts.f32], y: ts.Tensor["M", "N", ts.f32]):
    ctx = ts.tile.context()
    y[tile_m:tile_m + ctx.BLOCK_M] = x[tile_m:tile_m + BM] * 2.0


def test_configurations_are_enumerated_in_product_order() -> None:
    assert configurations(dict(a=[1, 2], b=["x", "y"])) == [
        dict(a=1, b="x"), dict(a=1, b="y"), dict(a=2, b="x"), dict(a=2, b="y")]
    with pytest.raises(ArgumentError):
        configurations(dict(a=[]))


def test_ties_go_to_the_first_configuration() -> None:
    e = [Estimate((("k", i),), s, 0, 0, 0, 0, 1) for i, s in enumerate([2.0, 1.0, 1.0])]
    assert dict(choose(e).config) == {"k": 1}


def test_choice_is_cached_per_signature_and_reaches_the_context() -> None:
    x = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    y = np.zeros_like(x)
    scale_rows(x, y)
    assert np.array_equal(y, 2 * x)
    chosen = dict(scale_rows.last_config)
    assert set(chosen) == {"BLOCK_M", "num_warps"}
    assert f'["BLOCK_M", {chosen["BLOCK_M"]}]' in scale_rows.inspect_ir("tile")
    assert f'tile_shape = [{chosen["BLOCK_M"]}, 64, 32]' in scale_rows.inspect_ir("tile")
    scale_rows(x, y)
    assert len(scale_rows.tuned) == 1 and scale_rows.last_config == chosen
    big = np.zeros((256, 8), np.float32)
    scale_rows(big, np.zeros_like(big))
    assert len(scale_rows.tuned) == 2
    report = scale_rows.tuning_report()
    assert report.count("us (model)") == 6


def test_estimates_are_deterministic_and_count_the_work() -> None:
    x = np.zeros((64, 8), np.float32)
    m1 = scale_rows.compile(x, np.zeros_like(x), config=dict(BLOCK_M=16, num_warps=4))
    m2 = scale_rows.compile(x, np.zeros_like(x), config=dict(BLOCK_M=16, num_warps=4))
    e1 = estimate(m1.functions["scale_rows"], dict(BLOCK_M=16, num_warps=4))
    e2 = estimate(m2.functions["scale_rows"], dict(BLOCK_M=16, num_warps=4))
    assert e1 == e2
    assert e1.bytes == 2 * 64 * 8 * 4  # every element read once and written once
    assert e1.groups == 4
