"""Fast-math lowering (``mode="fast"``): approximate instructions, no float64, and
results within the derived bound of the tile interpreter's checked result."""

from __future__ import annotations

import functools
import re
import runpy
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import ArgumentError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.frontend.kernel.backends.fast_bounds import fast_budget, fast_tolerance
from tessera.lower.fastmath import SHIFT_MAX, exp_error
from tests.lower.test_lowering import HAVE_GPU, TARGETS, example

BF16 = ml_dtypes.bfloat16
FA_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
rng = np.random.default_rng(11)
#: a PTX instruction of a float64 type, or a float64 register
F64_PTX = re.compile(r"^\s*[a-z][\w.]*\.f64\b|%fd\d", re.M)


def softmax_args(shape: tuple[int, int] = (16, 64)) -> tuple[np.ndarray, np.ndarray]:
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    return x, np.zeros_like(x)


def fa_args(seq: int = 128, d: int = 64) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal((1, seq, d)).astype(BF16) for _ in range(3))


def within_bound(kernel: Any, *args: Any, target: str, **launch: Any) -> None:
    """The fast kernel under the Target IR interpreter, and on a machine with a GPU its
    launch there, stay within the fast bound of the checked tile result."""
    ts.check_against_reference(kernel, *args, backend="target", target=target, mode="fast",
                               **launch)
    if HAVE_GPU:
        ts.check_against_reference(kernel, *args, backend="cuda", target=target, mode="fast",
                                   **launch)


def no_f64(compiled: Any) -> None:
    assert not F64_PTX.search(compiled.ptx), F64_PTX.search(compiled.ptx)
    text = str(compiled.kernel)
    assert "f64" not in text, [line for line in text.splitlines() if "f64" in line][:3]


@pytest.mark.parametrize("target", TARGETS)
def test_fast_kernels_have_no_f64_instruction(target: str) -> None:
    x, y = softmax_args()
    sm = example("row_softmax").row_softmax
    checked = compile_kernel(sm, x, y, target=target, tile_shape=(8,))
    assert F64_PTX.search(checked.ptx)  # the pattern finds checked mode's float64 exp
    fast = compile_kernel(sm, x, y, target=target, tile_shape=(8,), mode="fast")
    no_f64(fast)
    assert "ex2.approx.ftz.f32" in fast.ptx and "div.full.f32" in fast.ptx
    assert fast.kernel.attrs["mode"] == "fast" and fast.mode == "fast"
    fa = example("flash_attention").flash_attention
    compiled = compile_kernel(fa, *fa_args(), is_causal=True, target=target,
                              config=FA_CONFIG, mode="fast")
    no_f64(compiled)
    assert compiled.ptx.count("ex2.approx.ftz.f32") > 0
    assert compiled.assemble().stats["flash_attention"].spill_stores == 0


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape, bm", [((16, 64), 8), ((8, 1024), 1), ((64, 256), 4)])
def test_row_softmax_fast_within_bound(target: str, shape: tuple[int, int], bm: int) -> None:
    sm = example("row_softmax").row_softmax
    x, y = softmax_args(shape)
    x[0, :3] = [np.inf, -np.inf, 0.0]
    within_bound(sm, x, y, target=target, tile_shape=(bm,))


def test_fast_results_differ_from_checked_and_the_bound_is_tight() -> None:
    """The tolerance is not vacuous: fast mode's bits differ from checked mode's, by far
    less than 1e-4 of the values, and the bound is below 1e-4 too."""
    sm = example("row_softmax").row_softmax
    x, _ = softmax_args((16, 256))
    checked, fast = np.zeros_like(x), np.zeros_like(x)
    sm(x, checked, tile_shape=(8,))
    ts.launch(sm, None, (x, fast), backend="target", target="sm_80", tile_shape=(8,),
              mode="fast")
    assert not np.array_equal(checked, fast)
    bound = fast_tolerance(sm, checked, (x, checked), {"tile_shape": (8,)})
    assert np.all(np.abs(fast.astype(np.float64) - checked) <= bound)
    assert bound.max() < 1e-4


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_fast_within_bound(target: str, causal: bool) -> None:
    fa = example("flash_attention").flash_attention
    within_bound(fa, *fa_args(), is_causal=causal, target=target, config=FA_CONFIG)


@pytest.mark.parametrize("target", TARGETS)
def test_saxpy_fast_is_bitwise_checked(target: str) -> None:
    """saxpy has no approximate op: its fast PTX computes the checked bits (and the
    fast bound reduces to the output rounding and accumulation terms)."""
    saxpy = example("saxpy").saxpy
    x, y = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    ts.check_against_reference(saxpy, x, y, 2.5, backend="target", target=target, mode="fast")
    ts.check_against_reference(saxpy, x, y, 2.5, backend="target", target=target, mode="fast",
                               bitwise=True)
    assert not fast_budget(saxpy.compile(x, y, 2.5).functions["saxpy"]).terms


@settings(max_examples=8, deadline=None)
@given(target=st.sampled_from(TARGETS),
       rows=st.lists(st.lists(st.one_of(st.floats(-200, 60, width=32),
                                        st.sampled_from([-np.inf, -1e30, -104.0, -87.5])),
                              min_size=32, max_size=32), min_size=8, max_size=8))
def test_softmax_fast_over_drawn_inputs(target: str, rows: list[list[float]]) -> None:
    """Large negative arguments included: exp of x - max below -87.3 is a subnormal in
    checked mode and +0 in fast mode (``.ftz``), within the bound's 2^-126 terms. A row
    whose max is a finite value below -SHIFT_MAX (all of it -1e30 or -inf) is outside
    the fused ``exp(x - max)``'s bound (docs/ptx-backend.md): it gets a 0."""
    x = np.array(rows, np.float32)
    top = x.max(axis=1)
    x[np.isfinite(top) & (np.abs(top) > SHIFT_MAX), 0] = 0.0
    sm = example("row_softmax").row_softmax
    within_bound(sm, x, np.zeros_like(x), target=target, tile_shape=(4,))


def test_budget_counts_loop_trips_and_narrowing() -> None:
    """Flash attention over 2 KV blocks: two exps per trip, the bf16 cast of P inside
    the loop and the final cast after it, one division."""
    fa = example("flash_attention").flash_attention
    q, k, v = fa_args()
    fn = fa.compile(q, k, v, is_causal=True, config=FA_CONFIG).functions["flash_attention"]
    budget = fast_budget(fn)
    # exp(s - m) per trip is the fused form (its bound takes |m| <= SHIFT_MAX), alpha's
    # exp(m_i - m_new) the plain one; the unmasked block's s = scores * scale is folded
    # into the fused form's constant, the diagonal block's (masked first) is not
    assert budget.terms["exp"] == (exp_error(), 2) and budget.exp_count == 4
    assert budget.terms["exp(a - b)"] == (exp_error(SHIFT_MAX), 1)
    assert budget.terms["exp(a c - b)"] == (exp_error(SHIFT_MAX, scaled=True), 1)
    assert exp_error(SHIFT_MAX) < exp_error(SHIFT_MAX, scaled=True) < 3 * exp_error(SHIFT_MAX)
    assert budget.terms["div"][1] == 1
    assert budget.terms["round to bf16"] == (2 * 2.0**-8, 3)
    assert 2.0**-18 < exp_error() < 2.0**-16  # |x| 2^-23 scaling error dominates


def test_mode_spelling_and_declared_fast_kernels() -> None:
    """A kernel declared fast compiles fast unless a call says otherwise; unknown modes
    are refused; the tile interpreter's 'reference' mode compiles as checked."""
    x, y = softmax_args()
    sm = example("row_softmax").row_softmax
    fast_sm = ts.kernel(sm.fn, mode="fast")
    assert compile_kernel(fast_sm, x, y, target="sm_80", tile_shape=(8,)).mode == "fast"
    assert compile_kernel(fast_sm, x, y, target="sm_80", tile_shape=(8,),
                          mode="checked").mode == "checked"
    assert compile_kernel(sm, x, y, target="sm_80", tile_shape=(8,),
                          mode="reference").mode == "checked"
    with pytest.raises(ArgumentError, match="unknown kernel mode"):
        compile_kernel(sm, x, y, target="sm_80", tile_shape=(8,), mode="quick")
    ts.check_against_reference(fast_sm, x, y, backend="target", target="sm_90a",
                               tile_shape=(8,))


KERNELS = '''
import tessera as ts


@ts.kernel
def exp_rows(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32]):
    t = x[tile_m:tile_m + BM]
    y[tile_m:tile_m + BM] = ts.tile.exp(t)


@ts.kernel
def log_rows(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32]):
    t = x[tile_m:tile_m + BM]
    y[tile_m:tile_m + BM] = ts.tile.log(t)
'''


@functools.cache
def user_kernels() -> tuple[Path, dict[str, Any]]:
    """The kernels of ``KERNELS``, written to a file of their own (errors name it)."""
    path = Path(tempfile.mkdtemp()) / "fast_user_kernels.py"
    path.write_text(KERNELS)
    return path, runpy.run_path(str(path))


def test_log_is_the_specified_one_in_checked_mode_and_lg2_in_fast_mode() -> None:
    _, kernels = user_kernels()
    log_rows = kernels["log_rows"]
    x = np.abs(rng.standard_normal((8, 64))).astype(np.float32) + np.float32(1e-3)
    x[0, :4] = [1.0, 0.75, 1.5, 3e38]
    checked = compile_kernel(log_rows, x, np.zeros_like(x), target="sm_80", tile_shape=(4,))
    assert "lg2.approx" not in checked.ptx and "div.rn.f64" in checked.ptx
    ts.check_against_reference(log_rows, x, np.zeros_like(x), backend="target",
                               target="sm_80", tile_shape=(4,))  # bit for bit
    fast = compile_kernel(log_rows, x, np.zeros_like(x), target="sm_80", tile_shape=(4,),
                          mode="fast")
    assert "lg2.approx.ftz.f32" in fast.ptx
    for target in TARGETS:
        within_bound(log_rows, x, np.zeros_like(x), target=target, tile_shape=(4,))


def test_inspect_ir_follows_the_mode() -> None:
    x, y = softmax_args()
    sm = example("row_softmax").row_softmax
    fast = sm.inspect_ir("target", x, y, target="sm_80", tile_shape=(8,), mode="fast")
    assert '"ex2", type = "f32", mode = "approx.ftz"' in fast and "f64" not in fast
    fast_sm = ts.kernel(sm.fn, mode="fast")
    fast_sm(x, y, tile_shape=(8,))
    assert "approx.ftz" in fast_sm.inspect_ir("target", target="sm_80")
    assert "approx.ftz" not in fast_sm.inspect_ir("target", target="sm_80", mode="checked")


def f64_instructions_per_exp(emit: Any) -> tuple[int, int]:
    """(float64 instructions, all instructions) that one f32 ``exp`` emits: those with
    a float64 result or operand (immediates are operands of the instruction, not
    instructions of their own, as PTX writes them)."""
    from tessera.ir.core import Block
    from tessera.ir.dialects.target import RegType
    from tessera.ir.dialects.target.ops import Const
    from tessera.lower.emit import TargetEmitter

    block = Block()
    x = block.add_arg(RegType("f32"))
    emit(TargetEmitter(block), x)
    instrs = [i for i in block.instrs if not isinstance(i.op, Const)]
    wide = [i for i in instrs if any(v.type == RegType("f64")
                                     for v in (*i.results, *i.operands))]
    return len(wide), len(instrs)


def test_exp_cost_per_element() -> None:
    """docs/ptx-backend.md's table: checked ``exp`` is 12 float64 instructions of 38 on
    its fast path (the specified algorithm it falls back to: 39 of 46), fast ``exp`` two
    f32 instructions."""
    from tessera.lower.arith.mathlib import emit_exp_f32, emit_exp_f32_specified
    from tessera.lower.fastmath import emit_exp_fast

    assert f64_instructions_per_exp(emit_exp_f32) == (12, 38)
    assert f64_instructions_per_exp(emit_exp_f32_specified) == (39, 46)
    assert f64_instructions_per_exp(emit_exp_fast) == (0, 2)


@settings(max_examples=6, deadline=None)
@given(st.lists(st.one_of(st.floats(-110, 90, width=32),
                          st.floats(88.6875, 88.75, width=32), st.floats(-104, -86, width=32)),
                min_size=64, max_size=64))
def test_exp_near_overflow_and_underflow(values: list[float]) -> None:
    """Elementwise exp over its whole range: near the overflow threshold an approximate
    result may be infinite where the exact one is the largest finite values; below
    -87.3 checked mode's subnormals are fast mode's zeros."""
    exp_rows = user_kernels()[1]["exp_rows"]
    x = np.array(values, np.float32).reshape(2, 32)
    within_bound(exp_rows, x, np.zeros_like(x), target="sm_80", tile_shape=(1,))


def test_overflow_is_accepted_only_next_to_the_threshold() -> None:
    from tessera.frontend.kernel.backends.fast_bounds import within_fast_bound

    big = np.float32(3.40281e38)  # within 2^-17 of the largest float32
    ref = np.array([big, big, 1.0, np.inf, np.nan, -big], np.float32)
    got = np.array([np.inf, big, np.inf, np.inf, np.nan, np.inf], np.float32)
    bound = np.full(6, 2.0**-17) * (np.abs(ref.astype(np.float64)) + 1)
    assert within_fast_bound(ref, got, bound).tolist() == [True, True, False, True, True,
                                                            False]
    assert not within_fast_bound(ref[:1], got[:1], np.zeros(1)).any()
