"""``ts.inspect_ir(f, "schedule")`` and ``tessera ir --stage schedule``: the scheduled
module of a graph function, text that reads back; the later stages follow it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.cli import main
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects import schedule as schedule_ops

F32 = np.float32


def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return op.gelu(x @ w1 + b1) @ w2 + b2


def _args() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal(s).astype(F32) for s in ((8, 16), (16, 32), (32,), (32, 16),
                                                          (16,))]


def test_inspect_schedule_prints_two_kernels_for_the_mlp() -> None:
    text = ts.inspect_ir(mlp, "schedule", *_args())
    module = parse_module(text)
    verify_module(module)
    (fn,) = module.functions.values()
    schedule_ops.check_function(fn)
    assert fn.kind == "schedule.func" and len(schedule_ops.kernels(fn)) == 2
    assert print_module(module) == text
    assert text.count("schedule.kernel(") == 2 and "tile = [" in text


def test_inspect_schedule_after_a_call_and_from_annotations() -> None:
    jitted = ts.jit(mlp)
    args = _args()
    before = np.asarray(jitted(*args))
    text = jitted.inspect_ir("schedule")
    assert "graph.gelu" in text and "schedule.return" in text
    # inspecting does not change the function the jit runs
    np.testing.assert_array_equal(np.asarray(jitted(*args)), before)
    assert "graph.func" in jitted.inspect_ir("graph")

    @ts.jit
    def typed(x: ts.Tensor[4, 8, ts.f32]):
        return op.softmax(x * 2.0)

    assert ts.inspect_ir(typed, "schedule").count("schedule.kernel(") == 1


def test_target_stage_lowers_what_the_tile_stage_generates() -> None:
    from tessera.ir.transforms.to_tile import TileGenerationError

    text = ts.inspect_ir(mlp, "target", *_args())  # the GELU MLP, both kernels
    assert "ptx.kernel @mlp_k0" in text and "ptx.kernel @mlp_k1" in text
    x = _args()[0]
    with pytest.raises(TileGenerationError, match=r"graph\.pow cannot be"):
        ts.inspect_ir(lambda x: op.pow(x, 3.0), "target", x)  # NumPy's float64 pow
    text = ts.inspect_ir(lambda x: op.relu(x) * 2.0, "target", x, target="sm_80")
    assert "ptx.kernel @" in text and 'target = "sm_80"' in text and "launch @" in text


def test_tile_stage_of_a_graph_function() -> None:
    """The MLP's two kernels: exact mma K loops, GELU on f64 tiles (the specified
    quotient with an f64 exp, no tanh)."""
    text = ts.inspect_ir(mlp, "tile", *_args())
    assert text.count("tile.kernel @") == 2 and "exact = true" in text
    assert "tile.exp" in text and "tile.tanh" not in text and "launch @mlp_k1" in text


PROGRAM = '''
import tessera as ts
from tessera import op

def attention(q, k, v):
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125
    return op.matmul(op.softmax(s), v)
'''


def test_cli_ir_stage_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "attn.py"
    path.write_text(PROGRAM)
    spec = "2x16x8:f32"
    assert main(["ir", f"{path}:attention", "--stage", "schedule", "--arg", f"q={spec}",
                 "--arg", f"k={spec}", "--arg", f"v={spec}"]) == 0
    text = capsys.readouterr().out
    assert text.count("schedule.kernel(") == 1
    assert text.count("graph.matmul") == 2 and "graph.softmax" in text
