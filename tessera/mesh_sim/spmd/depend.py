"""Dependence analysis of index launches from their region privileges (networkx).

Every launch touches regions: for each index along its axis, the part of each argument
that index sees (its shard, or the whole tensor where the argument is replicated over
the axis), with the privilege of the parameter. Two accesses to overlapping parts of
one tensor *interfere* unless both read, or both reduce with the same op (reductions
commute; they are combined in index order).

* The indices of one launch run concurrently: interfering accesses of two different
  indices are a :class:`~tessera.dist.core.regions.RegionConflictError` at the launch
  (two indices writing the same rows, one index reading what another writes).
* Launches in program order are ordered: interference between them is a dependence,
  an edge of :attr:`LaunchGraph.graph` labelled RAW, WAR or WAW. Launches declared
  concurrent (``with plan.concurrent():``) have no order, so interference between them
  is a conflict, reported by :meth:`LaunchGraph.check` when the plan closes.

``LaunchGraph.waves()`` lists the launches that can run at the same time (the
generations of the dependence graph).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera.dist.core.regions import READ, REDUCE, Privilege, RegionConflictError
from tessera.errors import UNKNOWN_LOC, Loc, user_api

if TYPE_CHECKING:  # networkx costs 0.1 s to import: loaded when a graph is asked for
    import networkx as nx

Box = tuple[slice, ...]


@dataclass(frozen=True)
class Access:
    """One parameter of one launch: the tensor, its privilege and each index's part."""

    key: int
    name: str
    privilege: Privilege
    boxes: tuple[Box, ...]


@dataclass
class LaunchRecord:
    """A launch as the analysis sees it."""

    number: int
    name: str
    axis: str
    accesses: list[Access]
    loc: Loc = UNKNOWN_LOC
    group: int | None = None

    def __str__(self) -> str:
        return f"launch {self.number} ({self.name} over {self.axis!r}, {self.loc})"


def overlap(a: Box, b: Box) -> bool:
    """Whether two boxes of one tensor share an element."""
    return all(max(x.start, y.start) < min(x.stop, y.stop) for x, y in zip(a, b))


def interfere(a: Privilege, b: Privilege) -> str | None:
    """The dependence kind between an earlier access ``a`` and a later ``b``, or None."""
    if a.mode == READ and b.mode == READ:
        return None
    if a.mode == REDUCE and b.mode == REDUCE and a.op == b.op:
        return None
    if a.mode == READ:
        return "WAR"
    return "RAW" if b.mode == READ else "WAW"


def point_conflicts(accesses: Sequence[Access]) -> list[str]:
    """Interfering accesses of two different indices of one launch."""
    found = []
    for x, y in itertools.combinations_with_replacement(accesses, 2):
        if x.key != y.key or interfere(x.privilege, y.privilege) is None:
            continue
        for i, j in itertools.permutations(range(len(x.boxes)), 2):
            if overlap(x.boxes[i], y.boxes[j]):
                found.append(f"index {i} {x.privilege!r}s {x.name!r} where index {j} "
                             f"{y.privilege!r}s {y.name!r}")
                break
    return found


@dataclass
class LaunchGraph:
    """A recorded sequence of launches and their dependences."""

    launches: list[LaunchRecord] = field(default_factory=list)
    _group: int | None = None
    _groups: Iterator[int] = field(default_factory=itertools.count)

    def record(self, name: str, axis: str, accesses: list[Access], loc: Loc) -> None:
        self.launches.append(LaunchRecord(len(self.launches), name, axis, accesses, loc,
                                          self._group))

    @contextlib.contextmanager
    def concurrent(self) -> Iterator[LaunchGraph]:
        """Launches inside this block have no order among themselves."""
        outer, self._group = self._group, next(self._groups)
        try:
            yield self
        finally:
            self._group = outer

    def _pairs(self) -> Iterator[tuple[LaunchRecord, LaunchRecord, str, str]]:
        for a, b in itertools.combinations(self.launches, 2):
            for x in a.accesses:
                for y in b.accesses:
                    kind = interfere(x.privilege, y.privilege)
                    if x.key == y.key and kind and any(
                            overlap(p, q) for p in x.boxes for q in y.boxes):
                        yield a, b, kind, x.name if x.name == y.name else f"{x.name}/{y.name}"

    @property
    def graph(self) -> nx.DiGraph:
        """Launch numbers as nodes; an edge ``a -> b`` when ``b`` must wait for ``a``
        (attribute ``kinds``: the dependences, e.g. ``{"RAW Y"}``), transitively reduced."""
        import networkx as nx

        full = nx.DiGraph()
        full.add_nodes_from(r.number for r in self.launches)
        for a, b, kind, name in self._pairs():
            if a.group is None or a.group != b.group:
                full.add_edge(a.number, b.number)
                full.edges[a.number, b.number].setdefault("kinds", set()).add(
                    f"{kind} {name}")
        out = nx.transitive_reduction(full)
        out.add_nodes_from(full.nodes)
        for u, v in out.edges:
            out.edges[u, v]["kinds"] = full.edges[u, v]["kinds"]
        return out

    def conflicts(self) -> list[str]:
        """Interference between launches declared concurrent."""
        return [f"{a} and {b}: {kind} on {name}, but they are concurrent"
                for a, b, kind, name in self._pairs()
                if a.group is not None and a.group == b.group]

    def check(self) -> None:
        """Raise RegionConflictError for the first conflict (at the later launch)."""
        for a, b, kind, name in self._pairs():
            if a.group is not None and a.group == b.group:
                raise RegionConflictError(
                    f"{a} and {b} are concurrent, but {kind} on {name!r}: no order "
                    "resolves it", loc=b.loc,
                    hint="launch them in sequence, or give them disjoint regions "
                         "(reduce regions with one op may overlap)")

    def waves(self) -> list[list[int]]:
        """Launch numbers grouped into waves that may run at the same time."""
        import networkx as nx

        return [sorted(w) for w in nx.topological_generations(self.graph)]


# The generated __init__ of a public class: a call that does not bind is an ArgumentError.
LaunchGraph.__init__ = user_api(LaunchGraph.__init__)  # type: ignore[method-assign]

#: the graphs being recorded (innermost last)
RECORDING: list[LaunchGraph] = []


@user_api
@contextlib.contextmanager
def launch_graph(check: bool = True) -> Iterator[LaunchGraph]:
    """Record the launches of a block: ``with dist.launch_graph() as plan: ...``.

    On exit the plan is checked (:meth:`LaunchGraph.check`) unless ``check=False``.
    """
    plan = LaunchGraph()
    RECORDING.append(plan)
    try:
        yield plan
    finally:
        RECORDING.remove(plan)
    if check:
        plan.check()


def record(name: str, axis: str, accesses: list[Access], loc: Loc) -> None:
    """Add a launch to every graph being recorded."""
    for plan in RECORDING:
        plan.record(name, axis, accesses, loc)


def access(key: Any, name: str, privilege: Privilege, boxes: Sequence[Box]) -> Access:
    return Access(id(key), name, privilege, tuple(boxes))


__all__ = ["Access", "LaunchGraph", "LaunchRecord", "access", "interfere", "launch_graph",
           "overlap", "point_conflicts", "record"]
