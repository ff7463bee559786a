"""Tracing the bodies of an ``index_launch`` in lockstep.

A collective in a launch body can change its value's shape (``all_gather`` concatenates
the values of all indices; ``reduce_scatter`` and ``all_to_all`` split them), and the
shape of one index's result depends on the other indices' values. So the bodies are
traced together: each index traces in its own thread, and the threads take turns, one
at a time, in index order. A thread that reaches a collective waits there; when every
index has arrived, the result type of each is worked out from all the operand types
and the threads go on. An index that finishes while others wait, or that reaches a
different collective, is a divergent collective (:class:`LaunchError` at its line).

Only one thread runs at any moment, so the tracer's global state (the stack of active
traces, the launch index) is saved and restored at each switch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.errors import TesseraError, user_location
from tessera.frontend.graph import trace as trace_state
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.mesh_sim.spmd.lockstep import LaunchError

_LOCAL = threading.local()


def _sizes(n: int, parts: int) -> list[int]:
    return [len(p) for p in np.array_split(np.arange(n), parts)]


def local_shapes(op: Any, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The result shape of each index of a local-view collective."""
    n = len(shapes)
    kind = type(op)
    if (
        kind in (graph_ir.AllReduce, graph_ir.MeshBroadcast, graph_ir.Ppermute)
        and len(set(shapes)) > 1
    ):
        raise LaunchError(f"{op.name} over {op.axis!r} combines values of shapes "
                          f"{sorted(set(shapes))}", hint="every index must give one shape")
    if kind is graph_ir.AllGather:
        d = op.dim or 0
        total = sum(s[d] for s in shapes)
        return [(*s[:d], total, *s[d + 1:]) for s in shapes]
    if kind is graph_ir.ReduceScatter:
        if len(set(shapes)) > 1:
            raise LaunchError(f"reduce_scatter combines values of shapes {sorted(set(shapes))}",
                              hint="every index must give one shape")
        d = op.dim
        return [(*s[:d], k, *s[d + 1:]) for s, k in zip(shapes, _sizes(shapes[0][d], n))]
    if kind is graph_ir.AllToAll:
        split, concat = op.split_dim, op.concat_dim
        pieces = _sizes(shapes[0][split], n)
        total = sum(s[concat] for s in shapes)
        out = []
        for k in range(n):
            s = list(shapes[k])
            s[split], s[concat] = pieces[k], total
            out.append(tuple(s))
        return out
    if kind is graph_ir.Shard:
        return [(*s[:op.dim], _sizes(s[op.dim], n)[k], *s[op.dim + 1:])
                for k, s in enumerate(shapes)]
    return list(shapes)


class Lockstep:
    """The meeting point of the tracing threads of one launch (one runs at a time)."""

    def __init__(self, n: int, axis: str) -> None:
        self.n, self.axis = n, axis
        self.go = [threading.Semaphore(0) for _ in range(n)]
        self.waiting: dict[int, tuple[Any, TensorType, Any]] = {}
        self.ready: set[int] = set()
        self.results: dict[int, TensorType] = {}
        self.done: set[int] = set()
        self.error: BaseException | None = None
        self.states: dict[int, tuple[list[Any], dict[str, int]]] = {}

    # -- switching between threads
    def _save(self, i: int) -> None:
        from tessera.dist import launch

        self.states[i] = (list(trace_state._STACK), dict(launch._INDEX))

    def _restore(self, i: int) -> None:
        from tessera.dist import launch

        stack, index = self.states[i]
        trace_state._STACK[:] = stack
        launch._INDEX.clear()
        launch._INDEX.update(index)

    def _fail(self, err: BaseException) -> None:
        self.error = self.error or err
        for sem in self.go:  # wake every thread so that it can unwind
            sem.release()

    def _next(self, after: int) -> None:
        """Hand the turn to the next index still tracing, or settle the meeting."""
        for k in range(after + 1, self.n):
            if k not in self.done and (k not in self.waiting or k in self.ready):
                self.go[k].release()
                return
        pending = sorted(k for k in self.waiting if k not in self.ready)
        if not pending:
            return  # every body has finished
        err = self._settle(pending)
        if err is not None:
            self._fail(err)
            return
        self.ready = set(pending)
        self.go[pending[0]].release()

    def _settle(self, pending: list[int]) -> TesseraError | None:
        op, _, loc = self.waiting[pending[0]]
        if self.done:
            return LaunchError(f"index {pending[0]} waits in {op.name} but index "
                               f"{min(self.done)} has finished: the bodies reach different "
                               "collectives", loc=loc, hint="every index must call the "
                                                            "same collectives in order")
        for k in pending[1:]:
            other, _, where = self.waiting[k]
            if other != op:
                return LaunchError(f"index {pending[0]} calls {op} but index {k} calls "
                                   f"{other} at the same point: divergent collectives",
                                   loc=where, hint="every index must call the same "
                                                   "collectives, in the same order")
        types = [self.waiting[k][1] for k in pending]
        try:
            shapes = local_shapes(op, [tuple(t.shape) for t in types])  # type: ignore[misc]
        except TesseraError as err:
            return type(err)(err.message, hint=err.hint, loc=loc)
        self.results = {k: TensorType(s, t.element) for k, s, t in zip(pending, shapes, types)}
        return None

    # -- what the threads call
    def meet(self, i: int, op: Any, t: TensorType) -> TensorType:
        """Wait at a collective until every index is there; return this index's type."""
        self.waiting[i] = (op, t, user_location())
        self._save(i)
        self._next(i)
        self.go[i].acquire()
        if self.error is not None:
            raise _Abort
        self._restore(i)
        del self.waiting[i]
        self.ready.discard(i)
        return self.results[i]

    def run(self, bodies: Sequence[Callable[[], Any]]) -> list[Any]:
        """Trace every body (body ``i`` in thread ``i``); return their results."""
        from tessera.dist import launch

        out: list[Any] = [None] * self.n
        main = (list(trace_state._STACK), dict(launch._INDEX))
        for i in range(self.n):
            self.states[i] = ([], {**main[1], self.axis: i})

        def thread(i: int) -> None:
            self.go[i].acquire()
            if self.error is not None:
                return
            self._restore(i)
            _LOCAL.lockstep, _LOCAL.index = self, i
            try:
                out[i] = bodies[i]()
            except _Abort:
                return
            except BaseException as err:  # re-raised by the main thread
                self._fail(err)
                return
            self.done.add(i)
            self._next(i)

        threads = [threading.Thread(target=thread, args=(i,), daemon=True)
                   for i in range(self.n)]
        for th in threads:
            th.start()
        self.go[0].release()
        for th in threads:
            th.join()
        trace_state._STACK[:] = main[0]
        launch._INDEX.clear()
        launch._INDEX.update(main[1])
        if self.error is not None:
            raise self.error
        return out


class _Abort(Exception):
    """Unwinds a waiting thread after another index failed."""


def current(axis: Any) -> tuple[Lockstep, int] | None:
    """The launch being traced over ``axis`` by this thread, and the index."""
    lockstep = getattr(_LOCAL, "lockstep", None)
    if lockstep is None or graph_ir.axis_names(axis) != (lockstep.axis,):
        return None
    return lockstep, _LOCAL.index


__all__ = ["Lockstep", "current", "local_shapes"]
