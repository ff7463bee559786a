"""Pipeline schedules: which stage runs which micro-batch's forward (F) or backward (B)
at which time step, checked for deadlock freedom and dependency order.

A schedule is built from one *program* per stage: the ordered list of what that stage
does, ``("F", j)`` and ``("B", j)`` for micro-batch ``j``. Activations flow from stage
``s`` to ``s + 1`` after ``F``; gradients from ``s + 1`` to ``s`` after ``B``. Programs
may also spell the transfers out -- ``("send_act", j)``, ``("recv_act", j)``,
``("send_grad", j)``, ``("recv_grad", j)`` -- and then every send must meet its recv
(a rendezvous, as NCCL's send/recv); otherwise sends are buffered and implied.

Validation builds the event dependency graph (networkx): program order inside each
stage, data edges between stages, one node per matched send/recv. A cycle is a
deadlock; an unmatched send or recv, a B before its own F, or a stage that misses a
micro-batch is a :class:`ScheduleError` at the user's line. Time steps are then the
earliest each event can run: one step per F or B, transfers take no step.

:func:`gpipe` runs all forwards, then all backwards; :func:`one_f_one_b` (PipeDream-
flush, Megatron's non-interleaved schedule) alternates one forward with one backward
after ``stages - s - 1`` warm-up forwards. Both run each stage's backwards in
micro-batch order, and both take ``2 (m + p - 1)`` steps, so their bubble fraction is
``(p - 1) / (m + p - 1)``; 1F1B stashes at most ``p - s`` activations on stage ``s``
where GPipe stashes ``m``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tessera.errors import MeshError, user_api

if TYPE_CHECKING:  # networkx costs 0.1 s to import: loaded when a schedule is checked
    import networkx as nx

COMPUTE = ("F", "B")
TRANSFERS = {"send_act": ("act", 0), "recv_act": ("act", -1),
             "send_grad": ("grad", 0), "recv_grad": ("grad", 1)}


class ScheduleError(MeshError):
    """A pipeline schedule that is incomplete or runs an event before its inputs."""

    kind = "schedule error"


class DeadlockError(ScheduleError):
    """A pipeline schedule whose stages would wait for each other forever."""

    kind = "deadlock"


class PipeEvent(NamedTuple):
    """One compute event: at ``step``, ``stage`` runs ``kind`` ("F"/"B") of a micro-batch."""

    step: int
    stage: int
    micro_batch: int
    kind: str


def describe(node: tuple[Any, ...]) -> str:
    """A readable name of a schedule graph node (compute event or transfer)."""
    kind, s, j = node
    if kind in COMPUTE:
        return f"{kind}(stage {s}, micro-batch {j})"
    dst = s + 1 if kind == "act" else s - 1
    return f"the {'activation' if kind == 'act' else 'gradient'} of micro-batch {j} " \
           f"(stage {s} -> {dst})"


class Schedule:
    """A checked pipeline schedule (build it with :func:`gpipe`, :func:`one_f_one_b`,
    :meth:`from_programs` or :meth:`from_events`).

    ``events`` lists the compute events ``(step, stage, micro_batch, kind)`` in step
    order (stage order within a step); ``graph`` is the dependency graph.
    """

    def __init__(self, programs: Sequence[Sequence[tuple[str, int]]], micro_batches: int,
                 name: str = "custom", steps: dict[tuple[str, int, int], int] | None = None
                 ) -> None:
        self.name = name
        self.programs = tuple(tuple((str(k), int(j)) for k, j in p) for p in programs)
        self.stages = len(self.programs)
        self.micro_batches = int(micro_batches)
        if self.stages < 1 or self.micro_batches < 1:
            raise ScheduleError(f"a schedule needs at least one stage and one micro-batch "
                                f"(got {self.stages} and {micro_batches})",
                                hint="give one program per stage")
        self.backward = any(k == "B" for p in self.programs for k, _ in p)
        self.explicit = any(k in TRANSFERS for p in self.programs for k, _ in p)
        from tessera.dist.pipeline.check import build_graph, check_given, earliest

        self.graph = build_graph(self)
        cycle = _find_cycle(self.graph)
        if cycle:
            why = "; ".join(f"{describe(u)} waits for {describe(v)}" for v, u in reversed(cycle))
            raise DeadlockError(f"schedule {name!r} deadlocks: {why}",
                                hint="reorder the stage programs so that every event's "
                                     "inputs are produced earlier (a cycle of waits "
                                     "never resolves)")
        if steps is not None:
            check_given(self, steps)
        at = steps if steps is not None else earliest(self.graph)
        self.events = tuple(sorted(
            (PipeEvent(at[n], n[1], n[2], n[0]) for n in self.graph if n[0] in COMPUTE),
            key=lambda e: (e.step, e.stage, e.kind, e.micro_batch)))

    # -- constructors -----------------------------------------------------------------
    @classmethod
    @user_api
    def from_programs(cls, programs: Sequence[Sequence[tuple[str, int]]],
                      micro_batches: int | None = None, name: str = "custom") -> Schedule:
        """A schedule from one program per stage (see the module docstring)."""
        progs = [list(p) for p in programs]
        m = micro_batches if micro_batches is not None else \
            1 + max((int(j) for p in progs for _, j in p), default=-1)
        return cls(progs, m, name)

    @classmethod
    @user_api
    def from_events(cls, events: Iterable[Sequence[Any]], name: str = "custom") -> Schedule:
        """A schedule from ``(step, stage, micro_batch, "F"|"B")`` events; the given
        steps are checked against the dependencies and kept."""
        evs = [(int(t), int(s), int(j), str(k)) for t, s, j, k in events]
        if not evs:
            raise ScheduleError("no events", hint="give (step, stage, micro_batch, kind)")
        p = 1 + max(s for _, s, _, _ in evs)
        m = 1 + max(j for _, _, j, _ in evs)
        progs: list[list[tuple[str, int]]] = [[] for _ in range(p)]
        for _t, s, j, k in sorted(evs):
            progs[s].append((k, j))
        return cls(progs, m, name, steps={(k, s, j): t for t, s, j, k in evs})

    # -- properties ------------------------------------------------------------------
    @property
    def makespan(self) -> int:
        """Steps from the first event to the end of the last."""
        return 1 + max(e.step for e in self.events)

    def stage_events(self, stage: int) -> list[PipeEvent]:
        """The events of one stage, in step order."""
        return [e for e in self.events if e.stage == stage]

    def bubble_fraction(self) -> float:
        """The fraction of stage-steps that are idle: ``1 - busy / (stages * makespan)``."""
        return 1 - len(self.events) / (self.stages * self.makespan)

    def peak_activations(self, stage: int | None = None) -> int:
        """Most micro-batches stashed at once (forward done, backward not yet) on
        ``stage``, or on any stage; 0 for a forward-only schedule (nothing to stash)."""
        if not self.backward:
            return 0
        stages = range(self.stages) if stage is None else [stage]
        peak = 0
        for s in stages:
            live = 0
            for e in self.stage_events(s):
                live += 1 if e.kind == "F" else -1
                peak = max(peak, live)
        return peak

    def table(self) -> str:
        """The schedule as a grid: one row per stage, one column per step."""
        width = max(3, len(str(self.micro_batches - 1)) + 2)
        cells = {(e.stage, e.step): f"{e.kind}{e.micro_batch}" for e in self.events}
        head = "step    " + "".join(f"{t:>{width}}" for t in range(self.makespan))
        rows = [head] + [f"stage {s:<2}" + "".join(
            f"{cells.get((s, t), '.'):>{width}}" for t in range(self.makespan))
            for s in range(self.stages)]
        return "\n".join(rows)

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, stages={self.stages}, "
                f"micro_batches={self.micro_batches}, steps={self.makespan})")


def _find_cycle(graph: nx.DiGraph) -> list[tuple[Any, Any]]:
    import networkx as nx

    try:
        return list(nx.find_cycle(graph))
    except nx.NetworkXNoCycle:
        return []


def _check_sizes(stages: int, micro_batches: int) -> None:
    for what, v in (("stages", stages), ("micro_batches", micro_batches)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ScheduleError(f"{what}={v!r} is not a positive int",
                                hint="a pipeline has at least one stage and one micro-batch")


@user_api
def gpipe(stages: int, micro_batches: int, backward: bool = True) -> Schedule:
    """GPipe: every stage runs all forwards in micro-batch order, then all backwards
    in micro-batch order (forward-only with ``backward=False``)."""
    _check_sizes(stages, micro_batches)
    m = range(micro_batches)
    progs = [[("F", j) for j in m] + ([("B", j) for j in m] if backward else [])
             for _ in range(stages)]
    return Schedule(progs, micro_batches, "gpipe")


@user_api
def one_f_one_b(stages: int, micro_batches: int) -> Schedule:
    """1F1B: stage ``s`` runs ``min(stages - s - 1, m)`` warm-up forwards, then
    alternates one forward and one backward, then drains the remaining backwards."""
    _check_sizes(stages, micro_batches)
    progs = []
    for s in range(stages):
        warm = min(stages - s - 1, micro_batches)
        prog = [("F", j) for j in range(warm)]
        for i in range(micro_batches - warm):
            prog += [("F", warm + i), ("B", i)]
        prog += [("B", j) for j in range(micro_batches - warm, micro_batches)]
        progs.append(prog)
    return Schedule(progs, micro_batches, "1f1b")


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "one_f_one_b": one_f_one_b}


def make_schedule(spec: Any, stages: int, micro_batches: int, backward: bool) -> Schedule:
    """A Schedule from a name (``"gpipe"``, ``"1f1b"``) or a Schedule, checked to fit."""
    if isinstance(spec, str) and spec.lower() in SCHEDULES:
        if not backward:
            return gpipe(stages, micro_batches, backward=False)
        return SCHEDULES[spec.lower()](stages, micro_batches)
    if not isinstance(spec, Schedule):
        raise ScheduleError(f"unknown schedule {spec!r}",
                            hint=f"use one of {sorted(SCHEDULES)} or a Schedule")
    if (spec.stages, spec.micro_batches, spec.backward) != (stages, micro_batches, backward):
        raise ScheduleError(f"{spec!r} (backward={spec.backward}) does not fit a run of "
                            f"{stages} stages and {micro_batches} micro-batches "
                            f"(backward={backward})",
                            hint="build the schedule for this pipeline's stage count and "
                                 "the micro_batches= of the run")
    return spec


__all__ = ["COMPUTE", "SCHEDULES", "DeadlockError", "PipeEvent", "Schedule",
           "ScheduleError", "gpipe", "make_schedule", "one_f_one_b"]
