"""Checks behind :class:`.schedule.Schedule`: the event dependency graph and its rules.

Nodes are compute events ``("F"|"B", stage, j)`` and transfers ``("act", s, j)`` (stage
``s`` to ``s + 1``) and ``("grad", s, j)`` (stage ``s`` to ``s - 1``). A transfer that a
program spells out as a send and a recv is one node reached from both programs: the
two ends meet, so waiting on either side shows up as an edge into the same node.
"""

from __future__ import annotations

import itertools
from typing import Any

import networkx as nx

from tessera.dist.pipeline.schedule import (
    COMPUTE,
    TRANSFERS,
    DeadlockError,
    ScheduleError,
    describe,
)

Node = tuple[str, int, int]


def _node(kind: str, stage: int, j: int) -> Node:
    if kind in COMPUTE:
        return (kind, stage, j)
    what, offset = TRANSFERS[kind]
    return (what, stage + offset, j)


def _positions(sch: Any) -> list[dict[tuple[str, int], int]]:
    """Each stage's instructions by (kind, micro-batch), after checking each is known,
    in range and listed once."""
    out = []
    for s, prog in enumerate(sch.programs):
        seen: dict[tuple[str, int], int] = {}
        for i, (k, j) in enumerate(prog):
            if k not in COMPUTE and k not in TRANSFERS:
                raise ScheduleError(f"stage {s}: unknown instruction {k!r}",
                                    hint=f"use {', '.join(COMPUTE + tuple(TRANSFERS))}")
            if not 0 <= j < sch.micro_batches:
                raise ScheduleError(f"stage {s}: micro-batch {j} is not in "
                                    f"0..{sch.micro_batches - 1}",
                                    hint="number micro-batches from 0")
            if (k, j) in seen:
                raise ScheduleError(f"stage {s} runs {k} of micro-batch {j} twice",
                                    hint="each stage runs each event exactly once")
            seen[(k, j)] = i
        for j in range(sch.micro_batches):
            for k in ("F", "B") if sch.backward else ("F",):
                if (k, j) not in seen:
                    raise ScheduleError(f"stage {s} never runs {k} of micro-batch {j}",
                                        hint="every stage runs F (and B, when training) "
                                             "of every micro-batch")
            if sch.backward and seen[("B", j)] < seen[("F", j)]:
                raise ScheduleError(f"stage {s} runs B of micro-batch {j} before its own F",
                                    hint="a backward needs the activations its forward "
                                         "stashed")
        out.append(seen)
    return out


def _check_transfers(sch: Any, pos: list[dict[tuple[str, int], int]]) -> None:
    """With explicit sends and recvs: each needed transfer is sent after its producer,
    received before its consumer, and every send meets exactly one recv."""
    p = sch.stages
    for what, step, producer in (("act", 1, "F"), ("grad", -1, "B")):
        if what == "grad" and not sch.backward:
            continue
        for s in range(p):
            dst = s + step
            for j in range(sch.micro_batches):
                send = pos[s].get((f"send_{what}", j))
                recv = pos[dst].get((f"recv_{what}", j)) if 0 <= dst < p else None
                label = describe((what, s, j))
                if not 0 <= dst < p:
                    if send is not None:
                        raise ScheduleError(f"stage {s} sends {label}, but there is no "
                                            f"stage {dst}", hint="remove the send")
                    continue
                if send is None and recv is None:
                    raise ScheduleError(f"{describe((producer, dst, j))} needs {label}, but "
                                        "no program sends it",
                                        hint=f"add ('send_{what}', {j}) to stage {s} and "
                                             f"('recv_{what}', {j}) to stage {dst}")
                if recv is None:
                    raise DeadlockError(f"stage {s} sends {label}, but stage {dst} never "
                                        "receives it: the send waits forever",
                                        hint=f"add ('recv_{what}', {j}) to stage {dst}")
                if send is None:
                    raise DeadlockError(f"stage {dst} waits to receive {label}, but stage "
                                        f"{s} never sends it",
                                        hint=f"add ('send_{what}', {j}) to stage {s}")
                if send < pos[s][(producer, j)]:
                    raise ScheduleError(f"stage {s} sends {label} before computing it",
                                        hint=f"send after ('{producer}', {j})")
                if recv > pos[dst][(producer, j)]:
                    raise ScheduleError(f"stage {dst} runs {describe((producer, dst, j))} "
                                        f"before it receives {label}",
                                        hint=f"receive before ('{producer}', {j})")
    for s in range(p):
        for (k, j) in pos[s]:
            if k.startswith("recv_"):
                src = s + (-1 if k == "recv_act" else 1)
                if not 0 <= src < p:
                    raise DeadlockError(f"stage {s} waits for {k[5:]} of micro-batch {j} "
                                        f"from stage {src}, which does not exist",
                                        hint="remove the recv")


def build_graph(sch: Any) -> nx.DiGraph:
    """The dependency graph of a schedule: an edge ``u -> v`` means v waits for u."""
    pos = _positions(sch)
    if sch.explicit:
        _check_transfers(sch, pos)
    g = nx.DiGraph()
    p, m = sch.stages, sch.micro_batches
    for s, prog in enumerate(sch.programs):
        nodes = [_node(k, s, j) for k, j in prog]
        g.add_nodes_from(nodes)
        for u, v in itertools.pairwise(nodes):
            g.add_edge(u, v, why=f"stage {s} program order")
    for j in range(m):
        for s in range(p - 1):
            g.add_edge(("F", s, j), ("act", s, j), why="data")
            g.add_edge(("act", s, j), ("F", s + 1, j), why="data")
            if sch.backward:
                g.add_edge(("B", s + 1, j), ("grad", s + 1, j), why="data")
                g.add_edge(("grad", s + 1, j), ("B", s, j), why="data")
        if sch.backward:
            for s in range(p):
                g.add_edge(("F", s, j), ("B", s, j), why="data")
    return g


def earliest(g: nx.DiGraph) -> dict[Node, int]:
    """The earliest step of every node: compute takes one step, a transfer none."""
    start: dict[Node, int] = {}
    for n in nx.topological_sort(g):
        start[n] = max((start[u] + (u[0] in COMPUTE) for u in g.predecessors(n)), default=0)
    return start


def _compute_preds(g: nx.DiGraph, v: Node) -> set[Node]:
    out, todo = set(), list(g.predecessors(v))
    while todo:
        u = todo.pop()
        if u[0] in COMPUTE:
            out.add(u)
        else:
            todo.extend(g.predecessors(u))
    return out


def check_given(sch: Any, steps: dict[Node, int]) -> None:
    """Given steps: one event per stage per step, each after everything it waits for."""
    busy: dict[tuple[int, int], Node] = {}
    for n, t in steps.items():
        if t < 0:
            raise ScheduleError(f"{describe(n)} at negative step {t}", hint="steps start at 0")
        if (n[1], t) in busy:
            raise ScheduleError(f"stage {n[1]} runs {describe(busy[(n[1], t)])} and "
                                f"{describe(n)} both at step {t}",
                                hint="a stage runs one event per step")
        busy[(n[1], t)] = n
    for v in sorted(steps, key=steps.__getitem__):
        for u in sorted(_compute_preds(sch.graph, v)):
            if steps[u] + 1 > steps[v]:
                raise ScheduleError(f"dependency order: {describe(v)} at step {steps[v]} "
                                    f"starts before {describe(u)} (step {steps[u]}) finishes",
                                    hint="an event runs at least one step after every "
                                         "event it waits for")


__all__ = ["build_graph", "check_given", "earliest"]
