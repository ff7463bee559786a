"""The mean squared error as a generated tile kernel: the graph interpreter's bits (the
exact sum of squares divided by the count, rounded once), for f32, bf16 and f16 with
non-finite values, cancelling pairs and magnitudes across the whole format; and the
quick start's training step compiled whole, its loss and gradient included."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import IRVerifyError
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import TileGenerationError
from tessera.ir.types import TensorType
from tessera.numerics import dtype
from tests.frontend.graph.lowered.same import one_nan

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
TARGETS = ("sm_80", "sm_90a")
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 3.0e38, -3.0e38, 1.0e-45, 1.0]


def _mse(a, b):
    return ts.mse(a, b)


def _bits(x) -> bytes:
    return np.asarray(x).tobytes()


def _level_bits(x) -> bytes:
    """The bits, every NaN made one NaN: between the graph interpreter (NumPy's NaNs)
    and the Target IR interpreter (the canonical NaN a GPU writes) a NaN is a NaN."""
    return one_nan(np.asarray(x)).tobytes()


@st.composite
def operands(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    fmt = FORMATS[draw(st.sampled_from(sorted(FORMATS)))]
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    n = math.prod(shape)
    finfo = ml_dtypes.finfo(fmt)
    top = int(math.log2(float(finfo.max)))
    values = st.one_of(
        st.sampled_from(SPECIAL),
        st.builds(lambda m, e: m * 2.0 ** e, st.floats(-2, 2), st.integers(-top - 20, top)))
    a = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64)
    b = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64)
    if draw(st.booleans()):  # near-cancelling pairs: the squares are tiny
        b = a * (1 + 2.0 ** -draw(st.integers(1, 30)))
    with np.errstate(all="ignore"):
        return a.astype(fmt).reshape(shape), b.astype(fmt).reshape(shape)


@settings(max_examples=60, deadline=None)
@given(operands())
def test_mse_kernel_gives_the_graph_bits(ab: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = ab
    lowered = ts.jit(_mse).lower(a, b)
    assert len(lowered.kernels) == 1
    assert _bits(lowered.run(a, b, backend="tile")) == _bits(lowered.run(a, b))


def test_mse_rounds_the_mean_once() -> None:
    """The exact mean ``(1 + 2**-24 + 2**-78) / 4`` is just above an f32 midpoint; its
    float64 rounding drops the ``2**-78`` and lands on the midpoint, which then ties
    down. Rounded once (``tile.reduce``'s ``to``), as the graph does, it goes up."""
    a = np.array([1.0, 2.0 ** -12, 2.0 ** -39, 0.0], np.float32)
    b = np.zeros(4, np.float32)
    up = np.float32(0.25 * (1 + 2.0 ** -23))
    twice = np.float32(np.float64(0.25 * (1 + 2.0 ** -24)))
    assert twice == np.float32(0.25)  # the double rounding this test guards against
    assert _bits(ts.jit(_mse)(a, b)) == _bits(up)
    assert _bits(ts.jit(_mse, backend="tile")(a, b)) == _bits(up)


@pytest.mark.parametrize("backend", ["interp", "tile", "target"])
def test_mse_keeps_the_sign_of_a_difference_float64_cannot_hold(backend: str) -> None:
    """``17 - 2**-72`` is not a float64: the difference is ``17`` plus an error of
    ``-2**-72``, whose sign decides the rounding. The exact mean is ``289 - 34 * 2**-72
    + 2**-144``, just below the bf16 midpoint 289 of 288 and 290, so it rounds to 288;
    an error term of the wrong sign lands just above the midpoint, on 290."""
    a = np.array([17.0], ml_dtypes.bfloat16)
    b = np.array([2.0 ** -72], ml_dtypes.bfloat16)
    got = ts.jit(_mse).lower(a, b).run(a, b, backend=backend)
    assert float(np.asarray(got)) == 288.0


def test_training_step_compiles_with_its_loss() -> None:
    """The quick start's step: the loss and its gradient as kernels, the graph's bits."""
    lowered, (x, y, W) = _train_step_program()
    assert len(lowered.kernels) == 3
    want, got = lowered.run(x, y, W), lowered.run(x, y, W, backend="tile")
    assert [_bits(g) for g in got] == [_bits(w) for w in want]


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=25, deadline=None)
@given(ab=operands())
def test_mse_kernel_in_ptx_gives_the_graph_bits(target: str,
                                               ab: tuple[np.ndarray, np.ndarray]) -> None:
    """The kernel lowered to PTX (its Target IR run by the Target IR interpreter): the
    ten term tiles deposited into one long accumulator, rounded once."""
    a, b = ab
    lowered = ts.jit(_mse).lower(a, b)
    assert _level_bits(lowered.run(a, b, backend="target", target=target)) == \
        _level_bits(lowered.run(a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_mse_terms_at_the_ends_of_the_accumulator(target: str) -> None:
    """The largest terms (f32 operands of opposite signs near the format's top: a
    difference of 2**129, scaled by 4, squared near 2**262) and the smallest
    (subnormal differences, whose products are 2**-294 after scaling) are held exactly
    beside each other; and infinities and NaNs give the graph's class."""
    big = float(np.finfo(np.float32).max)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    cases = [([big, tiny, 0.0], [-big, 0.0, tiny]),
             ([tiny, 3 * tiny, 1.0], [0.0, -tiny, 1.0 + 2.0 ** -23]),
             ([math.inf, 1.0], [1.0, 2.0]), ([math.inf, 1.0], [math.inf, 2.0]),
             ([math.nan, 1.0], [0.0, 0.0]), ([-math.inf, 0.0], [big, 0.0])]
    for x, y in cases:
        a, b = np.array(x, np.float32), np.array(y, np.float32)
        lowered = ts.jit(_mse).lower(a, b)
        assert _level_bits(lowered.run(a, b, backend="target", target=target)) == \
            _level_bits(lowered.run(a, b)), (x, y)
    # (1 + 2**-24 + 2**-298) / 4: the least term (2**-294 once scaled) lifts the mean
    # off the midpoint between 0.25 and its successor, so it rounds up
    a = np.array([1.0, 2.0 ** -12, tiny, 0.0], np.float32)
    got = ts.jit(_mse).lower(a, 0 * a).run(a, 0 * a, backend="target", target=target)
    assert _bits(got) == _bits(np.float32(0.25 * (1 + 2.0 ** -23)))


@pytest.mark.parametrize("target", TARGETS)
def test_mse_table_built_in_registers_gives_the_same_bits(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the deposit of the terms, the table is built as the kernel states it
    (the column selectors by index comparisons, their broadcast and the reshape staged
    through shared memory) and reduced as one row: the same bits, on small shapes."""
    from tessera.lower.exact import msetable

    monkeypatch.setattr(msetable, "plan", lambda low: None)
    rng = np.random.default_rng(3)
    for fmt, shape in [(np.float32, (3, 5)), (ml_dtypes.bfloat16, (7,)), (np.float16, (2, 2))]:
        a = (rng.standard_normal(shape) * 100).astype(fmt)
        b = (rng.standard_normal(shape) * 100).astype(fmt)
        lowered = ts.jit(_mse).lower(a, b)
        ptx = str(lowered.ptx(target))
        assert "red.shared.add.u64" in ptx
        assert _bits(lowered.run(a, b, backend="target", target=target)) == \
            _bits(lowered.run(a, b))


def _train_step_program():  # type: ignore[no-untyped-def]
    @ts.jit
    @ts.autodiff
    def train_step(x, y, W):
        return ts.mse(ts.gemm(x, W), y)

    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    W = (rng.standard_normal((64, 16)) * 0.1).astype(np.float32)
    return ts.jit(ts.value_and_grad(train_step)).lower(x, y, W), (x, y, W)


@pytest.mark.parametrize("target", TARGETS)
def test_training_step_in_ptx_gives_the_graph_bits(target: str) -> None:
    """The quick start's step lowered whole (loss and gradient, three kernels): the
    Target IR interpreter gives the graph interpreter's bits, and ptxas assembles every
    kernel with no advisory and no spill."""
    lowered, args = _train_step_program()
    want = lowered.run(*args)
    got = lowered.run(*args, backend="target", target=target)
    assert [_bits(g) for g in got] == [_bits(w) for w in want]
    kernels = lowered.target(target).kernels
    assert len(kernels) == 3
    for kernel in kernels:
        assembled = kernel.assemble()
        stats = assembled.stats[kernel.name]
        assert stats.spill_stores == stats.spill_loads == stats.stack_frame == 0
        assert "warning" not in assembled.log.lower()


@pytest.mark.parametrize("target", TARGETS)
def test_small_mse_kernels_assemble_without_advisories_or_spills(target: str) -> None:
    for fmt in FORMATS.values():
        a = np.arange(12, dtype=np.float64).astype(fmt).reshape(3, 4)
        (kernel,) = ts.jit(_mse).lower(a, a).target(target).kernels
        assembled = kernel.assemble()
        stats = assembled.stats[kernel.name]
        assert stats.spill_stores == stats.spill_loads == stats.stack_frame == 0
        assert "warning" not in assembled.log.lower()


def test_mse_of_other_formats_is_refused_at_its_line() -> None:
    a = np.arange(6, dtype=np.int32)
    with pytest.raises(TileGenerationError, match="mean squared error of int32") as err:
        ts.jit(_mse, backend="tile")(a, a)
    assert "test_loss.py" in str(err.value)
    assert int(ts.jit(_mse)(a, a)) == 0  # the graph interpreter still runs it


def test_reduce_to_another_element_is_only_for_exact_sums() -> None:
    x = TensorType((4, 8), dtype("f64"))
    (r,) = tc.Reduce("mean", 1, exact=True, to=dtype("f32")).infer([x])
    assert r == TensorType((4,), dtype("f32"))
    with pytest.raises(IRVerifyError, match="only an exact sum or mean"):
        tc.Reduce("max", 1, to=dtype("f32")).infer([x])
    with pytest.raises(IRVerifyError, match="only an exact sum or mean"):
        tc.Reduce("sum", 1, exact=True, to=dtype("int32")).infer([x])
