"""Pipeline parallelism: stages on the ranks of a ``pp`` mesh axis, run by a schedule.

::

    pipe = Pipeline([Stage(layer, (W0, b0)), Stage(layer, (W1, b1))], mesh, axis="pp",
                    loss=lambda y, t: ts.sum((y - t) * (y - t)))
    res = pipe.run(x, y, micro_batches=4, schedule="1f1b")
    res.outputs, res.loss, res.grads          # grads[s][k]: stage s, parameter k

Stage ``s`` runs on pp rank ``ranks[s]`` (default ``s``); every device at that rank runs
it (devices along other axes are replicas). A stage function is called ``fn(x,
*params)`` and traced as a graph function; a forward stashes its pullback
(``ts.vjp``), the backward calls it with the cotangent from the next stage. Activations
and their gradients move between ranks by ``ppermute`` of a DistTensor that is
partial over the axis (the sending rank holds the value).

Order of accumulation (what makes results bitwise reproducible): the batch is split
with ``numpy.array_split`` along dim 0; the loss is the sum of the micro-batch losses
and every parameter gradient the sum of its micro-batch gradients, both added left to
right in micro-batch order in the accumulation format of their element (f32 for f32,
bf16, fp8) and rounded once, exactly as ``dist.reduce_in_order``. A schedule may run
backwards in any order: gradients that arrive early wait for their turn. So every
schedule gives the bits of :meth:`Pipeline.reference`, the same program on one device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import user_api
from tessera.mesh_sim.construct import check_mesh
from tessera.mesh_sim.cost import Work, call_work
from tessera.mesh_sim.errors import MeshError
from tessera.mesh_sim.pipeline import Schedule, make_schedule
from tessera.mesh_sim.pipeline_comm import send_block
from tessera.mesh_sim.profile import timeline
from tessera.mesh_sim.reduce import reduce_in_order
from tessera.mesh_sim.trace import Timeline


@dataclass(frozen=True)
class Stage:
    """A pipeline stage: ``fn(x, *params) -> y`` and its parameters."""

    fn: Callable[..., Any]
    params: tuple[Any, ...] = ()
    name: str | None = None


@dataclass
class PipelineResult:
    """What a run returns: last-stage ``outputs`` (micro-batches concatenated), the
    summed ``loss`` and per-stage parameter ``grads`` (None without a loss), the
    ``schedule`` it ran, its ``timeline`` and the most activations each stage held."""

    outputs: np.ndarray
    loss: np.ndarray | None
    grads: list[tuple[np.ndarray, ...]] | None
    schedule: Schedule | None
    timeline: Timeline | None
    peak_stash: list[int]

    @property
    def time_us(self) -> float:
        """Simulated time of the run on the timeline (microseconds)."""
        if self.timeline is None:
            return 0.0
        return self.timeline.end - min((e.start for e in self.timeline.events), default=0.0)


class _Accumulator:
    """Sums per-micro-batch gradients in micro-batch order, whatever order they come."""

    def __init__(self) -> None:
        self.pending: dict[int, Sequence[Any]] = {}
        self.next = 0
        self.acc: list[np.ndarray] = []
        self.elements: list[Any] = []

    def add(self, j: int, grads: Sequence[Any]) -> None:
        self.pending[j] = grads
        while self.next in self.pending:
            for k, g in enumerate(self.pending.pop(self.next)):
                a = np.asarray(g)
                if self.next == 0:
                    from tessera.numerics import accum_of

                    self.elements.append(g.element)
                    self.acc.append(a.astype(accum_of(g.element).np_dtype, copy=True))
                else:
                    np.add(self.acc[k], a, out=self.acc[k])
            self.next += 1

    def result(self) -> tuple[np.ndarray, ...]:
        from tessera.numerics import convert, storage_of

        return tuple(a if a.dtype == storage_of(e).np_dtype and storage_of(e).name != "tf32"
                     else convert(a, e) for a, e in zip(self.acc, self.elements))


def _split(x: Any, m: int, what: str) -> list[np.ndarray]:
    arr = np.asarray(x)
    if arr.ndim == 0 or arr.shape[0] < m:
        raise MeshError(f"cannot split {what} of shape {arr.shape} into {m} micro-batches",
                        hint="micro_batches must not exceed the batch size (dim 0)")
    return np.array_split(arr, m)


class Pipeline:
    """Stages assigned to the ranks of mesh axis ``axis``; ``loss(y, target)`` (or
    ``loss(y)``) makes runs train (forward and backward), without it they infer."""

    def __init__(self, stages: Sequence[Any], mesh: Any, axis: str = "pp",
                 loss: Callable[..., Any] | None = None, ranks: Sequence[int] | None = None,
                 topology: Any = "nvl72") -> None:
        from tessera.frontend.graph.jit import jit

        self.mesh = check_mesh(mesh)
        size = self.mesh.axis_size(axis)
        self.axis = axis
        self.stages = [s if isinstance(s, Stage) else Stage(*s) if isinstance(s, tuple)
                       else Stage(s) for s in stages]
        if not self.stages:
            raise MeshError("a pipeline needs at least one stage", hint="pass stages=[...]")
        self.ranks = list(range(len(self.stages))) if ranks is None else list(ranks)
        if len(self.ranks) != len(self.stages) or len(set(self.ranks)) != len(self.ranks) \
                or not all(isinstance(r, int) and 0 <= r < size for r in self.ranks):
            raise MeshError(f"{len(self.stages)} stages need distinct ranks of axis {axis!r} "
                            f"(size {size}); got ranks {self.ranks}",
                            hint=f"give at most {size} stages, one per rank")
        self.fns = [jit(s.fn) for s in self.stages]
        self.loss = None if loss is None else jit(loss)
        self.topology = topology
        self._groups = self.mesh.groups(axis)

    def devices(self, stage: int) -> list[int]:
        """The device indices that run ``stage`` (its rank and all replicas)."""
        return [g[self.ranks[stage]] for g in self._groups]

    def send(self, value: Any, src: int, dst: int, tl: Timeline, name: str,
             after: float) -> tuple[Any, float]:
        """Send ``value`` (a tensor) from stage ``src``'s rank to stage ``dst``'s by
        ppermute, starting at ``after``; returns it on arrival and when it arrives."""
        from tessera.frontend.graph.tensor import Tensor

        arr, end = send_block(np.asarray(value), value.element, self.mesh, self.axis,
                              self.ranks[src], self.ranks[dst], tl, name, after)
        return Tensor(arr, value.element), end

    def _loss_vjp(self, y: Any, target: Any) -> tuple[Any, Any]:
        from tessera.autodiff import vjp

        args = (y,) if target is None else (y, target)
        value, pull = vjp(self.loss, *args)
        return value, pull(np.ones_like(np.asarray(value)))[0]

    @user_api
    def run(self, inputs: Any, targets: Any = None, micro_batches: int = 1,
            schedule: Any = "1f1b") -> PipelineResult:
        """Run the pipeline over ``inputs`` split into ``micro_batches`` by ``schedule``
        (``"gpipe"``, ``"1f1b"`` or a :class:`Schedule`)."""
        from tessera.mesh_sim.pipeline_exec import execute

        train = self.loss is not None
        sched = make_schedule(schedule, len(self.stages), micro_batches, train)
        xs = _split(inputs, micro_batches, "inputs")
        ts_ = _split(targets, micro_batches, "targets") if targets is not None else None
        return execute(self, sched, xs, ts_, timeline(self.topology))

    @user_api
    def reference(self, inputs: Any, targets: Any = None,
                  micro_batches: int = 1) -> PipelineResult:
        """The same program on one device: every micro-batch through every stage and
        back, gradients summed in micro-batch order (no mesh, no schedule)."""
        from tessera.autodiff import vjp

        xs = _split(inputs, micro_batches, "inputs")
        tgs = _split(targets, micro_batches, "targets") if targets is not None else None
        outs, losses, grads = [], [], [[] for _ in self.stages]
        for j, x in enumerate(xs):
            pulls = []
            for fn, st in zip(self.fns, self.stages):
                if self.loss is None:
                    x = fn(x, *st.params)
                    continue
                x, pull = vjp(fn, x, *st.params)
                pulls.append(pull)
            outs.append(np.asarray(x))
            if self.loss is None:
                continue
            value, ct = self._loss_vjp(x, None if tgs is None else tgs[j])
            losses.append(value)
            for s in reversed(range(len(self.stages))):
                ct, *g = pulls[s](ct)
                grads[s].append(g)
        if self.loss is None:
            return PipelineResult(np.concatenate(outs), None, None, None, None, [0] * len(
                self.stages))
        loss = reduce_in_order([np.asarray(v) for v in losses], losses[0].element)
        summed = [tuple(reduce_in_order([np.asarray(g[k]) for g in gs], gs[0][k].element)
                        for k in range(len(gs[0]))) for gs in grads]
        return PipelineResult(np.concatenate(outs), loss, summed, None, None,
                              [1] * len(self.stages))

    def stage_work(self, stage: int, x: Any) -> Work:
        """The work of one forward of ``stage`` on ``x`` (from its Graph IR)."""
        return call_work(self.fns[stage], x, *self.stages[stage].params)


__all__ = ["Pipeline", "PipelineResult", "Stage"]
