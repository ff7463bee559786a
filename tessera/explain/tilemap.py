"""The tile map of a kernel: which tile group touches which elements of each tensor.

The kernel runs once in the tile simulator (``mode="reference"``: every access goes
through the reference rules of :mod:`tessera.interp.tile.memory.globals`, whose
``load``, ``store``, ``check_read`` and ``check_write`` see the elements of an access
in every program at once). A recorder wraps those four functions for the one launch
and notes, per tensor, per direction (read or written) and per barrier phase (the
group's barrier count, ``State.epoch``), the lowest and highest group id that touched
each element; an element with one group is drawn in that group's colour, one touched
by several groups in grey. A sanitizer finding of the run is drawn on the same map:
the element it names is outlined in red and its message shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import TesseraError

#: at most this many barrier phases are drawn per tensor (the rest are merged)
MAX_PHASES = 6
#: at most this many cells along a side; larger tensors draw blocks of elements
MAX_CELLS = 64
SEVERAL = -2


@dataclass
class Touches:
    """Lowest and highest group per element of one tensor, by (direction, phase)."""

    shape: tuple[int, ...]
    maps: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def add(self, direction: str, phase: int, flat: np.ndarray, group: np.ndarray) -> None:
        key = (direction, min(phase, MAX_PHASES - 1))
        if key not in self.maps:
            size = int(np.prod(self.shape))
            self.maps[key] = (np.full(size, np.iinfo(np.int64).max), np.full(size, -1))
        lo, hi = self.maps[key]
        np.minimum.at(lo, flat, group)
        np.maximum.at(hi, flat, group)

    def owners(self, direction: str, phase: int) -> np.ndarray:
        """Per element: the one group that touched it, SEVERAL, or -1 (none)."""
        lo, hi = self.maps[(direction, phase)]
        out = np.where(hi < 0, -1, np.where(lo == hi, lo, SEVERAL))
        return out.reshape(self.shape)


class Recorder:
    """Wraps the global-memory rules for one launch and collects :class:`Touches`."""

    def __init__(self) -> None:
        self.tensors: dict[str, Touches] = {}
        self.group_size = 1

    def note(self, direction: str, st: Any, ctx: Any, ref: Any, plan: Any = None) -> None:
        from tessera.interp.tile.memory.access import AccessPlan

        mem = ref.mem
        try:
            if plan is None:
                plan = AccessPlan(list(ref.starts), ref.sizes, ref.squeeze, ctx.nlead,
                                  expand=ctx.lead)
            flat = np.asarray(plan.view(np.arange(mem.array.size).reshape(mem.dims)))
            lead = tuple(ctx.lead) + (1,) * (flat.ndim - ctx.nlead)
            group = np.broadcast_to(np.asarray(ctx.pid).reshape(lead), flat.shape) \
                // st.geom.group_size
            epoch = np.asarray(st.epoch)[np.asarray(ctx.group_flat)]
            phase = int(np.max(epoch)) if np.size(epoch) else 0
        except (IndexError, ValueError, TypeError, AttributeError):
            return  # an access outside the tensor: the sanitizer reports it
        touches = self.tensors.setdefault(mem.name, Touches(tuple(mem.dims)))
        touches.add(direction, phase, flat.ravel(), group.ravel().astype(np.int64))
        self.group_size = st.geom.group_size

    @contextlib.contextmanager
    def active(self) -> Iterator[Recorder]:
        from tessera.interp.tile.memory import globals as global_mem

        saved = {n: getattr(global_mem, n) for n in ("load", "store", "check_read",
                                                     "check_write")}

        def load(st: Any, ctx: Any, loc: Any, ref: Any) -> Any:
            self.note("read", st, ctx, ref)
            return saved["load"](st, ctx, loc, ref)

        def store(st: Any, ctx: Any, loc: Any, ref: Any, *args: Any, **kw: Any) -> Any:
            self.note("written", st, ctx, ref)
            return saved["store"](st, ctx, loc, ref, *args, **kw)

        def check_read(st: Any, ctx: Any, loc: Any, ref: Any, plan: Any = None) -> Any:
            self.note("read", st, ctx, ref, plan)
            return saved["check_read"](st, ctx, loc, ref, plan)

        def check_write(st: Any, ctx: Any, loc: Any, ref: Any, plan: Any, reduce: bool
                        ) -> Any:
            self.note("written", st, ctx, ref, plan)
            return saved["check_write"](st, ctx, loc, ref, plan, reduce)

        wrappers = {"load": load, "store": store, "check_read": check_read,
                    "check_write": check_write}
        try:
            for name, fn in wrappers.items():
                setattr(global_mem, name, fn)
            yield self
        finally:
            for name, fn in saved.items():
                setattr(global_mem, name, fn)


def record(kernel: Any, arguments: dict[str, Any]) -> tuple[Recorder, TesseraError | None]:
    """Run ``kernel`` once on copies of ``arguments`` with the recorder on; the
    sanitizer finding (or other TesseraError) it raised, if any."""
    copies = {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in arguments.items()}
    recorder = Recorder()
    with recorder.active():
        try:
            kernel(**copies, mode="reference")
        except TesseraError as err:
            return recorder, err
    return recorder, None


def record_program(program: Any, args: list[Any]
                   ) -> tuple[dict[str, Recorder], TesseraError | None]:
    """Run a generated tile program (``ts.jit(f).lower(...).tile``) once on copies of
    ``args`` with one recorder per kernel launch; the finding that stopped it, if any."""
    from tessera.interp.tile.program import run_program

    recorders: dict[str, Recorder] = {}

    @contextlib.contextmanager
    def watch(name: str) -> Iterator[Recorder]:
        with recorders.setdefault(name, Recorder()).active() as recorder:
            yield recorder

    try:
        run_program(program, [np.array(a) for a in args], mode="reference", watch=watch)
    except TesseraError as err:
        return recorders, err
    return recorders, None


__all__ = ["MAX_CELLS", "MAX_PHASES", "SEVERAL", "Recorder", "Touches", "record",
           "record_program"]
