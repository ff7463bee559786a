"""Tile IR: golden text of the seed kernels, print -> parse -> print identity, the parsed
text runs like the kernel, and invalid IR is rejected with a reason."""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera.conformance import tile_seeds as seeds
from tessera.errors import IRParseError, IRVerifyError
from tessera.interp.tile import LaunchGeometry, launch, prepare
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.numerics import dtype
from tests.tile.test_seeds import example

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tile"
UPDATE = bool(os.environ.get("TESSERA_UPDATE_GOLDEN"))
F32, BF16 = np.float32, ml_dtypes.bfloat16


def _cases() -> dict[str, tuple[object, tuple, dict]]:
    fa, gemm, dbuf = example("flash_attention"), example("gemm"), \
        example("double_buffered_gemm")
    chunks, hier = example("process_chunks"), example("memory_hierarchy")
    cfg = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
    z = np.zeros
    return {
        "saxpy": (seeds.saxpy, (z(16, F32), z(16, F32), 2.0), {}),
        "tile_example": (seeds.tile_example, (z(8, F32),), {}),
        "cooperative_reduction": (seeds.cooperative_reduction, (z(256, F32),),
                                  dict(grid=1, group_size=128)),
        "gemm_seed": (seeds.gemm, (z((128, 64), BF16), z((64, 128), BF16),
                                   z((128, 128), F32)), {}),
        "double_buffered_gemm_seed": (seeds.double_buffered_gemm,
                                      (z((64, 128), BF16), z((128, 64), BF16),
                                       z((64, 64), F32)), {}),
        "optimized_memory_access_seed": (seeds.optimized_memory_access,
                                         (z((128, 128), BF16), z((128, 128), BF16)),
                                         dict(grid=1)),
        "flash_attention_seed": (seeds.flash_attention,
                                 (z((2, 128, 64), BF16),) * 3, dict(config=cfg)),
        "flash_attention": (fa.flash_attention, (z((2, 128, 64), BF16),) * 3,
                            dict(config=cfg, is_causal=True)),
        "gemm": (gemm.gemm, (z((128, 64), BF16), z((64, 128), BF16), z((128, 128), F32)),
                 {}),
        "double_buffered_gemm": (dbuf.double_buffered_gemm,
                                 (z((128, 128), BF16), z((128, 64), BF16),
                                  z((128, 64), F32)), {}),
        "process_chunks": (chunks.process_chunks, (z(256, F32), z(256, F32)),
                           dict(grid=2, group_size=4)),
        "memory_hierarchy": (hier.memory_hierarchy_example,
                             (z((128, 128), F32), z((128, 128), F32)), {}),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_tile_ir(name: str) -> None:
    kernel, args, launch_kw = CASES[name]
    text = kernel.inspect_ir("tile", *args, **launch_kw)
    path = GOLDEN / f"{name}.tir"
    if UPDATE or not path.exists():
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_text_round_trips(name: str) -> None:
    text = (GOLDEN / f"{name}.tir").read_text()
    module = parse_module(text, f"{name}.tir")
    verify_module(module)
    assert print_module(module) == text


def test_parsed_ir_runs_like_the_kernel() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    kernel = example("gemm").gemm
    c1 = np.zeros((128, 128), F32)
    kernel(a, b, c1)
    module = parse_module((GOLDEN / "gemm.tir").read_text())
    fn = module.functions["gemm"]
    c2 = np.zeros((128, 128), F32)
    out = launch(prepare(fn, fast=False), [a, b, c2], LaunchGeometry(1, tuple(fn.attrs["grid"]), 1))
    assert out.array is c2 and np.array_equal(c1, c2)


def _err(op, types, match: str) -> None:
    with pytest.raises(IRVerifyError, match=match):
        op.infer(types)


def test_invalid_tile_ir_is_rejected() -> None:
    f32 = dtype("f32")
    t = TensorType((4, 4), f32)
    _err(tile_compute.Add(), [t, TensorType((4,), f32)], "shapes")
    _err(tile_compute.Add(), [t, TensorType((4, 4), dtype("bf16"))], "mixes")
    _err(tile_compute.Mma(f32), [t, TensorType((3, 4), f32)], "do not contract")
    _err(tile_compute.Broadcast((4, 4), (0, 0)), [TensorType((4,), f32)], "dims")
    _err(tile_memory.CpAsync(), [MemRefType("global", (4,), f32), MemRefType("shared", (4,), f32)],
         "copies global into shared")
    _err(tile_memory.Store(), [MemRefType("global", (4,), f32), TensorType((2,), f32)], "view")
    _err(tile_memory.View((2,), (0,)), [MemRefType("global", (4,), f32), TensorType((), f32)],
         "int")
    _err(tile_compute.Reduce("prod"), [t], "kind")


def test_memory_types_print_and_parse() -> None:
    text = """tile.kernel @k(%A: gmem<[3]x8x4xbf16@accum(f32)>) -> () {
  %0 = tile.alloc_shared() {shape = [8, 4], element = #bf16} : () -> smem<8x4xbf16>
  tile.return() : () -> ()
}
"""
    from tessera.ir import parse_function, print_function

    fn = parse_function(text)
    assert fn.args[0].type.batch == 3 and fn.args[0].type.shape == (8, 4)
    assert print_function(fn) == text
    with pytest.raises(IRParseError):
        parse_function(text.replace("smem<8x4xbf16>", "smem<8x4xnope>"))
