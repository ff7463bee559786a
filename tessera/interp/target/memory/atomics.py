"""The one definition of an atomic update, shared by ``red`` and ``atom`` (PTX ISA,
sections "atom" and "red").

Updates apply one at a time in the order the threads' atomics land (:func:`arrival`):
CTA by CTA, each CTA's threads in linear order, or all of it reversed under
``run_target(..., cta_order="descending")``. What each update computes:

* ``add.f32`` rounds to nearest even and flushes subnormal inputs and results to
  sign-preserving zero, as both sections specify; ``add.f64`` and ``add.noftz`` of f16,
  bf16 and their packed pairs (each half on its own) keep subnormals. A NaN sum has the
  canonical NaN's bits, as ``add`` does.
* ``min``/``max`` (integers only: the ISA has no f32/f64 form), ``and``/``or``/``xor``,
  ``exch``, ``cas`` (store ``b`` where the old value equals ``cmp``), ``inc``
  (``old >= b ? 0 : old + 1``) and ``dec`` (``old == 0 || old > b ? b : old - 1``).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.interp.target import numeric as tn
from tessera.interp.target.memory.codes import unordered
from tessera.interp.target.regs import PACKED
from tessera.interp.target.state import DTYPES

F32 = np.dtype(np.float32)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_BINARY = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor}


def arrival(m: Any, act: np.ndarray) -> np.ndarray:
    """The active threads ``act`` (ascending) in the order their atomics land: CTA by
    CTA, each CTA's threads in linear order, or all of it reversed under the launch's
    ``cta_order="descending"``. A GPU lands one instruction's atomics of the lanes of a
    warp, the warps of a CTA and the CTAs of a launch in arrival order alike, so the
    reverse is another order it may take at every level."""
    return act if m.cta_order == "ascending" else act[::-1]


def updated(op: str, dt: np.dtype, old: np.ndarray, b: np.ndarray,
            cmp: np.ndarray | None = None) -> np.ndarray:
    """The value an atomic ``op`` of operand ``b`` (and ``cmp`` for ``cas``) leaves in
    place of ``old``, elementwise."""
    if op == "exch":
        return b
    if op == "cas":
        return np.where(old == cmp, b, old)
    if op == "inc":
        return np.where(old >= b, 0, old + 1).astype(dt)
    if op == "dec":
        return np.where((old == 0) | (old > b), b, old - 1).astype(dt)
    if dt == F32 and op == "add":
        flush = tn.flush_subnormals
        return tn.canonical_nans(flush(np.add(flush(old, "f32"), flush(b, "f32")), "f32"))
    if dt.kind == "f" or dt == _BF16:  # f16 and bf16 sums round once from f32's
        return tn.canonical_nans(_BINARY[op](old, b).astype(dt))
    return _BINARY[op](old, b).astype(dt)


def apply_in_order(target: np.ndarray, index: np.ndarray, op: str, b: np.ndarray,
                   cmp: np.ndarray | None = None, elem: str = "") -> np.ndarray:
    """Apply update k, ``target[index[k]] = op(target[index[k]], b[k])``, for k in order;
    the old value each update saw. A packed ``elem`` (``f16x2``, ``bf16x2``: ``target``
    and ``b`` hold their 32-bit words) adds each half on its own, as two updates of the
    16-bit halves."""
    if elem in PACKED:  # two halves, little-endian: the first is the low one
        half = DTYPES[PACKED[elem]]
        pairs = np.stack([2 * index, 2 * index + 1], axis=1).ravel()
        return apply_in_order(target.view(half), pairs, op, b.view(half)).view(target.dtype)
    dt = target.dtype
    order = np.argsort(index, kind="stable")
    idx = index[order]
    # np.r_ and np.diff cost more than the updates of a few threads: plain concatenation
    cut = np.flatnonzero(idx[1:] != idx[:-1]) + 1
    start = np.concatenate(([0], cut))
    sizes = np.append(cut, len(idx)) - start
    if dt.kind in "iu" and op in _BINARY and len(idx) and \
            (op in _INVERSE or len(start) <= sizes.max()):  # integers: running values
        return _running(target, idx, order, start, sizes, op, b.astype(dt))
    rank = np.arange(len(idx)) - np.repeat(start, sizes)
    olds = np.empty(len(idx), dt)
    with np.errstate(all="ignore"):
        for r in range(int(rank.max()) + 1 if len(idx) else 0):
            sel = order[rank == r]  # the r-th update of every address: distinct addresses
            old = target[index[sel]].copy()
            olds[sel] = old
            target[index[sel]] = updated(op, dt, old, b[sel], None if cmp is None else cmp[sel])
    return olds


#: the integer updates with an inverse: a running total over all updates minus (xor)
#: the total before an address's first update is that address's own
_INVERSE = {"add": np.subtract, "xor": np.bitwise_xor}


def _running(target: np.ndarray, idx: np.ndarray, order: np.ndarray, start: np.ndarray,
             sizes: np.ndarray, op: str, b: np.ndarray) -> np.ndarray:
    """:func:`apply_in_order` of an integer ``add``, ``min``, ``max``, ``and``, ``or``
    or ``xor``: the value after each update is the running reduction of the address's
    old value and its updates so far (``order`` sorts the updates by address, ``idx``,
    into runs from ``start`` of ``sizes``), computed at once (an op with an inverse) or
    an address at a time, instead of an update of every address at a time."""
    apply = _BINARY[op]
    vals = b[order]
    first = target[idx[start]]
    olds = np.empty_like(vals)
    with np.errstate(all="ignore"):  # sums wrap, as the hardware's do
        if op in _INVERSE:
            undo = _INVERSE[op]
            total = apply.accumulate(vals, dtype=vals.dtype)
            before = np.concatenate((np.zeros(1, vals.dtype), total[start[1:] - 1]))
            own = undo(total, np.repeat(before, sizes))  # each address's running total
            olds[order] = apply(np.repeat(first, sizes), undo(own, vals))
            after = apply(first, own[start + sizes - 1])
        else:
            after = np.empty_like(first)
            for k, (s0, n) in enumerate(zip(start.tolist(), sizes.tolist())):
                run = apply.accumulate(np.concatenate((first[k:k + 1], vals[s0:s0 + n])))
                olds[order[s0:s0 + n]] = run[:-1]
                after[k] = run[-1]
    target[idx[start]] = after
    return olds


def check_shared(sh: Any, flat: np.ndarray, me: np.ndarray, fail: Any) -> None:
    """:meth:`~tessera.interp.target.memory.state.SharedMemory.atomic` of threads ``me``
    (ascending) on the bytes ``flat`` (M, nbytes), an address at a time where several
    threads update one address (a block's partial sums into one accumulator): some
    thread of an address races with a plain record exactly when the record is not of
    its one thread alone. Where any might, the per-thread path runs and reports; else
    the records are those it would leave (the last thread of each address as its
    writer, the bounds of every thread)."""
    if not sh.races or sh.clustered is not None or len(me) < 2 or me[0] > me[-1]:
        sh.atomic(flat, me, fail)  # (threads in descending order: cta_order="descending")
        return
    keys = flat[:, 0]
    if keys[0] == keys[-1] and (keys == keys[0]).all():  # one address: its first and last
        first, last = np.zeros(1, np.int64), np.full(1, len(me) - 1)
    else:
        order = np.argsort(keys, kind="stable")  # threads stay ascending per address
        keys = keys[order]
        cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        if len(cut) + 1 == len(me):  # an address per thread: nothing to share
            sh.atomic(flat, me, fail)
            return
        first, last = order[np.concatenate(([0], cut))], order[np.append(cut, len(me)) - 1]
    lo, hi = me[first], me[last]
    if _may_race(sh, flat[last], lo, hi):
        sh.atomic(flat, me, fail)
        return
    sh.check_read(flat, me, fail, race=False)
    sh.set_writer(flat[last], hi, atomic=True, first=lo)



def _may_race(sh: Any, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether an atomic of threads ``lo[i]`` to ``hi[i]`` (some of them) on the bytes
    ``rows[i]`` may meet a plain writer or reader record that is not of its one
    thread."""
    ctas = lo // sh.nthreads
    if not sh.accessed[ctas].any():
        return False
    w = sh.writer_code[rows]
    if (w > 0).any() and unordered(w, lo, hi, atomic=True).any():  # a store's record
        return True
    if not sh.has_readers[ctas].any():
        return False
    rmin, rmax = sh.readers()
    return bool(unordered(w, lo, hi, (rmin[rows], rmax[rows]), atomic=True).any())


__all__ = ["apply_in_order", "arrival", "check_shared", "updated"]
