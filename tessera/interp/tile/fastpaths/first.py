"""The first trip of a staged K loop, from the launch before.

:mod:`.staged` derives the trips after the first of a ``cp_async`` + ``mma`` K loop from
the first, which runs step by step. When they lie end to end along K, the deferred
accumulator receives one view per operand over the whole K. When the same compiled
kernel is launched again with arguments that make the loop's views the same (same
shapes, strides and dtypes of the staged parameters, the same loop bounds and
loop-invariant view starts, the same launch shape), the whole loop is derived, the
first trip included, from what the launch before remembered: the operands' and the
buffers' last tiles' views, as offsets into the parameters.

Why the result and the reports are the general loop's (and so the reference's):

* **The first trip reports nothing.** Its checks are those of a later trip (see
  :mod:`.staged`) on a state this path requires before the loop: no shared buffer
  holds a copy tag or a race-shadow entry (so a whole-buffer write tests nothing, and
  barriers have nothing to complete or clear), one tile per group (or fast mode),
  every program of the launch at once (no compacted context), and no copy group is
  open (so the trip closes the same number of copy groups as a later trip). A staged
  buffer may still be uninitialised: the whole-buffer write clears that before the
  loads. Whether a view is in bounds depends only on its starts (``k`` or
  loop-invariant), its sizes, the parameter's shape and the launch shape; all of them
  equal those of the remembered launch, whose first trip ran its views step by step
  and whose last trip's views :mod:`.staged` tested, without a report; ``k`` runs
  monotonically between the two, so every trip's views are in bounds. When anything
  differs the general loop runs from the first trip and reports where the definition
  does.
* **The same operands.** The loop's operands and the buffers' contents are chains of
  NumPy views of the staged parameters (:mod:`.staged` checks this, and
  :func:`remember` checks that the views lie in the parameters' buffers). The shape,
  the strides and the byte offset from the parameter's first element of each view
  depend only on the parameters' shapes, strides and dtypes, the starts of the views,
  the loop bounds, the tile and launch shapes and the K columns a deferred
  accumulator holds, never on the data or on where the array lies in memory: NumPy's
  slicing, reshaping and broadcasting are pure functions of those. So when they all
  equal the remembered launch's, the operands are the remembered shapes and strides
  at the remembered offsets in the new arrays, which this path rebuilds (NumPy checks
  each lies inside its array), and the accumulator's counters are the remembered
  ones. View starts computed inside the trip from program coordinates and constants
  alone are the same in every launch of a launch shape (the reason for
  ``coordinate_memo``); the others are compared by value, after the trip's own index
  steps made them when they read values from outside the loop.
* **The same state after the loop.** Every trip changes the launch state as a later
  trip does in :mod:`.staged`; the first also clears the staged buffers' ``init``
  shadows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.fastpaths.pending import PendingMma
from tessera.interp.tile.fastpaths.staged import StagedLoop, _starts

#: a view remembered as (shape, strides, dtype, byte offset in its parameter, writeable)
View = tuple[tuple[int, ...], tuple[int, ...], np.dtype, int, bool]


@register("staged_first_trip", needs=("staged_loop", "deferred_mma"))
def first_proof() -> None:
    """Proof: the module docstring of :mod:`tessera.interp.tile.fastpaths.first` (the
    first trip reports nothing on the state required before the loop; its operands
    are the remembered views, which depend only on the shapes, strides, dtypes and
    starts compared; the state after the loop counts it like a later trip).
    Consulted by ``deferred_mma`` before a staged K loop's first trip."""


def _key(run: StagedLoop, fr: Any, trips: range, moves: list[Any]) -> tuple[Any, ...] | None:
    """What the loop's views depend on besides the view starts read from outside the
    trip's own index arithmetic (compared apart, by value), or None when a parameter's
    view starts vary by program."""
    geom, regs = fr.st.geom, fr.regs
    key: list[Any] = [geom.batch, geom.grid, geom.group_size, fr.st.checked,
                      fr.st.vectorized, trips.start, trips.step, len(trips), PendingMma.MAX_K]
    for s, (src, buf, _) in zip(run.stages, moves):
        parent = regs[s.parent]
        starts = parent.starts
        if any(type(x) is not int for x in starts):
            if any(np.ndim(x) for x in starts):
                return None
            starts = tuple(int(x) for x in starts)
        array = src.array
        key += [array.shape, array.strides, array.dtype, array.flags.writeable, buf.shape,
                buf.np_dtype, buf.data.ng, starts, parent.sizes]
    return tuple(key)


def _same(x: Any, y: Any) -> bool:
    if x is y:
        return True
    if np.ndim(x) == 0 and np.ndim(y) == 0:
        return type(x) is type(y) and bool(x == y)
    return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype \
        and x.shape == y.shape and x.strides == y.strides and bool(np.array_equal(x, y))


def _owners(run: StagedLoop, moves: list[Any]) -> list[np.ndarray]:
    return [moves[run.ia][0].array, moves[run.ib][0].array,
            *(src.array for src, _, _ in moves)]


def remember(run: StagedLoop, fr: Any, trips: range, moves: list[Any],
             pending: PendingMma) -> None:
    """After a loop whose first trip ran step by step and whose other trips were
    derived as one view per operand: keep those operands and the buffers' last tiles,
    as offsets into the parameters, for the next launch."""
    if not fr.ctx.whole or len(pending.a) != 1:
        return
    key = _key(run, fr, trips, moves)
    if key is None:
        return
    views = [pending.a[0], pending.b[0], *(buf.data.arr for _, buf, _ in moves)]
    starts = _starts(views, _owners(run, moves))
    if starts is None:
        return
    kept: list[View] = [(x.shape, x.strides, x.dtype, at, bool(x.flags.writeable))
                        for x, at in zip(views, starts)]
    run.first = (key, [fr.regs[slot] for slot in run.invariants], kept,
                 (pending.k, pending.width, pending.trips))


def _view(array: np.ndarray, view: View) -> np.ndarray:
    shape, strides, dtype, at, writeable = view
    out = np.ndarray(shape, dtype, array, at, strides)
    if not writeable:
        out.flags.writeable = False
    return out


def first_trip(run: Any, fr: Any, trips: range, carried: list[Any]) -> bool:
    """Run every trip of the staged K loop ``run`` (a :class:`StagedLoop`) when the
    launch before remembered trips that this one repeats; True when done, False with
    nothing changed but the index registers of the trip (the general loop goes on)."""
    if type(run) is not StagedLoop or run.first is None or not fr.ctx.whole:
        return False
    pending = carried[0]
    st, regs = fr.st, fr.regs
    if type(pending) is not PendingMma or pending.a or \
            (st.copies and st.open_used.any()):
        return False
    for step in run.pure:  # index arithmetic on values from outside the loop
        step(fr)
    moves = run.moves(fr, trips, fresh=True)
    if moves is None:
        return False
    key, invariants, kept, counts = run.first
    if _key(run, fr, trips, moves) != key or \
            not all(_same(regs[slot], y) for slot, y in zip(run.invariants, invariants)):
        return False
    try:
        a, b, *storage = [_view(o, v) for o, v in zip(_owners(run, moves), kept)]
    except (ValueError, TypeError):
        return False
    # what the first trip's mma step and the derived trips give the accumulator
    pending.a, pending.b = [a], [b]
    pending.k, pending.width, pending.trips = counts
    run.finish(fr, trips, moves, storage, len(trips))
    REGISTRY["staged_first_trip"].taken += 1
    return True


__all__ = ["first_proof", "first_trip", "remember"]
