"""``benchmarks/schedule_counts.py`` without the other compilers: Tessera's rows, the
tables when a compiler's environment is missing, and the parsers that read the other
compilers' output (on text in their formats; the compilers themselves are not needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import schedule_counts  # noqa: E402
from compilers import common, inductor_counts, jax_counts, tessera_side  # noqa: E402


def test_tessera_rows_count_kernels_and_time_each_stage() -> None:
    rows = tessera_side.count_rows(["chain", "softmax", "mlp_relu_int8"], repeats=1)
    assert [r["program"] for r in rows] == ["chain", "softmax", "mlp_relu_int8"]
    chain, softmax, mlp = rows
    # six elementwise ops: one generated kernel; the MLP cuts after the ReLU, and each
    # int8 matmul (a grid of few tiles) is split-K: a slices launch and a combine
    assert (chain["level"], chain["kernels"]) == ("tile", 1) and chain["tile_s"] > 0
    assert (mlp["level"], mlp["kernels"], mlp["schedule_kernels"]) == ("tile", 4, 2)
    # a program that does not generate is counted on Schedule IR and names the op
    assert softmax["kernels"] == softmax["schedule_kernels"] == 1
    assert softmax["level"] == "tile" or softmax["refused"].startswith("graph.")
    assert all(r["schedule_s"] > 0 for r in rows)


def test_the_tile_simulator_rows_are_the_interpreters_bits() -> None:
    (row,) = tessera_side.simulator_rows(["chain"], repeats=1)
    assert row["bitwise"] and row["kernels"] == 1
    assert all(row[f"{b}_{m}_s"] > 0 for b in ("interp", "tile") for m in ("exact", "fast"))


def test_arguments_are_the_same_in_every_framework() -> None:
    q, _, _, mask = common.arrays("causal_where")
    assert q.shape == (common.BH, common.S, common.D) and mask.dtype == np.bool_
    assert mask[0, 3, 3] and not mask[0, 3, 4]
    bias = common.arrays("causal_additive")[-1]
    assert bias[1, 3, 3] == 0.0 and bias[1, 3, 4] == np.float32(-1e9)
    np.testing.assert_array_equal(common.arrays("chain")[0], common.arrays("chain")[0])


def test_tables_say_which_compilers_did_not_run() -> None:
    tessera = [{"program": "chain", "level": "tile", "kernels": 1, "schedule_kernels": 1,
                "schedule_s": 0.004, "tile_s": 0.005},
               {"program": "softmax", "level": "schedule", "kernels": 1,
                "schedule_kernels": 1, "schedule_s": 0.0012, "refused": "graph.softmax"}]
    others = {"jax": (None, {"*": {"error": "no environment at .env-jax"}}),
              "inductor": ("torch 2", {"chain": {"kernels": 1, "generated": 1, "library": 0,
                                                 "compile_s": 1.75, "library_calls": []},
                                       "softmax": {"error": "exit 1: boom"}})}
    text = schedule_counts.tables(tessera, others, [])
    assert "| six elementwise ops on 1024² | 1 | 1 | — |" in text
    assert "1 (Schedule IR; graph.softmax not generated) | failed | — |" in text
    assert "| six elementwise ops on 1024² | 4.0 | 5.0 | — | 1750 | — |" in text
    assert "XLA: skipped (no environment at .env-jax)" in text
    assert "Inductor on softmax: exit 1: boom" in text


def test_a_missing_environment_is_reported_not_raised(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule_counts, "HERE", tmp_path)
    version, rows = schedule_counts.run_compiler("jax", ["chain"], 10.0, setup=False)
    assert version is None and "setup_compiler_envs.sh" in rows["*"]["error"]


HLO = """HloModule jit_f

%fused_computation (p: f32[4,8]) -> f32[4,8] {
  %p = f32[4,8]{1,0} parameter(0)
  ROOT %e = f32[4,8]{1,0} exponential(%p)
}

ENTRY %main.3 (x.1: f32[4,8], w.1: f32[8,8]) -> (f32[4,8], f32[4,8]) {
  %x.1 = f32[4,8]{1,0} parameter(0)
  %w.1 = f32[8,8]{1,0} parameter(1)
  %dot.1 = f32[4,8]{1,0} dot(%x.1, %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %exp_fusion = f32[4,8]{1,0} fusion(%dot.1), kind=kLoop, calls=%fused_computation
  %b = f32[8,4]{0,1} bitcast(%exp_fusion)
  ROOT %t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(%dot.1, %exp_fusion)
}
"""


def test_xla_kernels_are_the_entry_ops_that_run_code() -> None:
    assert jax_counts.entry_ops(HLO) == {"dot": 1, "fusion": 1}


WRAPPER = """
def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        buf0 = empty_strided_cpu((256, 1024), (1024, 1), torch.float32)
        extern_kernels.addmm(arg2_1, arg0_1, arg1_1, alpha=1, beta=1, out=buf0)
        cpp_fused_gelu_0(buf0)
        buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf0)
        return (buf1, )

runner = Runner(partitions=[])
cpp_fused_unused_1(buf0)
"""


def test_inductor_kernels_are_the_launches_of_its_wrapper() -> None:
    generated, library, names = inductor_counts.launches([WRAPPER])
    assert (generated, library) == (1, 2)
    assert names == ["extern_kernels.addmm",
                     "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default"]
