"""Expert parallelism against a dense single-device MoE written here from scratch.

The reference routes token by token in plain Python (sorted by probability then
expert index, slots handed out choice rank by choice rank, in token order), runs
every expert on every token, and adds the kept terms in rank order in f32. Gate
probabilities and expert outputs come from tessera graph functions, which are exact
per row, so the sharded layer must agree bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist
from tessera.dist.moe import MoE, assign_slots, expert_capacity, top_k
from tessera.mesh_sim.profile import profile
from tests.mesh_sim.util import raises_here


@ts.jit
def ffn(x, W1, W2):
    return ts.relu(x @ W1) @ W2


probs_of = ts.jit(lambda x, w: ts.softmax(x @ w, axis=-1))


def reference(x, gate, experts, k, factor, normalize):
    """y, the kept (token, choice) pairs and their weights, computed naively."""
    t_n, e_n = len(x), gate.shape[1]
    p = np.asarray(probs_of(x, gate))
    chosen = [sorted(range(e_n), key=lambda e: (-p[t, e], e))[:k] for t in range(t_n)]
    cap = t_n if factor is None else math.ceil(factor * t_n * k / e_n)
    used = [0] * e_n
    kept = set()
    for j in range(k):
        for t in range(t_n):
            e = chosen[t][j]
            if used[e] < cap:
                kept.add((t, j))
            used[e] += 1
    outs = [np.asarray(ffn(x, *ps)) for ps in experts]
    y = np.zeros((t_n, outs[0].shape[1]), np.float32)
    for t in range(t_n):
        ws = [p[t, e] for e in chosen[t]]
        if normalize:
            ws = [w / np.float32(math.fsum(ws)) for w in ws]
        for j, e in enumerate(chosen[t]):
            if (t, j) in kept:
                y[t] = y[t] + np.float32(ws[j]) * outs[e][t]
    return y, kept


def setup(tokens, experts, d, h, seed, tie=False):
    rng = np.random.default_rng(seed)
    gate = rng.standard_normal((d, experts)).astype(np.float32)
    if tie and experts > 1:
        gate[:, 1] = gate[:, 0]  # experts 0 and 1 always tie
    params = [(rng.standard_normal((d, h)).astype(np.float32) * 0.3,
               rng.standard_normal((h, d)).astype(np.float32) * 0.3) for _ in range(experts)]
    return gate, params, rng.standard_normal((tokens, d)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(ep=st.integers(1, 4), extra=st.integers(0, 12), experts=st.integers(1, 6),
       k=st.integers(1, 3), factor=st.sampled_from([None, 0.5, 1.0, 1.25, 2.0]),
       normalize=st.booleans(), tie=st.booleans(), seed=st.integers(0, 2**16))
def test_sharded_moe_equals_the_dense_reference(ep, extra, experts, k, factor, normalize,
                                                tie, seed):
    k = min(k, experts)
    gate, params, x = setup(ep + extra, experts, 4, 6, seed, tie)
    layer = MoE(gate, params, ffn, k=k, capacity_factor=factor, normalize=normalize)
    mesh = dist.mesh(axes=("ep",), shape=(ep,))
    out = layer.forward(x, mesh=mesh, axis="ep")
    want, kept = reference(x, gate, params, k, factor, normalize)
    got = np.asarray(out.y)
    assert np.array_equal(got, layer.dense(x))
    if normalize:  # the reference normalises with its own sum
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        assert np.array_equal(got, want)
    slots = np.concatenate(out.slots)
    assert {tuple(p) for p in np.argwhere(slots >= 0)} == kept
    assert out.dropped == len(x) * k - len(kept)


def test_ties_go_to_the_lower_expert_index():
    p = np.array([[0.25, 0.25, 0.5, 0.0], [0.1, 0.3, 0.3, 0.3]], np.float32)
    assert top_k(p, 3).tolist() == [[2, 0, 1], [1, 2, 3]]


def test_capacity_and_drop_rule():
    assert expert_capacity(10, 4, 2, 1.0) == 5
    assert expert_capacity(10, 4, 2, 1.25) == 7
    assert expert_capacity(10, 4, 2, None) == 10
    # First choices fill before second choices; within a rank, token order.
    chosen = np.array([[0, 1], [1, 0], [0, 1], [0, 2]])
    assert assign_slots(chosen, 3, 2).tolist() == [[0, 1], [0, -1], [1, -1], [-1, 0]]


def test_gradients_equal_ts_grad_of_the_dense_layer():
    gate, params, x = setup(12, 4, 4, 6, 3)
    rng = np.random.default_rng(9)
    dy = rng.standard_normal((12, 4)).astype(np.float32)
    layer = MoE(gate, params, ffn, k=2, capacity_factor=1.0, normalize=True)
    mesh = dist.mesh(axes=("dp", "ep"), shape=(2, 3))
    out = layer.forward(x, mesh=mesh, axis="ep", train=True)
    grads = layer.backward(out, dy)
    _, kept = reference(x, gate, params, 2, 1.0, True)
    p = np.asarray(probs_of(x, gate))
    chosen = top_k(p, 2)
    sel = np.zeros_like(p)
    keep = np.zeros_like(p)
    for t in range(12):
        for j in range(2):
            sel[t, chosen[t, j]] = 1.0
            keep[t, chosen[t, j]] = float((t, j) in kept)
    eye = np.eye(4, dtype=np.float32)

    def dense_loss(x, Wg, ps):
        g = ts.softmax(x @ Wg, axis=-1) * sel
        c = g / ts.sum(g, axis=1, keepdims=True) * keep
        y = None
        for e in range(4):
            term = (c @ eye[:, e:e + 1]) * ffn(x, ps[2 * e], ps[2 * e + 1])
            y = term if y is None else y + term
        return ts.sum(y * dy)

    dx, dgate, dps = ts.grad(dense_loss, argnums=(0, 1, 2))(
        x, gate, [a for ps in params for a in ps])
    np.testing.assert_allclose(np.asarray(grads.dx), np.asarray(dx), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads.dgate, np.asarray(dgate), rtol=1e-5, atol=1e-6)
    for e in range(4):
        for i in range(2):
            np.testing.assert_allclose(grads.dexperts[e][i], np.asarray(dps[2 * e + i]),
                                       rtol=1e-5, atol=1e-6)


def test_replicas_and_the_timeline():
    gate, params, x = setup(8, 4, 4, 5, 4)
    mesh = dist.mesh(axes=("dp", "ep"), shape=(2, 2))
    with profile("h100") as prof:
        out = MoE(gate, params, ffn, k=2).forward(x, mesh=mesh, axis="ep")
    assert out.y.dim_axes == (("ep",), ())
    assert np.array_equal(np.asarray(out.y), MoE(gate, params, ffn, k=2).dense(x))
    calls = {k: s.calls for k, s in prof.summary().items()}
    assert calls == {"all_gather": 1, "all_to_all": 2, "moe combine": 2, "moe experts": 2,
                     "moe gate": 2}
    assert {e.device for e in prof.events} == {0, 1, 2, 3}  # dp replicas work too


def test_errors_name_the_callers_line():
    gate, params, x = setup(4, 3, 4, 5, 5)
    mesh = dist.mesh(axes=("ep",), shape=(2,))
    raises_here(ts.TesseraError, lambda: MoE(gate, params, ffn, k=4), "k=4")
    raises_here(ts.TesseraError, lambda: MoE(gate[:, :2], params, ffn), "gate of shape")
    layer = MoE(gate, params, ffn)
    raises_here(ts.TesseraError, lambda: layer.forward(x), "mesh=")
    raises_here(ts.TesseraError, lambda: layer.forward(x[:1], mesh=mesh), "none")
    out = layer.forward(x, mesh=mesh)
    raises_here(ts.TesseraError, lambda: layer.backward(out, x), "train=True")


@pytest.mark.parametrize("ep", [1, 4])
def test_more_ranks_than_experts(ep):
    gate, params, x = setup(8, 2, 4, 5, 6)
    layer = MoE(gate, params, ffn, k=1, capacity_factor=0.5)
    out = layer.forward(x, mesh=dist.mesh(axes=("ep",), shape=(ep,)))
    assert np.array_equal(np.asarray(out.y), layer.dense(x))
