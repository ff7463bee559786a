"""Attention whose key rows are longer than one program holds: the ``two_pass``
schedule cuts the keys into blocks and the generated kernel walks them in three exact
passes (row max, row sum, P·V) inside one program per query tile, with the graph
interpreter's bits (tessera/ir/transforms/to_tile/attention/keyblocks.py)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.interp.graph import run_function
from tessera.interp.tile.program import run_program
from tessera.ir import parse_module
from tessera.ir.core import Function, Module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects.graph import Softmax
from tessera.ir.transforms.schedule import schedule_module
from tessera.ir.transforms.to_tile import schedule_to_tile
from tests.ir.transforms.schedule import programs

#: keys per block in the tests on short rows
BLOCK = 16


def _bits(x: Any) -> bytes:
    return np.asarray(x).tobytes()


def graph_function(fn: Any, args: list[Any]) -> Function:
    """The Graph IR function ``ts.jit`` traces for ``fn`` on ``args``."""
    jitted = ts.jit(fn)
    jitted.compile(*args)
    return jitted.last.function


def scheduled(graph_fn: Function, block: int | None = BLOCK) -> Function:
    """``graph_fn`` scheduled for H100; with ``block``, its softmax's key loop is cut
    into blocks of ``block`` (``two_pass``), as the tile pass cuts rows too long for a
    program."""
    fn = schedule_module(Module(graph_fn.name, {graph_fn.name: graph_fn})
                         ).functions[graph_fn.name]
    if block is None:
        return fn
    for instr in schedule_ops.kernels(fn):
        space = schedule_ops.space_of(instr)
        sm = next((i for i in instr.regions[0].block.instrs if isinstance(i.op, Softmax)),
                  None)
        if sm is None:
            continue
        loop = space.loop_of[(sm.results[0], sm.results[0].type.rank - 1)]
        tile = list(instr.op.tile)  # type: ignore[attr-defined]
        tile[loop] = block
        instr.op = dataclasses.replace(instr.op, tile=tuple(tile), reduction="two_pass")
    schedule_ops.check_function(fn)
    return fn


def _variant(name: str, b: tuple[int, ...], sq: int, sk: int, d: int,
             rng: np.random.Generator) -> tuple[Any, list[np.ndarray]]:
    def arr(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    q, k, v = arr(*b, sq, d), arr(*b, sk, d), arr(*b, sk, d)
    causal = np.arange(sq)[:, None] >= np.arange(sk)[None, :]
    causal = np.broadcast_to(causal, (*b, sq, sk)).copy()
    if name == "attention":
        return (programs.attention_4d if len(b) == 2 else programs.attention), [q, k, v]
    if name == "causal_where":
        return programs.causal_where, [q, k, v, causal]
    bias = np.where(causal, 0.0, -1e9).astype(np.float32)
    return programs.causal_additive, [q, k, v, bias]


def _check(fn: Any, args: list[np.ndarray], block: int | None = BLOCK) -> Function:
    graph_fn = graph_function(fn, args)
    sched = scheduled(graph_fn, block)
    kinds = [k.op.reduction for k in schedule_ops.kernels(sched)]  # type: ignore[attr-defined]
    assert kinds.count("two_pass") == 1
    program = schedule_to_tile(sched)
    (want,) = run_function(graph_fn, args)
    (got,) = run_program(program, args)
    assert _bits(got) == _bits(want)
    return program.module.functions[program.launches[kinds.index("two_pass")].kernel]


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["attention", "causal_where", "causal_additive"]),
       fmt=st.sampled_from(["f32", "bf16"]), rank4=st.booleans(),
       sq=st.integers(1, 24), sk=st.integers(40, 90), d=st.sampled_from([8, 16, 24]),
       seed=st.integers(0, 2**16))
def test_hypothesis_key_blocks_give_the_graph_bits(name: str, fmt: str, rank4: bool,
                                                    sq: int, sk: int, d: int,
                                                    seed: int) -> None:
    rng = np.random.default_rng(seed)
    if name != "attention":
        rank4, sq = False, min(sq, sk)
    fn, args = _variant(name, (1, 2) if rank4 else (2,), sq, sk, d, rng)
    if fmt == "bf16":
        args = [a.astype(ml_dtypes.bfloat16) if a.dtype == np.float32 else a for a in args]
    kernel = _check(fn, args)
    assert kernel.attrs["tiles"][-2] < sk  # the keys are walked in blocks


def test_the_passes_are_three_key_loops_in_one_kernel() -> None:
    fn, args = _variant("causal_additive", (2,), 37, 53, 8, np.random.default_rng(1))
    kernel = _check(fn, args)
    text = str(kernel)
    # pass 1 (max), pass 2 (exact sum), pass 3 (P·V), each over ceil(53 / 16) blocks;
    # the scores' own K loop is one step (d = 8)
    assert text.count("tile.for(") == 3
    assert text.count('kind = "sum", axis = 2, exact = true') == 3
    assert text.count("tile.mma(") == 4  # the scores in each pass, and P·V


def test_extreme_rows() -> None:
    """A row whose every key is masked, scores far apart (terms below 2^-60 beside 1),
    infinities and a NaN in the keys: the blocks still give the graph's bits."""
    rng = np.random.default_rng(3)
    fn, (q, k, v, mask) = _variant("causal_where", (2,), 40, 70, 16, rng)
    mask[:, 3, :] = False
    q[:, 5, :] *= 1e3
    q[:, 6, :] = q[:, 5, :] * 20
    v[:, :, 0] = [2.0**-40 if j % 2 else 1.0 for j in range(v.shape[1])]
    v[0, 33, 1] = np.inf
    k[1, 50, 2] = np.nan
    _check(fn, [q, k, v, mask])


def test_a_block_longer_than_the_row_holds_it_whole() -> None:
    fn, args = _variant("attention", (2,), 8, 12, 8, np.random.default_rng(4))
    graph_fn = graph_function(fn, args)
    program = schedule_to_tile(scheduled(graph_fn, 16))
    text = str(program.module.functions[program.launches[0].kernel])
    assert "tile.for(" not in text
    (want,) = run_function(graph_fn, args)
    assert _bits(run_program(program, args)[0]) == _bits(want)


def test_the_default_schedule_walks_long_rows_in_blocks() -> None:
    """Without a forced block: 1100 keys of f32 do not fit one H100 program even beside
    16 queries, the tile pass cuts them into blocks of 128 (``two_pass``) and
    ``backend="tile"`` walks them."""
    fn, args = _variant("attention", (1,), 20, 1100, 64, np.random.default_rng(5))
    lowered = ts.jit(fn).lower(*args)
    assert 'reduction = "two_pass"' in lowered.ir("schedule")
    assert len(lowered.kernels) == 1
    assert lowered.kernels[0].text.count("tile.for(") >= 3
    start = time.perf_counter()
    got = lowered.run(*args, backend="tile")
    assert time.perf_counter() - start < 120
    assert _bits(got) == _bits(lowered.run(*args))


GOLDEN = Path(__file__).parents[3] / "golden" / "to_tile"


@pytest.mark.parametrize("mode,golden", [("exact", "attention_key_blocks.tir"),
                                         ("fast", "attention_online_softmax.tir")])
def test_golden_key_block_kernels(mode: str, golden: str) -> None:
    """Causal (additive mask) attention, 37 keys in blocks of 16: the exact passes and
    fast mode's one pass; the text parses back to itself."""
    fn, args = _variant("causal_additive", (1,), 5, 37, 8, np.random.default_rng(0))
    program = schedule_to_tile(scheduled(graph_function(fn, args)), mode)
    text = str(program) + "\n"
    if os.environ.get("TESSERA_UPDATE_GOLDENS"):
        (GOLDEN / golden).write_text(text)
    assert text == (GOLDEN / golden).read_text()
    assert str(parse_module(str(program.module))) == str(program.module)


@settings(max_examples=20, deadline=None)
@given(lead=st.sampled_from([(3,), (2, 3), (1,)]), length=st.integers(17, 90),
       fmt=st.sampled_from(["f32", "bf16"]), epilogue=st.booleans(),
       spread=st.sampled_from([1.0, 30.0]), seed=st.integers(0, 2**16))
def test_hypothesis_row_softmax_blocks_give_the_graph_bits(
        lead: tuple[int, ...], length: int, fmt: str, epilogue: bool, spread: float,
        seed: int) -> None:
    """A row softmax (and ops on its rows) walks its rows in blocks: max, exact sum,
    then each block's values stored by the pass that computes them."""
    x = np.random.default_rng(seed).standard_normal((*lead, length)) * spread
    x = x.astype(ml_dtypes.bfloat16 if fmt == "bf16" else np.float32)

    def fn(x: Any) -> Any:
        p = op.softmax(x * 0.5, axis=-1)
        return p * 3.0 + 1.0 if epilogue else p

    kernel = _check(fn, [x])
    assert str(kernel).count("tile.for(") == 3


def test_the_default_schedule_walks_long_softmax_rows_in_blocks() -> None:
    """2 rows of 2^17 do not fit one program: the tile pass cuts them (``two_pass``) and
    ``backend="tile"`` walks them in blocks with the graph's bits."""
    x = np.random.default_rng(6).standard_normal((2, 1 << 17)).astype(np.float32)
    lowered = ts.jit(lambda x: op.softmax(x, axis=-1)).lower(x)
    assert 'reduction = "two_pass"' in lowered.ir("schedule")
    assert lowered.kernels[0].text.count("tile.for(") == 3
    assert _bits(lowered.run(x, backend="tile")) == _bits(lowered.run(x))
