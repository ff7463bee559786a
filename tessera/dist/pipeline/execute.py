"""Executing a checked :class:`.schedule.Schedule` for a :class:`.run.Pipeline`.

Events run in step order (stage order within a step), which respects every
dependency because a checked schedule puts each event at least one step after what
it waits for. Each event is also placed on the simulated timeline: a forward or
backward on the compute stream of every device of its stage's rank (a backward costs
twice its forward), each transfer on the comm streams of the two ranks, starting when
its producer ends and delaying its consumer until it arrives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.dist.pipeline.run import PipelineResult, _Accumulator
from tessera.dist.pipeline.schedule import Schedule
from tessera.mesh_sim.cost import Work
from tessera.mesh_sim.reduce import reduce_in_order
from tessera.mesh_sim.trace import Timeline


class _State:
    """Values in flight during one run, keyed by (stage, micro-batch)."""

    def __init__(self, stages: int) -> None:
        self.acts: dict[tuple[int, int], Any] = {}      # received activations
        self.cts: dict[tuple[int, int], Any] = {}       # received (or seeded) cotangents
        self.ready: dict[tuple[str, int, int], float] = {}  # arrival times (µs)
        self.stash: dict[tuple[int, int], Any] = {}     # pullbacks awaiting backward
        self.work: dict[tuple[int, int], Work] = {}
        self.peak = [0] * stages
        self.outputs: dict[int, np.ndarray] = {}
        self.losses: dict[int, Any] = {}
        self.grads = [_Accumulator() for _ in range(stages)]


def _transfer(pipe: Any, tl: Timeline, what: str, value: Any, src: int, dst: int, j: int,
              after: float) -> tuple[Any, float]:
    return pipe.send(value, src, dst, tl, f"{what} mb{j} {src}->{dst}", after)


def _forward(pipe: Any, tl: Timeline, st: _State, s: int, j: int, xs: list[Any],
             tgs: list[Any] | None) -> None:
    from tessera.autodiff import vjp

    last = s == len(pipe.stages) - 1
    x = xs[j] if s == 0 else st.acts.pop((s, j))
    params = pipe.stages[s].params
    work = pipe.stage_work(s, x)
    if pipe.loss is None:
        y = pipe.fns[s](x, *params)
    else:
        y, st.stash[(s, j)] = vjp(pipe.fns[s], x, *params)
        st.peak[s] = max(st.peak[s], sum(1 for k in st.stash if k[0] == s))
    if last and pipe.loss is not None:
        target = None if tgs is None else tgs[j]
        value, st.cts[(s, j)] = pipe._loss_vjp(y, target)
        st.losses[j] = value
        from tessera.mesh_sim.cost import call_work

        extra = call_work(pipe.loss, *((y,) if target is None else (y, target)))
        work = Work(work.flops + extra.flops, work.tensor_flops, work.nbytes + extra.nbytes,
                    work.family)
    st.work[(s, j)] = work
    _, end = tl.compute(pipe.devices(s), f"F{j} stage {s}", work, kind="forward",
                        after=st.ready.get(("act", s, j), 0.0))
    if last:
        st.outputs[j] = np.asarray(y)
    else:
        st.acts[(s + 1, j)], st.ready[("act", s + 1, j)] = _transfer(
            pipe, tl, "act", y, s, s + 1, j, end)


def _backward(pipe: Any, tl: Timeline, st: _State, s: int, j: int) -> None:
    ct, *grads = st.stash.pop((s, j))(st.cts.pop((s, j)))
    st.grads[s].add(j, grads)
    _, end = tl.compute(pipe.devices(s), f"B{j} stage {s}", st.work.pop((s, j)).scaled(2),
                        kind="backward", after=st.ready.get(("grad", s, j), 0.0))
    if s > 0:
        st.cts[(s - 1, j)], st.ready[("grad", s - 1, j)] = _transfer(
            pipe, tl, "grad", ct, s, s - 1, j, end)


def execute(pipe: Any, sched: Schedule, xs: list[Any], tgs: list[Any] | None,
            tl: Timeline) -> PipelineResult:
    """Run ``sched`` over the micro-batches ``xs`` (targets ``tgs``) on ``tl``."""
    st = _State(len(pipe.stages))
    for event in sched.events:
        if event.kind == "F":
            _forward(pipe, tl, st, event.stage, event.micro_batch, xs, tgs)
        else:
            _backward(pipe, tl, st, event.stage, event.micro_batch)
    m = sched.micro_batches
    outputs = np.concatenate([st.outputs[j] for j in range(m)])
    if pipe.loss is None:
        return PipelineResult(outputs, None, None, sched, tl, st.peak)
    losses = [st.losses[j] for j in range(m)]
    loss = reduce_in_order([np.asarray(v) for v in losses], losses[0].element)
    return PipelineResult(outputs, loss, [g.result() for g in st.grads], sched, tl, st.peak)


__all__ = ["execute"]
