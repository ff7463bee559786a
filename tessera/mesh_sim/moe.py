"""Mixture of experts with expert parallelism: top-k routing, all_to_all dispatch/combine.

::

    layer = MoE(gate=Wg, experts=[(W1, W2) for each expert], expert_fn=ffn, k=2,
                capacity_factor=1.25)
    out = layer.forward(x, axis="ep")      # x: DistTensor [T, d] split on dim 0 over ep
    out.y                                  # DistTensor [T, d_out], same layout
    layer.dense(np.asarray(x))             # one device: every expert on every token
    layer.backward(out, dy)                # dx, dgate, dexperts (forward with train=True)

Routing (docs/parallelism.md has the full table): ``p = softmax(x @ gate)``; the top
``k`` by descending ``p``, ties to the lower expert index; combine weights ``p`` (over
the ``k`` choices their sum with ``normalize=True``); expert capacity ``ceil(factor *
T * k / E)`` over the whole batch (None: no limit), slots to all first choices, then
all second choices, ..., in token order within a rank, later ones dropped; ``y_t`` the
f32 sum, in rank order, of the kept ``w_tj * expert_tj(x_t)`` (0 if all dropped).

Experts are split over the ranks like ``numpy.array_split`` of range(E). Each rank
routes its own tokens, learns every rank's per-expert counts with an ``all_gather``
(so drops are those of the whole batch, whatever the number of ranks), sends each
expert its rows with ``all_to_all``, runs its experts and gets the rows back with a
second ``all_to_all``. With row-wise experts (exact graph functions) ``y`` equals
:meth:`MoE.dense` bit for bit. The backward runs the same exchanges on cotangents;
the gate gets its gradient through the combine weights only (top-k and capacity are
piecewise constant), summed over ranks by a rank-order ``all_reduce``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import user_api
from tessera.mesh_sim.construct import from_numpy
from tessera.mesh_sim.cost import Work, call_work
from tessera.mesh_sim.errors import MeshError
from tessera.mesh_sim.pipeline_comm import (
    exchange,
    from_blocks,
    gather_blocks,
    reduce_blocks,
    representatives,
)
from tessera.mesh_sim.profile import timeline
from tessera.mesh_sim.sharding import ShardSpec, split_offsets


def expert_capacity(tokens: int, experts: int, k: int, factor: float | None) -> int:
    """Assignments one expert takes: ``ceil(factor * tokens * k / experts)``, or all
    ``tokens`` when ``factor`` is None (an expert gets a token at most once)."""
    return tokens if factor is None else math.ceil(factor * tokens * k / experts)


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """``[T, k]`` expert indices by descending probability, ties to the lower index."""
    return np.argsort(-probs, axis=1, kind="stable")[:, :k]


def assign_slots(experts: np.ndarray, n_experts: int, capacity: int,
                 base: np.ndarray | None = None) -> np.ndarray:
    """``[T, k]`` capacity slots (-1: dropped): choice rank first, then token order.
    ``base[j, e]`` counts the earlier assignments of rank ``j`` to expert ``e`` (made
    by other ranks' tokens, and by all lower choice ranks)."""
    t, k = experts.shape
    slots = np.empty((t, k), np.int64)
    offset = np.zeros(n_experts, np.int64)
    for j in range(k):
        onehot = experts[:, j:j + 1] == np.arange(n_experts)
        start = offset if base is None else base[j]
        pos = start + np.cumsum(onehot, axis=0) - 1
        slots[:, j] = pos[np.arange(t), experts[:, j]]
        offset = offset + onehot.sum(axis=0)
    slots[slots >= capacity] = -1
    return slots


@functools.cache
def _gate_fns() -> dict[str, Any]:
    from tessera.frontend.graph.jit import jit
    from tessera.frontend.graph.linalg import softmax
    from tessera.frontend.graph.linalg import sum as ts_sum

    def probs(x: Any, w: Any) -> Any:
        return softmax(x @ w, axis=-1)

    def weights(x: Any, w: Any, sel: Any) -> Any:
        return probs(x, w) * sel

    def normalized(x: Any, w: Any, sel: Any) -> Any:
        g = probs(x, w) * sel
        return g / ts_sum(g, axis=1, keepdims=True)

    return {"probs": jit(probs), "weights": jit(weights), "normalized": jit(normalized)}


@dataclass
class MoEOutput:
    """A forward's result ``y`` (DistTensor) and what its backward needs."""

    y: Any
    capacity: int
    experts: list[np.ndarray]  # per rank: [T_r, k] chosen experts
    slots: list[np.ndarray]    # per rank: [T_r, k] capacity slots, -1 dropped
    weights: list[np.ndarray]  # per rank: [T_r, k] combine weights
    state: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def dropped(self) -> int:
        """Assignments dropped for capacity."""
        return int(sum((s < 0).sum() for s in self.slots))


@dataclass
class MoEGrads:
    """Gradients of a loss through the layer: ``dx`` (like x), ``dgate``, ``dexperts``."""

    dx: Any
    dgate: np.ndarray
    dexperts: list[tuple[np.ndarray, ...]]


class MoE:
    """A mixture-of-experts layer (see the module docstring for every rule)."""

    def __init__(self, gate: Any, experts: Sequence[Sequence[Any]],
                 expert_fn: Callable[..., Any], k: int = 1,
                 capacity_factor: float | None = None, normalize: bool = False,
                 topology: Any = "nvl72") -> None:
        from tessera.frontend.graph.jit import jit

        self.gate = np.asarray(gate, np.float32)
        self.experts = [tuple(p) for p in experts]
        self.n = len(self.experts)
        if self.gate.ndim != 2 or self.gate.shape[1] != self.n:
            raise MeshError(f"gate of shape {self.gate.shape} for {self.n} experts",
                            hint="the gate maps d features to one logit per expert: (d, E)")
        if not isinstance(k, int) or not 1 <= k <= self.n:
            raise MeshError(f"k={k!r} for {self.n} experts", hint=f"choose 1 <= k <= {self.n}")
        self.k, self.capacity_factor, self.normalize = k, capacity_factor, normalize
        self.expert_fn = jit(expert_fn)
        self.topology = topology

    def _weights_fn(self) -> Any:
        return _gate_fns()["normalized" if self.normalize else "weights"]

    def route(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Experts, combine weights and selection mask ``[T, E]`` of a token block."""
        probs = np.asarray(_gate_fns()["probs"](x, self.gate))
        chosen = top_k(probs, self.k)
        sel = np.zeros_like(probs)
        np.put_along_axis(sel, chosen, 1.0, axis=1)
        g = np.asarray(self._weights_fn()(x, self.gate, sel))
        return chosen, np.take_along_axis(g, chosen, axis=1), sel

    @user_api
    def dense(self, x: Any) -> np.ndarray:
        """The layer on one device: every expert on every token, then the combine."""
        x = np.asarray(x)
        chosen, w, _ = self.route(x)
        cap = expert_capacity(len(x), self.n, self.k, self.capacity_factor)
        slots = assign_slots(chosen, self.n, cap)
        outs = [np.asarray(self.expert_fn(x, *p)) for p in self.experts]
        h = [np.stack([outs[e][t] for t, e in enumerate(chosen[:, j])]) for j in range(self.k)]
        return combine(w, slots >= 0, h)

    @user_api
    def forward(self, x: Any, mesh: Any = None, axis: str = "ep",
                train: bool = False) -> MoEOutput:
        """Run the layer on ``x`` (a DistTensor split on dim 0 over ``axis``, or an
        array with ``mesh=``); ``train=True`` keeps what :meth:`backward` needs."""
        if not hasattr(x, "mesh"):
            if mesh is None:
                raise MeshError("an array input needs mesh=", hint="pass mesh=dist.mesh(...)")
            x = from_numpy(np.asarray(x), mesh=mesh, layout=ShardSpec((0,), (axis,)))
        if x.ndim != 2 or x.dim_axes[0] != (axis,) or any(x.dim_axes[1:]):
            raise MeshError(f"MoE input {x} must be 2-D (tokens, features) with the token "
                            f"dim split over {axis!r} alone",
                            hint=f"lay x out with ShardSpec((0,), ({axis!r},))")
        return _forward(self, x, axis, train, timeline(self.topology))

    @user_api
    def backward(self, out: MoEOutput, dy: Any) -> MoEGrads:
        """Gradients given ``dy`` (a DistTensor like ``out.y``, or its global array)."""
        if not out.state.get("train"):
            raise MeshError("backward needs a forward run with train=True",
                            hint="call layer.forward(x, axis=..., train=True)")
        return _backward(self, out, dy, timeline(self.topology))


def combine(w: np.ndarray, kept: np.ndarray, h: Sequence[np.ndarray]) -> np.ndarray:
    """``y_t = sum_j w_tj h_j[t]`` over kept choices, in rank order, in f32."""
    y = np.zeros(h[0].shape, np.float32)
    for j, hj in enumerate(h):
        np.add(y, w[:, j:j + 1] * hj, out=y, where=kept[:, j:j + 1])
    return y


def _scatter(shape: tuple[int, ...], chosen: np.ndarray, pos: np.ndarray,
             rows: np.ndarray) -> np.ndarray:
    """A ``[1, E, Cb, d]`` buffer holding ``rows[t]`` at ``(e_tj, pos_tj)``, kept only."""
    buf = np.zeros(shape, np.float32)
    tt, jj = np.nonzero(pos >= 0)
    buf[0, chosen[tt, jj], pos[tt, jj]] = rows[tt] if rows.ndim == 2 else rows[tt, jj]
    return buf


def _experts(layer: MoE, st: dict[str, Any], q: int, recv: np.ndarray, width: int,
             grad: bool, tl: Any) -> np.ndarray:
    """Rank ``q`` runs its experts on the rows all ranks sent it (forward, or the
    stashed pullbacks on cotangents); returns the ``[ranks, E_q, Cb, width]`` answer."""
    from tessera.autodiff import vjp

    n, lo, hi = st["n"], st["bounds"][q], st["bounds"][q + 1]
    out = np.zeros((len(n), hi - lo, recv.shape[2], width), np.float32)
    work = Work()
    for e in range(lo, hi):
        rows = np.concatenate([recv[r, e - lo, :n[r, e]] for r in range(len(n))])
        if not len(rows):
            continue
        params = layer.experts[e]
        w = call_work(layer.expert_fn, st["rows"][e] if grad else rows, *params)
        work = Work(work.flops + w.flops, work.tensor_flops + w.tensor_flops,
                    work.nbytes + w.nbytes, w.family)
        if grad:
            res, *st["dexperts"][e] = st["pullbacks"][e](rows)
        elif st["train"]:
            st["rows"][e] = rows
            res, st["pullbacks"][e] = vjp(layer.expert_fn, rows, *params)
        else:
            res = layer.expert_fn(rows, *params)
        res, at = np.asarray(res), 0
        for r in range(len(n)):
            out[r, e - lo, :n[r, e]] = res[at:at + n[r, e]]
            at += n[r, e]
    tl.compute(st["devs"][q], "experts", work.scaled(2 if grad else 1),
               kind="moe experts")
    return out


def _forward(layer: MoE, x: Any, axis: str, train: bool, tl: Any) -> MoEOutput:
    mesh, ranks, e_n, k = x.mesh, x.mesh.axis_size(axis), layer.n, layer.k
    groups = mesh.groups(axis)
    xs = [np.asarray(x.shard(d)) for d in representatives(mesh, axis)]
    if any(len(a) == 0 for a in xs):
        raise MeshError(f"{x.shape[0]} tokens leave some of the {ranks} ranks of {axis!r} "
                        "with none", hint="give every rank at least one token")
    st: dict[str, Any] = {"mesh": mesh, "axis": axis, "x": x, "xs": xs, "train": train,
                          "devs": [[g[r] for g in groups] for r in range(ranks)],
                          "bounds": split_offsets(e_n, ranks), "pullbacks": {}, "rows": {},
                          "dexperts": {}}
    cap = expert_capacity(x.shape[0], e_n, k, layer.capacity_factor)
    routed = [layer.route(a) for a in xs]
    for r, a in enumerate(xs):
        tl.compute(st["devs"][r], "gate", call_work(layer._weights_fn(), a, layer.gate,
                                                    routed[r][2]), kind="moe gate")
    counts = [np.stack([np.bincount(c[:, j], minlength=e_n) for j in range(k)])
              for c, _, _ in routed]
    allc = gather_blocks(counts, mesh, axis, tl, "counts")
    tot = allc.sum(axis=0)
    base = (np.cumsum(tot, axis=0) - tot)[None] + np.cumsum(allc, axis=0) - allc
    slots = [assign_slots(c, e_n, cap, base[r]) for r, (c, _, _) in enumerate(routed)]
    n = np.zeros((ranks, e_n), np.int64)
    st["pos"] = []
    for r, (c, _, _) in enumerate(routed):
        pos, flat, ef = np.full(c.size, -1), slots[r].ravel(), c.ravel()
        for e in range(e_n):
            idx = np.nonzero((ef == e) & (flat >= 0))[0]
            pos[idx[np.argsort(flat[idx])]] = np.arange(len(idx))
            n[r, e] = len(idx)
        st["pos"].append(pos.reshape(c.shape))
    st["n"], cb = n, max(1, int(n.max()))
    d = xs[0].shape[1]
    sent = [_scatter((1, e_n, cb, d), c, st["pos"][r], xs[r]) for r, (c, _, _) in
            enumerate(routed)]
    recv = exchange(sent, mesh, axis, 0, 1, tl, "dispatch")
    width = int(np.asarray(layer.expert_fn(xs[0][:1], *layer.experts[0])).shape[1])
    done = [_experts(layer, st, q, recv[q], width, False, tl) for q in range(ranks)]
    back = exchange(done, mesh, axis, 1, 0, tl, "combine")
    ys, st["h"] = [], []
    for r, (c, w, _) in enumerate(routed):
        pos = st["pos"][r]
        h = [back[r][0][c[:, j], np.maximum(pos[:, j], 0)] for j in range(k)]
        st["h"].append(h)
        ys.append(combine(w, pos >= 0, h))
        tl.compute(st["devs"][r], "combine", Work(2.0 * ys[-1].size * k,
                                                  nbytes=float(ys[-1].nbytes) * (k + 1)),
                   kind="moe combine")
    y = from_blocks(ys, mesh, axis)
    st["sel"] = [sel for _, _, sel in routed]
    return MoEOutput(y, cap, [c for c, _, _ in routed], slots, [w for _, w, _ in routed], st)


def _backward(layer: MoE, out: MoEOutput, dy: Any, tl: Any) -> MoEGrads:
    from tessera.autodiff import vjp

    st = out.state
    mesh, axis, x = st["mesh"], st["axis"], st["x"]
    ranks, rep = len(st["xs"]), representatives(mesh, axis)
    dys = [np.asarray(dy.shard(d)) if hasattr(dy, "mesh") else
           np.asarray(dy, np.float32)[x.slices(d)] for d in rep]
    cb, width = int(st["n"].max()) or 1, dys[0].shape[1]
    dws, sent = [], []
    for r in range(ranks):
        c, w, pos, h = out.experts[r], out.weights[r], st["pos"][r], st["h"][r]
        dw = np.stack([np.sum(dys[r] * hj, axis=1) for hj in h], axis=1) * (pos >= 0)
        dws.append(dw)
        dh = np.stack([w[:, j:j + 1] * dys[r] for j in range(layer.k)], axis=1)
        sent.append(_scatter((1, layer.n, cb, width), c, pos, dh))
    recv = exchange(sent, mesh, axis, 0, 1, tl, "dispatch grad")
    d = st["xs"][0].shape[1]
    done = [_experts(layer, st, q, recv[q], d, True, tl) for q in range(ranks)]
    back = exchange(done, mesh, axis, 1, 0, tl, "combine grad")
    dxs, dgs = [], []
    for r in range(ranks):
        c, pos = out.experts[r], st["pos"][r]
        dg = np.zeros((len(c), layer.n), np.float32)
        np.put_along_axis(dg, c, dws[r], axis=1)
        _, pull = vjp(layer._weights_fn(), st["xs"][r], layer.gate, st["sel"][r])
        dxg, dgate, _ = pull(dg)
        dx = np.array(dxg, np.float32)
        for j in range(layer.k):
            np.add(dx, back[r][0][c[:, j], np.maximum(pos[:, j], 0)], out=dx,
                   where=pos[:, j:j + 1] >= 0)
        dxs.append(dx)
        dgs.append(np.asarray(dgate))
    dgate = reduce_blocks(dgs, mesh, axis, tl, "dgate")
    dexperts = [tuple(np.asarray(g) for g in st["dexperts"][e]) if e in st["dexperts"] else
                tuple(np.zeros(np.shape(p), np.float32) for p in layer.experts[e])
                for e in range(layer.n)]
    dx = from_blocks(dxs, mesh, axis)
    return MoEGrads(dx, dgate, dexperts)


__all__ = ["MoE", "MoEGrads", "MoEOutput", "assign_slots", "combine", "expert_capacity",
           "top_k"]
