"""``profile()``: record the simulated cost of what a run does, summarise it, trace it.

::

    with profile("nvl72", trace="run.json") as prof:
        result = pipe.run(x, y, micro_batches=4)     # pipeline stages and sends
        total = dist.all_reduce(partial, "tp")        # a direct collective
    print(prof.table())

Pipeline runs (:mod:`tessera.dist.pipeline.run`) and MoE layers
(:mod:`tessera.dist.moe`) place their compute and communication on the active
profile's :class:`.trace.Timeline`. Direct collective
calls on DistTensors are recorded through :func:`observe_collective`, the recording
hook: a wrapper around a collective's implementation that reports each call to the
active profile (nothing happens when none is active). The collectives' ``collective``
decorator applies it; any other function can be wrapped the same way.

The active profile is context-local (a :class:`contextvars.ContextVar`), so threads
and asyncio tasks each see their own. Inside :func:`quiet` calls are not recorded:
tessera's own layers use it around the collectives they record themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tessera.mesh_sim.cost import ALIASES, BUS_FACTOR, Work, call_work
from tessera.mesh_sim.trace import Timeline

F = TypeVar("F", bound=Callable[..., Any])
_CURRENT: ContextVar[Profile | None] = ContextVar("tessera_profile", default=None)
_QUIET: ContextVar[bool] = ContextVar("tessera_profile_quiet", default=False)


@dataclass(frozen=True)
class KindStats:
    """What one kind of operation cost over a run.

    ``calls`` operations took ``total_us`` (each from its first start to its last end
    across the devices it ran on); ``nbytes`` and ``flops`` are per device and summed
    over calls. ``algbw``/``busbw`` are bytes/s over ``total_us``; ``flops_per_s`` the
    achieved rate on one device.
    """

    kind: str
    stream: str
    calls: int
    total_us: float
    nbytes: float
    flops: float
    algbw: float
    busbw: float
    flops_per_s: float

    @property
    def mean_us(self) -> float:
        """Mean latency of one call (microseconds)."""
        return self.total_us / self.calls if self.calls else 0.0


class Profile:
    """The record of one ``profile()`` block: a :class:`Timeline` and its summary."""

    def __init__(self, topology: Any = "nvl72", group_by: str = "device") -> None:
        self.timeline = Timeline(topology)
        self.group_by = group_by

    @property
    def events(self) -> list[Any]:
        """Every :class:`.trace.TraceEvent` recorded so far."""
        return self.timeline.events

    @property
    def total_us(self) -> float:
        """Simulated time from the first start to the last end (microseconds)."""
        return self.timeline.end - min((e.start for e in self.events), default=0.0)

    def record_compute(self, name: str, work: Work, devices: Any, *,
                       kind: str | None = None) -> float:
        """Record ``work`` running on ``devices`` (ints) after everything recorded on
        them so far (program order); returns when it ends (µs)."""
        devices = list(devices)
        return self.timeline.compute(devices, name, work, kind=kind,
                                     after=self.timeline.ready(devices))[1]

    def record_call(self, fn: Callable[..., Any], *args: Any, devices: Any = (0,)) -> Any:
        """Call ``fn(*args)`` and record its work (from its Graph IR for a ``@ts.jit``
        function) on ``devices``; returns ``fn``'s result."""
        out = fn(*args)
        self.record_compute(getattr(fn, "__name__", "call"), call_work(fn, *args), devices)
        return out

    def record_collective(self, name: str, t: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        """Record a collective call ``name(t, *args, **kwargs) -> out`` on DistTensors."""
        axis = args[0] if args else kwargs.get("axis")
        kind = ALIASES.get(name, name)
        if axis is None or kind not in BUS_FACTOR:
            return  # relayout and friends move no data between devices here
        mesh = t.mesh
        groups = mesh.groups(axis)
        sized = out if kind == "all_gather" else t
        nbytes = max(_local_bytes(sized, d) for d in groups[0])
        label = f"{name}({axis if isinstance(axis, str) else ','.join(axis)})"
        if kind != "send_recv":
            self.timeline.collective(groups, kind, nbytes, name=label)
            return
        perm = args[1] if len(args) > 1 else kwargs.get("perm", ())
        pairs = [tuple(p) for p in perm] if name == "ppermute" else \
            [(kwargs["src"], kwargs["dst"])]
        moving = [[g[r] for r in sorted({r for p in pairs for r in p if p[0] != p[1]})]
                  for g in groups]
        if any(moving):
            self.timeline.collective([m for m in moving if m], "send_recv", nbytes,
                                     name=label, ranks=2)

    def summary(self) -> dict[str, KindStats]:
        """Per kind of operation: calls, time, bytes, bandwidths, FLOP rate."""
        by_kind: dict[str, list[Any]] = {}
        for e in self.events:
            by_kind.setdefault(e.kind, []).append(e)
        out = {}
        for kind, events in sorted(by_kind.items()):
            ops: dict[int, list[Any]] = {}
            for e in events:
                ops.setdefault(e.op, []).append(e)
            total = sum(max(e.end for e in es) - min(e.start for e in es)
                        for es in ops.values())
            nbytes = sum(es[0].args.get("bytes", 0.0) for es in ops.values())
            flops = sum(es[0].args.get("flops", 0.0) for es in ops.values())
            busy = sum(e.dur for e in events)
            algbw = nbytes / (total * 1e-6) if total > 0 else 0.0
            ranks = max(es[0].args.get("ranks", 1) for es in ops.values())
            comm = events[0].stream == "comm"
            factor = BUS_FACTOR[kind](ranks) if comm and kind in BUS_FACTOR and ranks > 1 \
                else 0.0
            rate = sum(e.args.get("flops", 0.0) for e in events) / (busy * 1e-6) \
                if busy > 0 and not comm else 0.0
            out[kind] = KindStats(kind, events[0].stream, len(ops), total, nbytes, flops,
                                  algbw if comm else 0.0, factor * algbw, rate)
        return out

    def table(self) -> str:
        """:meth:`summary` as a text table (times in µs, bandwidths in GB/s)."""
        head = f"{'kind':<16}{'stream':<9}{'calls':>6}{'total us':>12}{'mean us':>10}" \
               f"{'MB':>10}{'alg GB/s':>10}{'bus GB/s':>10}{'TFLOP/s':>9}"
        rows = [head, "-" * len(head)]
        for s in self.summary().values():
            rows.append(f"{s.kind:<16}{s.stream:<9}{s.calls:>6}{s.total_us:>12.2f}"
                        f"{s.mean_us:>10.2f}{s.nbytes / 1e6:>10.3f}{s.algbw / 1e9:>10.1f}"
                        f"{s.busbw / 1e9:>10.1f}{s.flops_per_s / 1e12:>9.3f}")
        rows.append(f"simulated time {self.total_us:.2f} us on "
                    f"{self.timeline.topology.name}")
        return "\n".join(rows)

    def trace(self) -> dict[str, Any]:
        """The Chrome / Perfetto trace-event JSON object."""
        return self.timeline.chrome(self.group_by)

    def write_trace(self, path: str | Path) -> Path:
        """Write the trace-event JSON to ``path``."""
        return self.timeline.write(path, self.group_by)


def _local_bytes(t: Any, device: int) -> int:
    size = 1
    for n in t.local_shape(device):
        size *= n
    return size * t.dtype.np_dtype.itemsize


@contextmanager
def profile(topology: Any = "nvl72", trace: str | Path | None = None,
            group_by: str = "device") -> Iterator[Profile]:
    """Record the simulated operations of the block on ``topology`` (``"nvl72"``,
    ``"h100"`` or a Topology); on exit write the trace to ``trace`` when given."""
    prof = Profile(topology, group_by)
    token = _CURRENT.set(prof)
    try:
        yield prof
    finally:
        _CURRENT.reset(token)
        if trace is not None:
            prof.write_trace(trace)


def current() -> Profile | None:
    """The active profile of this context, or None."""
    return _CURRENT.get()


def timeline(topology: Any = "nvl72") -> Timeline:
    """The active profile's timeline, or a fresh one on ``topology`` (a run that is
    not profiled still reports its own simulated times)."""
    prof = _CURRENT.get()
    return prof.timeline if prof is not None else Timeline(topology)


@contextmanager
def quiet() -> Iterator[None]:
    """Collectives called inside are not recorded by :func:`observe_collective`."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def observe_collective(fn: F) -> F:
    """The recording hook: ``fn(t, axis, ...)`` that reports each call to the active
    profile (after it returns, so a failing call records nothing). Observed calls made
    while one runs are part of it and are not recorded again (``shift`` is one
    ``ppermute``; a collective wrapped twice records once)."""

    @functools.wraps(fn)
    def observed(t: Any, *args: Any, **kwargs: Any) -> Any:
        prof = _CURRENT.get()
        if prof is None or _QUIET.get():
            return fn(t, *args, **kwargs)
        with quiet():  # an observed call inside this one is part of it, not a second call
            out = fn(t, *args, **kwargs)
        pairs = zip(t, out) if isinstance(t, (list, tuple)) else [(t, out)]
        for x, y in pairs:
            if hasattr(x, "mesh") and y is not x:  # y is x: nothing moved
                prof.record_collective(fn.__name__, x, args, kwargs, y)
        return out

    observed.__tessera_observed__ = True  # type: ignore[attr-defined]
    return observed  # type: ignore[return-value]


__all__ = ["KindStats", "Profile", "current", "observe_collective", "profile", "quiet",
           "timeline"]
