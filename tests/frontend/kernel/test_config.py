"""A kernel's configuration: every key is a lowering option with a value of its kind,
a tile extent or a name the kernel reads (``ts.tile.context().NAME``, in the body or
an inlined helper); anything else is an ArgumentError at the user's line, on every
backend, and in an autotune space before any entry is tried."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.gemm import gemm
from tessera.errors import ArgumentError
from tessera.frontend.kernel.config import OPTIONS


def _scale(x):  # inlined: reads a configuration value the kernel's body does not
    return x * ts.tile.context().SCALE


@ts.kernel
def scaled(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    ctx = ts.tile.context()
    if i < n:
        y[i] = _scale(x[i]) + ctx.SHIFT


@ts.kernel.autotune(space=dict(SCALE=[1.0, 2.0], numstages=[2, 3]))
def misspelt(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    if i < n:
        y[i] = x[i] * ts.tile.context().SCALE


def _gemm(target: str, config: dict[str, Any]) -> str:
    a = np.ones((128, 128), ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    return ts.compile_kernel(gemm, a, a, c, target=target, tile_shape=(64, 64, 64),
                             config=config).ptx


def test_names_the_kernel_reads_reach_it() -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    scaled(x, y, grid=8, config={"SCALE": 3.0, "SHIFT": 1.0, "num_warps": 4})
    assert np.array_equal(y, x * 3 + 1)


@pytest.mark.parametrize(("key", "nearest"), [("numwarps", "num_warps"),
                                              ("num_stage", "num_stages"),
                                              ("BLOCKM", "BLOCK_M"), ("zzz", None)])
def test_a_key_nothing_reads_is_refused_with_the_nearest(key: str, nearest: str | None
                                                         ) -> None:
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match=f"configuration key '{key}'") as info:
        scaled(x, y, grid=8, config={"SCALE": 1.0, "SHIFT": 0.0, key: 2})
    assert info.value.loc.file == __file__
    assert "it would change nothing" in str(info.value)
    hint = info.value.hint or ""
    assert (f"did you mean '{nearest}'?" == hint) if nearest else "ts.tile.context()" in hint
    assert np.array_equal(y, np.zeros(8, np.float32))


BAD = [("num_warps", 0), ("num_warps", 4.0), ("num_warps", True), ("num_stages", "3"),
       ("warp_specialize", "yes"), ("warp_specialize", 1), ("tma_store", 3),
       ("schedule", "zigzag"), ("group_m", 0), ("defer_pv", "later"), ("defer_pv", 1),
       ("unroll", 3), ("unroll", True), ("register_a", "no"), ("overlap_softmax", 0),
       ("persistent", "yes")]
GOOD = [("num_warps", 12), ("num_warps", np.int64(8)), ("num_stages", 3),
        ("warp_specialize", False), ("tma_store", np.bool_(True)),
        ("schedule", "pingpong"), ("group_m", 1), ("defer_pv", "fa3"),
        ("defer_pv", False), ("unroll", 2), ("register_a", True),
        ("overlap_softmax", False), ("persistent", True)]


@pytest.mark.parametrize(("key", "value"), BAD)
@pytest.mark.parametrize("backend", ["interpreter", "sm_80", "sm_90a"])
def test_an_option_of_the_wrong_kind_is_refused(key: str, value: Any, backend: str) -> None:
    with pytest.raises(ArgumentError, match=f"configuration value {key}=") as info:
        if backend == "interpreter":
            a = np.ones((128, 128), ml_dtypes.bfloat16)
            gemm(a, a, np.zeros((128, 128), np.float32), tile_shape=(64, 64, 64),
                 config={key: value})
        else:
            _gemm(backend, {key: value})
    assert info.value.loc.file == __file__
    assert OPTIONS[key].takes in str(info.value)


def test_every_option_has_a_good_and_a_bad_case() -> None:
    assert {k for k, _ in BAD} == set(OPTIONS) == {k for k, _ in GOOD}
    for key, value in GOOD:
        assert OPTIONS[key].ok(value), (key, value)


def test_none_is_the_default() -> None:
    """An option set to None is dropped, not read as False by a lowering that tests
    its truth (``warp_specialize=None`` keeps the warp-specialised pipeline)."""
    plain = _gemm("sm_90a", {})
    assert "setmaxnreg" in plain
    for key in ("warp_specialize", "tma_store", "num_warps", "schedule", "defer_pv"):
        assert _gemm("sm_90a", {key: None}) == plain, key


def test_a_mistake_in_an_autotune_space_is_not_a_dropped_entry() -> None:
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match="configuration key 'numstages'") as info:
        misspelt(x, y, grid=8)
    assert info.value.hint == "did you mean 'num_stages'?"
    assert info.value.loc.file == __file__
