"""Launch geometry (:mod:`tessera.lower.geometry`): the grouped order in which the CTAs
of a pipelined GEMM walk the output tiles. The order against Triton's
``GROUP_SIZE_M`` formula (a one-to-one map, run in the Target IR interpreter), the
same bits as C order on both targets, and which kernels get it."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.gemm import gemm
from tessera.errors import ArgumentError
from tessera.ir.core import Value
from tessera.lower.emit import TargetEmitter
from tessera.lower.geometry import grouped
from tests.lower.arith.test_mathlib import THREADS, address, kernel

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")
BF16 = ml_dtypes.bfloat16


def triton_order(pid: int, rows: int, cols: int, g: int) -> int:
    """Triton's matmul tutorial's grouped program order, as the linear tile index."""
    per = g * cols
    first = pid // per * g
    size = min(rows - first, g)
    return (first + pid % per % size) * cols + pid % per // size


@pytest.mark.parametrize(("rows", "cols", "g"), [(12, 32, 8), (16, 16, 4), (3, 128, 2),
                                                 (8, 48, 8)])
def test_grouped_order_is_tritons_and_one_to_one(rows: int, cols: int, g: int) -> None:
    n = rows * cols
    assert n % THREADS == 0

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        pid = e.cvt(i, "s32", "u32")
        e.st("global", address(e, p[0], i, 4), grouped(e, pid, rows, cols, g), "s32")
    out = np.zeros(n, np.int32)
    target.run_target(kernel("order", 1, n // THREADS, body), [out])
    assert out.tolist() == [triton_order(p, rows, cols, g) for p in range(n)]
    assert sorted(out.tolist()) == list(range(n))
    # a band's first CTAs walk down its rows, column by column
    assert out[:g].tolist() == [r * cols for r in range(min(g, rows))]


def launch(target_name: str, m: int, n: int, tile: tuple[int, int, int],
           config: dict[str, Any]) -> np.ndarray:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, 128)).astype(BF16)
    b = rng.standard_normal((128, n)).astype(BF16)
    c = np.zeros((m, n), np.float32)
    ts.launch(gemm, None, (a, b, c), backend="target", target=target_name, tile_shape=tile,
              config=config)
    return c


@pytest.mark.parametrize(("target_name", "tile"), [("sm_90a", (128, 128, 64)),
                                                   ("sm_80", (64, 64, 32))])
def test_grouped_gemm_gives_the_bits_of_c_order(target_name: str, tile: tuple[int, ...]
                                                ) -> None:
    """Three rows of tiles in bands of two (the last band one row): every tile computed
    once, by a different CTA than in C order, with the same bits."""
    m, n = 3 * tile[0], 2 * tile[1]
    q = np.zeros((m, 128), BF16)
    c = ts.compile_kernel(gemm, q, np.zeros((128, n), BF16), np.zeros((m, n), np.float32),
                          target=target_name, tile_shape=tile, config={"group_m": 2})
    assert c.kernel.attrs["raster"] == "CTAs in grouped order: bands of 2 tile rows"
    grouped_c = launch(target_name, m, n, tile, {"group_m": 2})
    c_order = launch(target_name, m, n, tile, {"group_m": 1})
    assert np.array_equal(grouped_c.view(np.uint32), c_order.view(np.uint32))
    assert np.abs(grouped_c).min() > 0  # every tile written


def test_which_kernels_walk_in_grouped_order() -> None:
    a, c = np.zeros((512, 512), BF16), np.zeros((512, 512), np.float32)

    def raster(**launch: Any) -> Any:
        k = ts.compile_kernel(gemm, a, a, c, target="sm_90a", tile_shape=(128, 128, 64),
                              **launch).kernel
        return k.attrs.get("raster")
    assert raster() == "CTAs in grouped order: bands of 4 tile rows"  # min(8, 4 rows)
    assert raster(config={"group_m": 1}) is None
    with pytest.raises(ArgumentError, match="group_m=0") as err:  # at the call's line
        raster(config={"group_m": 0})
    assert err.value.loc.file == __file__
    one_row = ts.compile_kernel(gemm, a[:128], a, c[:128], target="sm_90a",
                                tile_shape=(128, 128, 64)).kernel
    assert one_row.attrs.get("raster") is None
