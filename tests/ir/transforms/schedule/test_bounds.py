"""The fast-mode bound (tessera/ir/transforms/schedule/bounds.py): the online-softmax
attention over key blocks stays within it of the graph interpreter's exact result, the
exact-mode passes give the interpreter's bits, and the bound is tight enough to catch a
result one part in a thousand off."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.graph import run_function
from tessera.interp.tile.program import run_program
from tessera.ir.transforms.schedule.bounds import attention_bound, gamma, within
from tessera.ir.transforms.to_tile import schedule_to_tile
from tests.ir.transforms.schedule import programs
from tests.ir.transforms.to_tile.test_keyblocks import (
    BLOCK,
    _variant,
    graph_function,
    scheduled,
)


def test_gamma_is_higham_s_constant() -> None:
    assert gamma(1, 2.0**-24) == 2.0**-24 / (1 - 2.0**-24)
    assert gamma(1000) > 1000 * 2.0**-24


def _bound(name: str, args: list[np.ndarray], fmt: str, block: int) -> np.ndarray:
    q, k, v, *mask = args
    bias = mask[0] if name == "causal_additive" else None
    keep = mask[0] if name == "causal_where" else None
    return attention_bound(q, k, v, 0.125, block=block, bias=bias, keep=keep,
                           formats=(fmt, fmt, fmt))


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["attention", "causal_where", "causal_additive"]),
       fmt=st.sampled_from(["f32", "bf16"]), rank4=st.booleans(),
       sq=st.integers(1, 24), sk=st.integers(20, 90), d=st.sampled_from([8, 16, 24]),
       big=st.booleans(), seed=st.integers(0, 2**16))
def test_hypothesis_fast_attention_stays_within_the_bound(
        name: str, fmt: str, rank4: bool, sq: int, sk: int, d: int, big: bool,
        seed: int) -> None:
    rng = np.random.default_rng(seed)
    if name != "attention":
        rank4, sq = False, min(sq, sk)
    fn, args = _variant(name, (1, 2) if rank4 else (2,), sq, sk, d, rng)
    if big:  # scores tens apart: the online max moves and rescales
        args[0] = args[0] * 8
    if fmt == "bf16":
        args = [a.astype(ml_dtypes.bfloat16) if a.dtype == np.float32 else a for a in args]
    graph_fn = graph_function(fn, args)
    sched = scheduled(graph_fn)
    (want,) = run_function(graph_fn, args)
    fast = schedule_to_tile(sched, "fast")
    text = str(fast.module)
    assert text.count("tile.for(") == 1  # one pass over the key blocks
    (got,) = run_program(fast, args, mode="fast")
    bound = _bound(name, args, fmt, BLOCK)
    assert np.all(np.isfinite(bound))
    assert within(got, want, bound)
    # exact mode over the same blocks: the interpreter's bits
    (bits,) = run_program(schedule_to_tile(sched), args)
    assert np.asarray(bits).tobytes() == np.asarray(want).tobytes()


def test_the_bound_catches_an_error_of_one_part_in_a_thousand() -> None:
    fn, args = _variant("attention", (2,), 30, 70, 16, np.random.default_rng(9))
    graph_fn = graph_function(fn, args)
    (want,) = run_function(graph_fn, args)
    bound = _bound("attention", args, "f32", BLOCK)
    assert np.all(bound < 1e-3 * np.abs(args[2]).max())
    assert within(want, want, bound)
    assert not within(np.asarray(want) * (1 + 1e-3), want, bound)


def test_jit_fast_mode_runs_the_online_softmax() -> None:
    """``ts.jit(f, mode="fast", backend="tile")`` on rows the schedule cuts (300 keys):
    one key loop, within the bound of the exact result."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, s, 64)).astype(np.float32) for s in (24, 300, 300))
    lowered = ts.jit(programs.attention, mode="fast").lower(q, k, v)
    assert lowered.kernels[0].text.count("tile.for(") == 1
    got = lowered.run(q, k, v, backend="tile")
    want = ts.jit(programs.attention)(q, k, v)
    assert within(got, want, attention_bound(q, k, v, 0.125, block=128))
