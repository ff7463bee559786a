"""Schedule IR text: goldens read back to the same text, and every rule of
``schedule.kernel`` and ``schedule.func`` is an error at the offending line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import IRParseError, IRVerifyError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects import schedule as schedule_ops

GOLDEN = Path(__file__).parents[3] / "golden" / "schedule"
CASES = sorted(p.name for p in GOLDEN.glob("*.tir"))
MLP = (GOLDEN / "mlp.tir").read_text()


@pytest.mark.parametrize("case", CASES)
def test_golden_round_trip(case: str) -> None:
    text = (GOLDEN / case).read_text()
    module = parse_module(text)
    verify_module(module)
    for fn in module.functions.values():
        schedule_ops.check_function(fn)
        assert all(k.op.tile for k in schedule_ops.kernels(fn))
    assert print_module(module) == text


def test_goldens_cover_each_reduction_and_placement() -> None:
    seen = {"reduction": set(), "inputs": set(), "temps": set()}
    for case in CASES:
        for fn in parse_module((GOLDEN / case).read_text()).functions.values():
            for kernel in schedule_ops.kernels(fn):
                seen["reduction"].add(kernel.op.reduction)
                seen["inputs"] |= set(kernel.op.inputs)
                seen["temps"] |= set(kernel.op.temps)
    assert seen == {"reduction": {"in_tile"}, "inputs": {"global", "shared"},
                    "temps": {"registers", "shared", "view"}}


def _verify_error(text: str) -> IRVerifyError:
    with pytest.raises(IRVerifyError) as info:
        verify_module(parse_module(text, "mlp.tir"))
    return info.value


# (what is changed, the replacement, the message, the line of the error)
BROKEN = [
    ('extents = [16, 32, 8]', 'extents = [16, 32, 16]', "iteration space", 3),
    ('kinds = ["grid", "grid", "seq"], tile = [16, 32, 8], reduction = "in_tile"',
     'kinds = ["grid", "grid", "grid"], tile = [16, 32, 8]', "are not its region's iteration", 3),
    ('kinds = ["grid", "grid", "seq"], tile = [16, 32, 8]',
     'kinds = ["grid", "grid", "loop"], tile = [16, 32, 8]', "loop kind 'loop'", 3),
    ('tile = [16, 32, 8]', 'tile = [16, 32]', "one positive size per loop", 3),
    ('label = "k0"', 'label = "k0", order = [0, 0, 2]', "not a permutation", 3),
    ('label = "k0"', 'label = "k0", stages = 0', "stages must be >= 1", 3),
    ('tile = [16, 8, 32], reduction = "in_tile"', 'tile = [16, 8, 32], reduction = "none"',
     "does not fit its loops", 12),
    ('reduction = "in_tile", inputs = ["shared", "shared", "global"], temps = ["registers", '
     '"view", "registers", "registers"]',
     'reduction = "split_k", inputs = ["shared", "shared", "global"], temps = ["registers", '
     '"view", "registers", "registers"]', "split_k needs exactly one 'split' loop", 3),
    ('inputs = ["shared", "shared", "global"], temps = ["registers", "view", "registers", '
     '"registers"]', 'inputs = ["shared", "global"], temps = ["registers", "view", '
     '"registers", "registers"]', "places 2 inputs", 3),
    ('temps = ["registers", "view", "registers"]', 'temps = ["registers", "view"]',
     "places 2 temps", 12),
    ('temps = ["registers", "view", "registers"]', 'temps = ["registers", "view", "disk"]',
     "temp placement 'disk'", 12),
    ('%12 = graph.matmul(%9, %10) : (tensor<16x32xf32>',
     '%12 = graph.matmul(%0, %10) : (tensor<16x32xf32>', "outside the kernel", 12),
    ('"k1", extents = [16, 8, 32], kinds = ["grid", "grid", "seq"], tile = [16, 8, 32], '
     'reduction = "in_tile", inputs = ["shared", "shared", "global"], temps = ["registers", '
     '"view", "registers"]', '"k1", extents = [16, 8, 32], kinds = ["grid", "grid", "seq"]',
     None, None),
    ('label = "k0"', 'label = "k0", order = [2, 0, 1]', None, None),
]


@pytest.mark.parametrize(("old", "new", "message", "line"), BROKEN)
def test_kernel_rules_are_errors_at_their_line(old: str, new: str, message: str | None,
                                               line: int | None) -> None:
    assert old in MLP
    text = MLP.replace(old, new, 1)
    if message is None:  # an unscheduled kernel (no tiles yet) is valid
        verify_module(parse_module(text))
        return
    err = _verify_error(text)
    assert message in err.message
    assert str(err.loc) == f"mlp.tir:{line}"


def test_placements_need_tiles_first() -> None:
    text = MLP.replace('tile = [16, 32, 8], reduction = "in_tile", ', '', 1)
    assert "before it has tile sizes" in _verify_error(text).message


def test_kernel_regions_hold_graph_ops_and_end_with_schedule_yield() -> None:
    err = _verify_error(MLP.replace("schedule.yield(%7)", "graph.yield(%7)", 1))
    assert "must end with schedule.yield" in err.message and str(err.loc) == "mlp.tir:3"
    gelu = "%7 = graph.gelu(%6) : (tensor<16x32xf32>) -> tensor<16x32xf32>"
    nested = ('%7 = schedule.kernel(%6) {label = "inner", extents = [16, 32], kinds = ["grid", '
              '"grid"]} (^bb(%a: tensor<16x32xf32>) {\n'
              '%b = graph.gelu(%a) : (tensor<16x32xf32>) -> tensor<16x32xf32>\n'
              'schedule.yield(%b) : (tensor<16x32xf32>) -> ()\n'
              '}) : (tensor<16x32xf32>) -> tensor<16x32xf32>')
    err = _verify_error(MLP.replace(gelu, nested, 1))
    assert "hold Graph IR ops, not schedule.kernel" in err.message
    assert str(err.loc) == "mlp.tir:3"


def test_a_scheduled_function_holds_only_kernels() -> None:
    text = MLP.replace("    schedule.return(%8)",
                       "    %99 = graph.exp(%8) : (tensor<16x8xf32>) -> tensor<16x8xf32>\n"
                       "    schedule.return(%8)", 1)
    module = parse_module(text, "mlp.tir")
    verify_module(module)  # level-independent rules hold
    with pytest.raises(IRVerifyError, match=r"holds schedule\.kernel instructions") as info:
        schedule_ops.check_function(module.functions["mlp"])
    assert str(info.value.loc) == "mlp.tir:20"
    graph = parse_module("graph.func @g() -> () {\n  graph.return() : () -> ()\n}\n")
    with pytest.raises(IRVerifyError, match=r"not a schedule\.func"):
        schedule_ops.check_function(graph.functions["g"])


def test_unknown_kernel_attributes_are_parse_errors_at_their_line() -> None:
    with pytest.raises(IRParseError, match=r"bad attributes for schedule\.kernel") as info:
        parse_module(MLP.replace('label = "k1"', 'label = "k1", grid = 4', 1), "mlp.tir")
    assert str(info.value.loc).startswith("mlp.tir:")
