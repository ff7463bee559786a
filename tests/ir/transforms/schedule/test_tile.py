"""``tile``: sizes from hints or the cost model, checked hints with the user's line,
reduction strategies that keep exact-mode reductions sequential, stages, placements."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.arch.limits import H100
from tessera.ir import PassManager, parse_module
from tessera.ir.core import Function, Instr, Module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.schedule import schedule_module
from tessera.ir.transforms.schedule.tile import Tile, footprint
from tests.ir.transforms.schedule.programs import traced

F32 = np.float32


def kernels_of(fn: Any, *args: Any) -> list[Instr]:
    jitted = ts.jit(fn)
    jitted.compile(*args)
    graph = jitted.last.function
    return schedule_ops.kernels(schedule_module(Module("m", {graph.name: graph}))
                                .functions[graph.name])


def test_a_tile_shape_hint_sets_the_matmul_tiles_and_stages() -> None:
    a, b = np.ones((512, 256), F32), np.ones((256, 512), F32)
    (kernel,) = kernels_of(lambda a, b: op.matmul(a, b, tile_shape=(128, 64, 64)), a, b)
    assert kernel.op.tile == (128, 64, 64)
    # four K tiles; one stage of A and B tiles is (128*64 + 64*64) * 4 bytes = 48 KiB
    assert kernel.op.stages == 4
    assert kernel.op.inputs == ("shared", "shared")
    assert kernel.op.reduction == "in_tile" and kernel.op.kinds == ("grid", "grid", "seq")


def test_default_matmul_tiles_follow_the_cost_model() -> None:
    a = np.ones((512, 512), F32)
    (kernel,) = kernels_of(lambda a, b: a @ b, a, a)
    assert kernel.op.tile == (128, 128, 32)  # a 4-byte format: 32 elements of K
    (small,) = kernels_of(lambda a, b: a @ b, np.ones((8, 40), F32), np.ones((40, 24), F32))
    assert small.op.tile == (8, 32, 32)  # powers of two no longer than the loops need
    bf16 = np.ones((512, 512), ts.bf16.np_dtype)
    (half,) = kernels_of(lambda a, b: a @ b, bf16, bf16)
    assert half.op.tile[2] == 64


def test_every_chosen_kernel_fits_the_target() -> None:
    for name in ("block", "causal_where", "layernorm"):
        fn, _ = traced(name)
        scheduled = schedule_module(Module("m", {fn.name: fn})).functions[fn.name]
        for kernel in schedule_ops.kernels(scheduled):
            space = schedule_ops.space_of(kernel)
            shared, regs = footprint(kernel, space, list(kernel.op.tile), kernel.op.stages,
                                     kernel.op.inputs, kernel.op.temps)
            assert shared <= H100.shared_per_block and regs <= H100.register_bytes


def test_attention_stages_q_k_v_and_p_through_shared_memory() -> None:
    fn, _ = traced("causal_where")
    (kernel,) = schedule_ops.kernels(schedule_module(Module("m", {fn.name: fn}))
                                     .functions[fn.name])
    block = kernel.regions[0].block
    placed = dict(zip(block.args, kernel.op.inputs))
    assert [placed[a] for a in block.args if a.type.element == ts.f32] == ["shared"] * 3
    assert [placed[a] for a in block.args if a.type.element != ts.f32] == ["global"]  # mask
    temps = dict(zip([r for i in block.instrs[:-1] for r in i.results], kernel.op.temps))
    softmax = next(i for i in block.instrs if i.op.name == "graph.softmax")
    transpose = next(i for i in block.instrs if i.op.name == "graph.transpose")
    assert temps[softmax.results[0]] == "shared"  # P feeds the P @ V matmul
    assert temps[transpose.results[0]] == "view"


def test_rows_that_fit_are_reduced_in_one_tile_and_long_rows_in_two_passes() -> None:
    (short,) = kernels_of(lambda x: op.softmax(x), np.ones((64, 1024), F32))
    assert short.op.reduction == "in_tile" and short.op.tile[-1] == 1024
    (long,) = kernels_of(lambda x: op.softmax(x), np.ones((2, 1 << 17), F32))
    assert long.op.reduction == "two_pass" and long.op.tile[-1] < 1 << 17
    assert long.op.kinds == ("grid", "seq")


def _one_matmul(element: str, m: int, k: int, n: int) -> Function:
    return parse_module(f"""
    graph.func @f(%a: tensor<{m}x{k}x{element}>, %b: tensor<{k}x{n}x{element}>)
        -> (tensor<{m}x{n}x{element}>) {{
      %0 = graph.matmul(%a, %b) : (tensor<{m}x{k}x{element}>, tensor<{k}x{n}x{element}>)
          -> tensor<{m}x{n}x{element}>
      graph.return(%0) : (tensor<{m}x{n}x{element}>) -> ()
    }}""").functions["f"]


def _tiled(fn: Function, mode: str = "exact") -> schedule_ops.ScheduledKernel:
    module = schedule_module(Module("m", {"f": fn}), ("graph-to-schedule", "fuse"))
    module = PassManager([Tile(mode=mode)]).run(module)
    (kernel,) = schedule_ops.kernels(module.functions["f"])
    assert isinstance(kernel.op, schedule_ops.ScheduledKernel)
    return kernel.op


def test_exact_float_reductions_are_never_split() -> None:
    op_ = _tiled(_one_matmul("f32", 16, 8192, 16))
    assert op_.reduction == "in_tile" and op_.split == 1 and "split" not in op_.kinds


def test_split_k_for_exact_integer_sums_and_in_fast_mode() -> None:
    ints = _tiled(_one_matmul("int32", 16, 8192, 16))
    assert ints.reduction == "split_k" and ints.kinds == ("grid", "grid", "split")
    assert 1 < ints.split <= H100.sms
    fast = _tiled(_one_matmul("f32", 16, 8192, 16), mode="fast")
    assert fast.reduction == "split_k" and fast.split > 1
    # a grid that already fills the machine is not split
    assert _tiled(_one_matmul("int32", 2048, 8192, 2048)).split == 1


def _line_of(text: str, fn: Any) -> int:
    source, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(source) if text in line)


def test_a_tile_shape_that_cannot_fit_names_the_users_line() -> None:
    def huge(a: Any, b: Any) -> Any:
        return op.matmul(a, b, tile_shape=(256, 256, 128))  # 256 KiB per stage

    a = np.ones((512, 512), F32)
    with pytest.raises(schedule_ops.TileShapeError) as info:
        ts.inspect_ir(huge, "schedule", a, a)
    err = info.value
    assert err.loc is not None and err.loc.file == __file__
    assert err.loc.line == _line_of("tile_shape=(256, 256, 128)", huge)
    assert "shared memory" in err.message and "227 KiB" in err.message
    assert isinstance(err, ts.TesseraError)


def test_fused_matmuls_with_conflicting_hints_name_the_second() -> None:
    def attention(q: Any, k: Any, v: Any) -> Any:
        s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(64, 64, 32))
        return op.matmul(op.softmax(s), v, tile_shape=(128, 32, 64))  # BM differs

    x = np.ones((2, 128, 32), F32)
    with pytest.raises(schedule_ops.TileShapeError) as info:
        ts.inspect_ir(attention, "schedule", x, x, x)
    assert info.value.loc.line == _line_of("tile_shape=(128, 32, 64)", attention)
    assert "cuts a loop" in info.value.message


def test_a_malformed_hint_in_ir_text_names_its_line() -> None:
    text = """module @m {
  graph.func @f(%a: tensor<8x8xf32>) -> (tensor<8x8xf32>) {
    %0 = graph.matmul(%a, %a) {tile_shape = [0, 8]} : (tensor<8x8xf32>, tensor<8x8xf32>)
        -> tensor<8x8xf32>
    graph.return(%0) : (tensor<8x8xf32>) -> ()
  }
}
"""
    with pytest.raises(schedule_ops.TileShapeError, match="not a tile shape") as info:
        schedule_module(parse_module(text, "model.tir"))
    assert str(info.value.loc) == "model.tir:3"  # the line of the matmul


@pytest.mark.parametrize("keys,rows", [(128, 128), (129, 64), (256, 64), (512, 16),
                                       (1024, 128)])
def test_attention_keeps_whole_key_rows_with_fewer_queries_where_they_fit(
        keys: int, rows: int) -> None:
    """f32 self-attention with d = 64 on H100, exact mode: 128 keys fit a program of 128
    queries; up to 512 keys fit whole with fewer queries (one pass over the keys, V's
    columns kept whole); 1024 keys do not fit even 16 queries, and are cut into blocks
    of 128 beside 128 queries (``two_pass``)."""
    from tests.ir.transforms.schedule.programs import attention

    q = np.ones((4, keys, 64), F32)  # self-attention: as many queries as keys
    (kernel,) = kernels_of(attention, q, q, q)
    batch, queries, columns, loop = 0, 1, 2, 3  # V's columns, then the keys
    tile = kernel.op.tile
    assert (tile[batch], tile[queries], tile[columns]) == (1, rows, 64)
    if keys <= 512:
        assert kernel.op.reduction == "in_tile" and tile[loop] >= keys
    else:
        assert kernel.op.reduction == "two_pass" and tile[loop] == 128
    shared, regs = footprint(kernel, schedule_ops.space_of(kernel), list(tile),
                             kernel.op.stages, kernel.op.inputs, kernel.op.temps)
    assert shared <= H100.shared_per_block and regs <= H100.register_bytes


def test_fast_mode_streams_the_keys_of_attention_in_blocks() -> None:
    """Fast mode keeps FlashAttention's tiles, 128 queries by blocks of 128 keys: its
    online softmax is one pass over the key blocks (to_tile.attention.flash)."""
    from tests.ir.transforms.schedule.programs import attention

    q = np.ones((4, 256, 64), F32)
    jitted = ts.jit(attention, mode="fast")
    jitted.compile(q, q, q)
    graph = jitted.last.function
    (kernel,) = schedule_ops.kernels(schedule_module(Module("m", {graph.name: graph}),
                                                     mode="fast").functions[graph.name])
    assert kernel.op.reduction == "two_pass" and kernel.op.tile[1:4] == (128, 64, 128)


def test_the_jit_s_mode_reaches_the_tile_pass() -> None:
    """``mode="fast"`` schedules float contractions with split_k; exact mode never."""
    a, b = np.ones((16, 8192), F32), np.ones((8192, 16), F32)
    fast = ts.jit(lambda x, y: x @ y, mode="fast").lower(a, b).ir("schedule")
    exact = ts.jit(lambda x, y: x @ y).lower(a, b).ir("schedule")
    assert 'reduction = "split_k"' in fast and 'reduction = "in_tile"' in exact
