"""Row softmax lowered to Target IR and PTX: the f64 tiles of the generated kernel (the
specified binary64 exp, the exact f64 row sum rounded to nearest) give the graph
interpreter's bits under the Target IR interpreter on both targets, rows with -inf,
NaN and huge spreads included, and the PTX assembles with no advisory and no spills."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, one_nan, same_on_target


def softmax(x):  # type: ignore[no-untyped-def]
    return op.softmax(x, axis=-1)


def _values(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """``normal``; ``spread`` (each row's values 0 to 300 apart: terms far below
    e^-104 and exactly 0); ``special`` (spread, with NaN, infinities, signed zeros)."""
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    x = rng.uniform(-1, 1, shape) * 10.0 ** rng.uniform(-3, 2.5, shape)
    if kind == "special":
        flat = x.reshape(-1)
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            flat[rng.integers(0, flat.size, 1 + flat.size // 30)] = v
    return x.astype(np.float32)


def _same_on_target(x: np.ndarray, target: str) -> None:
    lowered = ts.jit(softmax).lower(x)
    want = one_nan(np.asarray(lowered.run(x).array)).tobytes()  # a NaN matches a NaN
    got = lowered.run(x, backend="target", target=target)
    assert one_nan(np.asarray(got.array)).tobytes() == want


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 130) | st.sampled_from([32, 64, 256]),
       kind=st.sampled_from(["normal", "spread", "special"]),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_row_softmax_on_target_gives_the_graph_bits(rows: int, cols: int, kind: str,
                                                    target: str, seed: int) -> None:
    _same_on_target(_values(np.random.default_rng(seed), (rows, cols), kind), target)


@pytest.mark.parametrize("shape", [(1,), (37,), (3, 4, 5), (2, 1, 7), (3, 700)])
def test_softmax_of_other_ranks_and_long_rows_on_target(shape: tuple[int, ...]) -> None:
    """A 1-D row, rows of 3-D tensors (the atomic row max), rows longer than a warp."""
    x = _values(np.random.default_rng(len(shape)), shape, "special")
    for target in TARGETS:
        _same_on_target(x, target)


def test_masked_rows_and_rows_of_one_value_on_target() -> None:
    """-inf entries give exactly +0; a row of -inf, or one holding +inf, is NaN."""
    x = np.zeros((4, 8), np.float32)
    x[0, 1:] = -np.inf  # one live entry: 1.0
    x[1] = -np.inf  # -inf - -inf: NaN
    x[2, 3] = np.inf
    x[3] = np.arange(8) * 40.0  # terms below e^-104 flush to 0
    for target in TARGETS:
        _same_on_target(x, target)
    out = np.asarray(ts.jit(softmax)(x).array)
    assert out[0, 0] == 1.0 and (out[0, 1:] == 0).all() and np.isnan(out[1]).all()


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(3)
    for shape in [(7, 32), (300, 128), (2, 1024), (33, 100)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for kernel in ts.jit(softmax).lower(x).target(target).kernels:
            assembles_clean(kernel)
            assert "red.shared.add.u64" in kernel.ptx and "mul.rn.f64" in kernel.ptx


@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_narrow_softmax_on_target_rounds_once(fmt: str) -> None:
    """bf16 and f16 results: the f64 quotient rounded once (to odd on the f32 grid, then
    to nearest even), as the graph rounds it."""
    rng = np.random.default_rng(9)
    for shape in [(5, 37), (9, 64)]:
        x = ts.Tensor(_values(rng, shape, "special").astype(np.float64),
                      ts.bf16 if fmt == "bf16" else ts.f16).array
        for target in TARGETS:
            _same_on_target(x, target)


def scores_softmax(q, k):  # type: ignore[no-untyped-def]
    """Softmax rows of scores that leave the kernel: the scores' matmul in the kernel."""
    return op.softmax(op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125, axis=-1)


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_of_long_score_rows_on_target(target: str) -> None:
    """Rows of 600 scores (more than an exact tile holds) pass over key blocks of 128
    (the last one ragged), the three passes' score accumulators in one buffer: the
    graph interpreter's bits; ptxas: no spills, no advisory."""
    rng = np.random.default_rng(12)
    q, k = (rng.standard_normal(s).astype(np.float32) * 2 for s in [(1, 2, 4), (1, 600, 4)])
    k[0, 599, :] = np.inf  # a NaN row and an infinite score in the last block
    lowered = ts.jit(scores_softmax).lower(q, k)
    want = one_nan(np.asarray(lowered.run(q, k).array)).tobytes()  # a NaN matches a NaN
    program = lowered.target(target)
    (kernel,) = program.kernels
    tiles = program.tile.module.functions[kernel.name].attrs["tiles"]
    assert (tiles[0], tiles[1]) == (2, 128)
    assembles_clean(kernel)
    got = lowered.run(q, k, backend="target", target=target)
    assert one_nan(np.asarray(got.array)).tobytes() == want


@pytest.mark.parametrize("fmt", [ts.f32, ts.bf16, ts.fp8_e4m3])
def test_softmax_of_one_element_rows_held_as_row_statistics(fmt: ts.DType) -> None:
    """Rows of one element whose layout is that of a row statistic (a mean subtracted
    after the softmax places them so): the row max is each register's own value."""
    def centred(x):  # type: ignore[no-untyped-def]
        s = op.softmax(op.relu(x), axis=-1)
        return s - op.mean(s, axis=-1, keepdims=True)

    rng = np.random.default_rng(9)
    x = ts.Tensor(np.concatenate([rng.standard_normal((7, 1)) * 3,
                                  [[np.nan], [np.inf], [-0.0]]]), fmt).array
    same_on_target(centred, [x])
