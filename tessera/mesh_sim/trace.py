"""Simulated time per device, and its Chrome / Perfetto trace-event JSON.

A :class:`Timeline` keeps one clock per (device, stream) -- streams ``"compute"`` and
``"comm"`` -- and places each operation at the earliest time its inputs and its
stream allow, for as long as the :class:`.cost.CostModel` says it takes. Devices are
mesh device indices, mapped one to one onto the GPUs of the topology (device ``i`` is
GPU ``i``, in tray ``i // gpus_per_tray``).

:meth:`Timeline.chrome` writes the events in the Trace Event Format that
``chrome://tracing`` and https://ui.perfetto.dev load: complete events (``ph: "X"``)
with ``ts``/``dur`` in microseconds, ``pid`` per device (or per tray), ``tid`` per
stream, ``args`` with bytes and FLOPs, plus ``ph: "M"`` metadata naming processes and
threads. Events on one (pid, tid) never overlap: a stream runs one thing at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessera.errors import MeshError
from tessera.files import write_output
from tessera.mesh_sim.cost import CommCost, ComputeCost, CostModel, Work

STREAMS = ("compute", "comm")


@dataclass(frozen=True)
class TraceEvent:
    """One operation on one device's stream; ``start`` and ``dur`` in microseconds.

    ``op`` numbers the operation the event belongs to (a collective puts one event on
    every device it involves, all with the same ``op``); ``kind`` is its summary key.
    """

    name: str
    kind: str
    device: int
    stream: str
    start: float
    dur: float
    op: int
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        """When the event finishes (microseconds)."""
        return self.start + self.dur


class Timeline:
    """Per-device simulated clocks and the events placed on them."""

    def __init__(self, topo: Any = "nvl72") -> None:
        self.cost = CostModel(topo)
        self.events: list[TraceEvent] = []
        self._clock: dict[tuple[int, str], float] = {}
        self._ops = 0

    @property
    def topology(self) -> Any:
        """The :class:`.topology.Topology` the costs come from."""
        return self.cost.topology

    def clock(self, device: int, stream: str = "compute") -> float:
        """When ``device``'s ``stream`` is next free (microseconds)."""
        return self._clock.get((device, stream), 0.0)

    def ready(self, devices: Iterable[int], streams: Sequence[str] = STREAMS) -> float:
        """When all of ``devices`` are free on all of ``streams``."""
        return max((self.clock(d, s) for d in devices for s in streams), default=0.0)

    @property
    def end(self) -> float:
        """When the last event finishes (microseconds)."""
        return max((e.end for e in self.events), default=0.0)

    def _op(self) -> int:
        self._ops += 1
        return self._ops

    def _place(self, device: int, stream: str, name: str, kind: str, start: float,
               dur: float, op: int, args: dict[str, Any]) -> TraceEvent:
        self.topology.check_gpu(device)
        start = max(start, self.clock(device, stream))
        event = TraceEvent(name, kind, device, stream, start, dur, op, args)
        self.events.append(event)
        self._clock[(device, stream)] = event.end
        return event

    def compute(self, devices: Iterable[int], name: str, work: Work, *,
                kind: str | None = None, after: float = 0.0) -> tuple[ComputeCost, float]:
        """Run ``work`` on every one of ``devices`` (replicas in parallel) no earlier
        than ``after``; returns its roofline cost and when the last replica ends."""
        cost = self.cost.work(work)
        op, end = self._op(), after
        args = {"flops": work.flops, "tensor_flops": work.tensor_flops,
                "bytes": work.nbytes, "bound": cost.bound, "format": work.family}
        for d in devices:
            end = max(end, self._place(d, "compute", name, kind or name, after,
                                       cost.seconds * 1e6, op, args).end)
        return cost, end

    def collective(self, groups: Sequence[Sequence[int]], kind: str, nbytes: float, *,
                   name: str | None = None, after: float = 0.0, algorithm: str | None = None,
                   wait_compute: bool = True, ranks: int | None = None
                   ) -> tuple[CommCost, float]:
        """A collective over each group of devices (the groups run concurrently).

        A group starts when all its members are free on the comm stream -- and on the
        compute stream with ``wait_compute``, since the collective reads what compute
        wrote -- and no earlier than ``after``. Returns the cost and the last end.
        """
        op, end = self._op(), after
        cost = None
        streams = STREAMS if wait_compute else ("comm",)
        for group in groups:
            n = ranks or len(group)
            cost = self.cost.collective(kind, nbytes, n, algorithm)
            start = max(after, self.ready(group, streams))
            args = {"bytes": nbytes, "ranks": n, "algorithm": cost.algorithm,
                    "busbw_GBps": cost.busbw / 1e9}
            for d in group:
                event = self._place(d, "comm", name or kind, cost.kind, start,
                                    cost.seconds * 1e6, op, args)
                end = max(end, event.end)
        if cost is None:
            cost = self.cost.collective(kind, nbytes, 1, algorithm)
        return cost, end

    # -- Chrome / Perfetto trace-event JSON ------------------------------------------
    def chrome(self, group_by: str = "device") -> dict[str, Any]:
        """The events as a Trace Event Format object (``{"traceEvents": [...]}``).

        ``group_by="device"``: one process per GPU, threads ``compute`` and ``comm``;
        ``group_by="tray"``: one process per compute tray, one thread per GPU stream.
        """
        if group_by not in ("device", "tray"):
            raise MeshError(f"group_by={group_by!r}", hint='use "device" or "tray"')
        topo = self.topology
        out: list[dict[str, Any]] = []
        named: set[tuple[int, int | None]] = set()
        for e in sorted(self.events, key=lambda e: (e.device, e.stream, e.start, e.op)):
            s = STREAMS.index(e.stream)
            if group_by == "device":
                pid, tid = e.device, s
                pname, tname = f"GPU {e.device} (tray {topo.tray_of(e.device)})", e.stream
            else:
                pid, tid = topo.tray_of(e.device), 2 * e.device + s
                pname, tname = f"tray {pid}", f"GPU {e.device} {e.stream}"
            if (pid, None) not in named:
                named.add((pid, None))
                out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"name": pname}})
            if (pid, tid) not in named:
                named.add((pid, tid))
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                            "args": {"name": tname}})
            out.append({"name": e.name, "cat": e.kind, "ph": "X", "ts": e.start,
                        "dur": e.dur, "pid": pid, "tid": tid,
                        "args": {**e.args, "op": e.op, "device": e.device}})
        return {"traceEvents": out, "displayTimeUnit": "ns",
                "otherData": {"topology": topo.name, "device": topo.device.name}}

    def write(self, path: str | Path, group_by: str = "device") -> Path:
        """Write :meth:`chrome` to ``path`` as JSON; returns the path."""
        return write_output(path, json.dumps(self.chrome(group_by), indent=None), "trace")


__all__ = ["STREAMS", "Timeline", "TraceEvent"]
