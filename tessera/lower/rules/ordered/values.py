"""Integer values of a lowered kernel evaluated for every CTA (or thread) of its
launch, while compiling.

A tile's window into global memory (``C[tile_m:tile_m + BM, tile_n:tile_n + BN]``)
is address arithmetic on ``%ctaid``, the launch's sizes, constants and kernel
parameters. Evaluating it for each CTA tells which CTAs write the same window (the
ordered tensor updates of :mod:`tessera.lower.rules.ordered.windows`); evaluating a
scalar update's address for each thread tells which threads meet at an element
(:mod:`tessera.lower.rules.ordered.scalar`). The evaluation is
:class:`~tessera.ir.dialects.target.evaluate.IndexValues` at the launch's points.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tessera.ir.core import Value
from tessera.ir.dialects.target.evaluate import IndexValues

#: threads evaluated together by :func:`thread_values`
CHUNK = 1 << 18


def launch_values(ctas: int, batch: int, block: int, params: list[Value],
                  threads: bool = False, span: range | None = None) -> IndexValues:
    """An evaluator at each CTA of a grid of ``ctas x batch`` (``%ctaid.x``,
    ``%ctaid.y``) of ``block`` threads, or with ``threads`` at each thread (``%tid.x``
    too), in linear order, over ``span`` of them (default all); each kernel parameter
    in ``params`` is a distinct symbolic base far from the others."""
    per = block if threads else 1
    span = range(ctas * batch * per) if span is None else span
    linear = np.arange(span.start, span.stop, dtype=np.int64)
    cta = linear // per
    whole = {"nctaid.x": ctas, "nctaid.y": batch, "nctaid.z": 1, "ntid.x": block,
             "ntid.y": 1, "ntid.z": 1, "ctaid.z": 0, "tid.y": 0, "tid.z": 0}
    sregs = {"ctaid.x": cta % ctas, "ctaid.y": cta // ctas,
             **{name: np.full_like(linear, v) for name, v in whole.items()}}
    if threads:
        sregs["tid.x"] = linear % per
    return IndexValues(sregs, len(linear), {id(p): (k + 1) << 44 for k, p in enumerate(params)})


def _chunks(ctas: int, batch: int, block: int, params: list[Value], v: Value,
            chunk: int) -> Iterator[np.ndarray | None]:
    """``v`` in the launch's threads, ``chunk`` threads at a time (None for a chunk
    where it is not known)."""
    n = ctas * batch * block
    for start in range(0, n, chunk):
        yield launch_values(ctas, batch, block, params, True,
                            range(start, min(n, start + chunk)))(v)


def thread_values(ctas: int, batch: int, block: int, params: list[Value], v: Value,
                  chunk: int = CHUNK) -> np.ndarray | None:
    """``v`` in every thread of the launch, evaluated :data:`CHUNK` threads at a time
    (a launch of millions of threads would otherwise hold an array of that length for
    every value of the expression at once)."""
    parts = []
    for part in _chunks(ctas, batch, block, params, v, chunk):
        if part is None:
            return None
        parts.append(part)
    return np.concatenate(parts)


def monotonic(ctas: int, batch: int, block: int, params: list[Value], v: Value,
              chunk: int = CHUNK) -> bool:
    """Whether ``v`` strictly increases, or strictly decreases, from thread to thread of
    the launch (so no two threads share a value), checked :data:`CHUNK` threads at a
    time without keeping the values: ``out[i]`` or ``out[N - 1 - i]`` of any launch."""
    last, up, down = None, True, True
    for part in _chunks(ctas, batch, block, params, v, chunk):
        if part is None:
            return False
        steps = np.diff(part if last is None else np.concatenate([[last], part]))
        up, down = up and bool(np.all(steps > 0)), down and bool(np.all(steps < 0))
        if not (up or down):
            return False
        last = part[-1]
    return True


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending (by a sort: ``np.unique``
    took 4 s for 2^22 values where the sort takes a quarter of a second)."""
    ordered = np.sort(values, kind="stable")
    keep = np.ones(len(ordered), bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


__all__ = ["CHUNK", "distinct", "launch_values", "monotonic", "thread_values"]
