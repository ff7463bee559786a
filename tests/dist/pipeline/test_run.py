"""Pipeline parallelism against the unsharded model.

The references are written here from tessera's graph-level API alone: the model as
one composed ``@ts.jit`` function, its gradient by ``ts.grad`` per micro-batch summed
left to right with ``functools.reduce(np.add)`` (the documented accumulation order),
and ``ts.grad`` of the full batch (equal up to rounding: a different order).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist
from tessera.dist.pipeline.run import Pipeline, Stage
from tessera.dist.pipeline.schedule import Schedule, gpipe, one_f_one_b
from tests.mesh_sim.util import raises_here


@ts.jit
def layer(x, W, b):
    return ts.tanh(x @ W + b)


def sq_loss(y, t):
    d = y - t
    return ts.sum(d * d)


def make(stages: int, batch: int, width: int, seed: int):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((width, width)).astype(np.float32) * 0.5,
               rng.standard_normal(width).astype(np.float32)) for _ in range(stages)]
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, width)).astype(np.float32)
    return params, x, y


def model(x, ps):
    for k in range(len(ps) // 2):
        x = layer(x, ps[2 * k], ps[2 * k + 1])
    return x


def total_loss(x, t, ps):
    return sq_loss(model(x, ps), t)


def per_micro_batch_grads(params, x, y, m):
    """ts.grad of the composed model per micro-batch, summed in micro-batch order."""
    flat = [a for p in params for a in p]
    grad = ts.grad(total_loss, argnums=2)
    parts = [grad(a, b, flat) for a, b in zip(np.array_split(x, m), np.array_split(y, m))]
    summed = [functools.reduce(np.add, [np.asarray(g[k]) for g in parts])
              for k in range(len(flat))]
    losses = [np.asarray(ts.jit(total_loss)(a, b, flat))
              for a, b in zip(np.array_split(x, m), np.array_split(y, m))]
    return summed, functools.reduce(np.add, losses)


def flat_grads(result):
    return [g for stage in result.grads for g in stage]


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 4), m=st.integers(1, 5), extra=st.integers(0, 3),
       replicas=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_gpipe_and_1f1b_equal_the_unsharded_model(stages, m, extra, replicas, seed):
    params, x, y = make(stages, m + extra, 4, seed)
    mesh = dist.mesh(axes=("dp", "pp"), shape=(replicas, stages))
    pipe = Pipeline([Stage(layer, p) for p in params], mesh, "pp", loss=sq_loss)
    want, want_loss = per_micro_batch_grads(params, x, y, m)
    forward = np.asarray(ts.jit(model)(x, [a for p in params for a in p]))
    for schedule in ("gpipe", "1f1b"):
        got = pipe.run(x, y, micro_batches=m, schedule=schedule)
        assert np.array_equal(got.outputs, forward)  # row-wise stages: bitwise
        assert np.array_equal(got.loss, want_loss)
        for a, b in zip(flat_grads(got), want):
            assert a.dtype == np.float32 and np.array_equal(a, b)
    ref = pipe.reference(x, y, micro_batches=m)
    assert all(np.array_equal(a, b) for a, b in zip(flat_grads(ref), want))


def test_gradients_match_the_full_batch_up_to_rounding():
    params, x, y = make(3, 12, 6, 1)
    mesh = dist.mesh(axes=("pp",), shape=(3,))
    got = Pipeline([Stage(layer, p) for p in params], mesh, loss=sq_loss).run(
        x, y, micro_batches=4)
    full = ts.grad(total_loss, argnums=2)(x, y, [a for p in params for a in p])
    for a, b in zip(flat_grads(got), full):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-5, atol=1e-5)


def test_peak_stash_follows_the_schedule():
    params, x, y = make(4, 8, 3, 2)
    mesh = dist.mesh(axes=("pp",), shape=(4,))
    pipe = Pipeline([Stage(layer, p) for p in params], mesh, loss=sq_loss)
    one = pipe.run(x, y, micro_batches=8, schedule="1f1b")
    assert one.peak_stash == [4, 3, 2, 1]
    assert one.peak_stash == [one.schedule.peak_activations(s) for s in range(4)]
    assert pipe.run(x, y, micro_batches=8, schedule="gpipe").peak_stash == [8] * 4


def test_any_valid_schedule_gives_the_same_bits():
    params, x, y = make(2, 6, 3, 3)
    mesh = dist.mesh(axes=("pp",), shape=(2,))
    pipe = Pipeline([Stage(layer, p) for p in params], mesh, loss=sq_loss)
    # Backwards in reverse micro-batch order: gradients wait to be added in order.
    progs = [[("F", 0), ("F", 1), ("F", 2), ("B", 2), ("B", 1), ("B", 0)]] * 2
    custom = Schedule.from_programs(progs)
    got = pipe.run(x, y, micro_batches=3, schedule=custom)
    ref = pipe.run(x, y, micro_batches=3, schedule=gpipe(2, 3))
    assert all(np.array_equal(a, b) for a, b in zip(flat_grads(got), flat_grads(ref)))


def test_forward_only_pipeline_and_rank_placement():
    params, x, _ = make(3, 5, 4, 4)
    mesh = dist.mesh(axes=("pp", "tp"), shape=(4, 2))
    pipe = Pipeline([Stage(layer, p) for p in params], mesh, "pp", ranks=[3, 1, 0])
    got = pipe.run(x, micro_batches=2, schedule="1f1b")
    assert got.grads is None and got.loss is None and got.schedule.name == "gpipe"
    assert np.array_equal(got.outputs, np.asarray(ts.jit(model)(
        x, [a for p in params for a in p])))
    assert pipe.devices(0) == [6, 7]  # pp rank 3, both tp replicas
    sends = [e for e in got.timeline.events if e.kind == "send_recv"]
    assert {e.device for e in sends} == {6, 7, 2, 3, 0, 1}


def test_timeline_orders_every_stage_after_its_inputs():
    params, x, y = make(3, 6, 4, 5)
    mesh = dist.mesh(axes=("pp",), shape=(3,))
    res = Pipeline([Stage(layer, p) for p in params], mesh, loss=sq_loss).run(
        x, y, micro_batches=3, schedule=one_f_one_b(3, 3))
    ev = {(e.name.split()[0], e.device): e for e in res.timeline.events
          if e.stream == "compute"}
    for j in range(3):
        for s in range(1, 3):
            assert ev[(f"F{j}", s)].start >= ev[(f"F{j}", s - 1)].end
            assert ev[(f"B{j}", s - 1)].start >= ev[(f"B{j}", s)].end
    assert res.time_us > 0


def test_errors_name_the_callers_line():
    params, x, y = make(2, 3, 2, 6)
    mesh = dist.mesh(axes=("pp",), shape=(2,))
    stages = [Stage(layer, p) for p in params]
    raises_here(ts.TesseraError, lambda: Pipeline(stages * 2, mesh), "distinct ranks")
    pipe = Pipeline(stages, mesh, loss=sq_loss)
    raises_here(ts.TesseraError, lambda: pipe.run(x, y, micro_batches=4), "micro-batches")
    raises_here(ts.TesseraError, lambda: pipe.run(x, y, micro_batches=2,
                                                  schedule=gpipe(3, 2)), "does not fit")
    raises_here(ts.TesseraError, lambda: pipe.run(x, y, schedule="zigzag"), "unknown")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_one_stage_one_micro_batch(schedule):
    params, x, y = make(1, 2, 3, 7)
    mesh = dist.mesh(axes=("pp",), shape=(1,))
    got = Pipeline([Stage(layer, params[0])], mesh, loss=sq_loss).run(
        x, y, schedule=schedule)
    want, _ = per_micro_batch_grads(params, x, y, 1)
    assert all(np.array_equal(a, b) for a, b in zip(flat_grads(got), want))


def test_two_stages_on_the_nvl72_mesh():
    mesh = dist.mesh(axes=("dp", "tp", "pp"), devices=range(72))  # dp=4, tp=9, pp=2
    params, x, y = make(2, 4, 4, 8)
    pipe = Pipeline([Stage(layer, p) for p in params], mesh, "pp", loss=sq_loss)
    got = pipe.run(x, y, micro_batches=2, schedule="1f1b")
    assert len(pipe.devices(0)) == len(pipe.devices(1)) == 36
    assert {e.device for e in got.timeline.events} == set(range(72))
    want, _ = per_micro_batch_grads(params, x, y, 2)
    assert all(np.array_equal(a, b) for a, b in zip(flat_grads(got), want))
