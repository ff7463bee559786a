"""``schedule.collective``: the per-device schedules of placed programs read back to the
same text, and every rule of the op is an error at the offending line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import IRVerifyError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.types import TensorType, parse_tensor_type

GOLDEN = Path(__file__).parents[3] / "golden" / "schedule_mesh"
CASES = sorted(p.name for p in GOLDEN.glob("*.tir"))
FAST = (GOLDEN / "tp_mlp_fast.tir").read_text()


@pytest.mark.parametrize("case", CASES)
def test_golden_round_trip(case: str) -> None:
    text = (GOLDEN / case).read_text()
    module = parse_module(text)
    verify_module(module)
    for fn in module.functions.values():
        schedule_ops.check_function(fn, collectives=True)
        steps = [i.op for i in fn.body.instrs if isinstance(i.op,
                                                            schedule_ops.ScheduledCollective)]
        assert steps and [s.label for s in steps] == [f"c{k}" for k in range(len(steps))]
    assert print_module(module) == text


def test_a_schedule_with_collectives_is_not_a_single_device_schedule() -> None:
    fn = next(iter(parse_module(FAST).functions.values()))
    with pytest.raises(IRVerifyError, match=r"not schedule\.collective") as info:
        schedule_ops.check_function(fn)
    assert "runs on a mesh" in (info.value.hint or "")


def _verify_error(text: str) -> IRVerifyError:
    with pytest.raises(IRVerifyError) as info:
        verify_module(parse_module(text, "tp.tir"))
    return info.value


#: (the replacements: old, new, how many (-1: all); the message; the line of the error)
BROKEN = [
    # a local result that no device holds of the value the region yields
    ([(") : (tensor<8x8xf32>) -> tensor<8x8xf32>\n    schedule.return(%9) : (tensor<8x8xf32>)",
       ") : (tensor<8x8xf32>) -> tensor<4x8xf32>\n    schedule.return(%9) : (tensor<4x8xf32>)",
       1), ("-> (tensor<8x8xf32>) {", "-> (tensor<4x8xf32>) {", 1)],
     "is not a device's block of the value its region yields", 16),
    # a local operand that is not a block of the region's argument (32 global rows)
    ([("tensor<16x8xf32, mesh", "tensor<32x8xf32, mesh", -1)],
     "is not a device's block of its region's argument", 16),
    # only Graph IR collectives in the region
    ([('graph.all_reduce(%10) {axis = "tp"}', "graph.exp(%10)", 1), (" partial(tp)", "", -1)],
     "hold Graph IR collectives, not graph.exp", 16),
    # local values in, local values out
    ([('schedule.collective(%5) {label = "c0"} (\n      ^bb(%10: ',
       'schedule.collective(%5, %5) {label = "c0"} (\n      ^bb(%10: ', 1),
      (") : (tensor<8x8xf32>) -> tensor<8x8xf32>\n    schedule.return",
       ") : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>\n    schedule.return", 1)],
     "one operand and one result", 16),
]


@pytest.mark.parametrize(("changes", "message", "line"), BROKEN)
def test_each_rule_is_an_error_at_its_line(changes: list[tuple[str, str, int]], message: str,
                                           line: int) -> None:
    text = FAST
    for old, new, count in changes:
        assert old in text
        text = text.replace(old, new, count)
    err = _verify_error(text)
    assert message in str(err)
    assert err.loc is not None and err.loc.line == line


def test_block_fits_takes_array_split_pieces() -> None:
    placed = parse_tensor_type("10x13xf32, mesh<dp=2, tp=4>[dp, tp]")
    for shape, ok in [((5, 4), True), ((5, 3), True), ((5, 2), False), ((4, 4), False)]:
        assert schedule_ops.block_fits(TensorType(shape, placed.element), placed) is ok
    assert not schedule_ops.block_fits(placed, placed)  # a local type is unplaced


def test_the_graph_interpreter_refuses_a_collective_between_devices() -> None:
    import numpy as np

    from tessera.errors import InterpretError
    from tessera.interp import schedule as _schedule_rules  # noqa: F401 (registers)
    from tessera.interp.graph import run_function

    fn = next(iter(parse_module(FAST, "tp.tir").functions.values()))
    args = [np.ones((8, 8), np.float32)] * 3
    with pytest.raises(InterpretError, match="runs between the devices of a mesh") as info:
        run_function(fn, args)
    assert info.value.loc is not None and info.value.loc.line == 16
    assert "backend='tile'" in (info.value.hint or "")
