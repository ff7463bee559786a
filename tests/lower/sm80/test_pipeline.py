"""The multi-stage cp.async GEMM pipeline for sm_80 (tessera.lower.sm80.pipeline):
structure, the num_stages knob, bits against the tile interpreter, and ptxas."""

from __future__ import annotations

import re
from typing import Any

import pytest

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.ir.core import walk
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target.async_ops import CpAsyncWait
from tessera.ir.dialects.target.ops import Bar, SharedAlloc
from tests.lower.sm90a.test_pipeline import GEMM, operands


def compile80(shape: tuple[int, int, int], tile: tuple[int, int, int],
              config: dict[str, Any] | None = None) -> Any:
    kw = {"config": config} if config else {}
    return ts.compile_kernel(GEMM, *operands(*shape), target="sm_80", tile_shape=tile, **kw)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_loop_waits_for_all_but_stages_minus_two_groups(stages: int) -> None:
    fn = compile80((128, 128, 256), (64, 64, 32), {"num_stages": stages}).kernel
    (loop,) = [i for i in walk(fn.body) if isinstance(i.op, For)]
    body = list(walk(loop.regions[0].block))
    assert [i.op.n for i in body if isinstance(i.op, CpAsyncWait)] == [stages - 2]
    assert sum(isinstance(i.op, Bar) for i in body) == 1
    ring = sorted(i.op.size for i in walk(fn.body) if isinstance(i.op, SharedAlloc))
    assert ring == [stages * 64 * 32 * 2, stages * 32 * 64 * 2]


def test_default_is_three_stages_and_one_stage_keeps_the_tile_program() -> None:
    ptx = compile80((128, 128, 256), (64, 64, 32)).ptx
    loop = re.search(r"\$L__for_\d+:(.*?)\n\$L__endfor", ptx, re.S)
    assert loop and "cp.async.wait_group 1;" in loop.group(1)
    one = compile80((128, 128, 256), (64, 64, 32), {"num_stages": 1}).ptx
    assert "cp.async.wait_group 1;" not in one and "ring" not in one


def test_stages_beyond_shared_memory_are_refused() -> None:
    with pytest.raises(UnsupportedError, match="shared memory") as err:
        compile80((256, 256, 256), (128, 128, 64), {"num_stages": 6})
    assert err.value.loc is not None and err.value.loc.file.endswith("gemm.py")


@pytest.mark.parametrize("shape, tile, config", [
    ((128, 128, 256), (64, 64, 32), None),
    ((128, 192, 96), (64, 64, 32), {"num_stages": 4}),
    ((256, 128, 256), (128, 64, 64), {"num_stages": 2}),
    ((64, 128, 80), (64, 64, 16), {"num_stages": 3}),
])
def test_multistage_gemm_has_the_tile_interpreters_bits(
        shape: tuple[int, int, int], tile: tuple[int, int, int],
        config: dict[str, Any] | None) -> None:
    kw = {"config": config} if config else {}
    ts.check_against_reference(GEMM, *operands(*shape), backend="target", target="sm_80",
                               tile_shape=tile, **kw)


def test_ptxas_assembles_the_multistage_gemm_without_spills() -> None:
    pathfinder = pytest.importorskip("cuda.pathfinder")
    if not pathfinder.find_nvidia_binary_utility("ptxas"):
        pytest.skip("ptxas is not installed")
    stats = compile80((256, 256, 256), (128, 128, 32)).assemble().stats["gemm"]
    assert stats.spill_stores == 0 and stats.spill_loads == 0
