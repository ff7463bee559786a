"""Tensor-core accumulators between the steps of a chain: matrices, not registers.

A ``wgmma`` (``mma.sync``) computes its warpgroups' (warps') float64 D matrices; in
registers they are the fragment layouts of PTX ISA sec. 9.7.15.5.1 (9.7.14.5), one
row per thread. A chain of them (one K step after another) reads each D only as the
next step's C, so the register file
(:class:`~tessera.interp.target.state.RegisterFile`) holds a
:class:`~tessera.interp.target.state.Lazy` value that keeps the matrices
(:class:`ChainResult`): the next step takes them, and the scatter into registers runs
only when another instruction reads the register. A plain register list (the
PTX-level runner) gets the registers at once, and the matrices are remembered by the
register array's identity (:func:`remember`).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from tessera.arch.fragments import wgmma_accumulator
from tessera.interp.target.state import (
    F32,
    F64,
    Lazy,
    Machine,
    RegisterFile,
    TargetFrame,
    Widened,
)
from tessera.interp.target.tensorcore import model as tensor_core
from tessera.interp.target.tensorcore.fragment_maps import FragmentMap


@cache
def fragment_map(n: int) -> FragmentMap:
    """The map of a ``wgmma`` accumulator of ``n`` columns (made once per ``n``: a
    kernel holds many such instructions; maps are never changed)."""
    return FragmentMap(wgmma_accumulator(n))


class ChainResult:
    """What a lazy ``wgmma`` or ``mma.sync`` result keeps: its fragment ``layout``, its
    thread groups, their (G, rows, cols) accumulator matrices as the registers hold
    them, and whether those are known to hold no ``-0`` (under ``"exact"``, a D whose
    C held none: a float64 sum is ``-0`` only when both terms are)."""

    __slots__ = ("groups", "layout", "matrices", "unsigned_zeros")

    def __init__(self, layout: FragmentMap, groups: np.ndarray, matrices: np.ndarray,
                 unsigned_zeros: bool) -> None:
        self.layout = layout
        self.groups = groups
        self.matrices = matrices
        self.unsigned_zeros = unsigned_zeros


def matrices(m: Machine, regs: np.ndarray | Lazy, groups: np.ndarray,
             layout: FragmentMap) -> tuple[np.ndarray, bool]:
    """The accumulator matrices of ``groups`` held in ``regs`` in fragment ``layout``:
    those an instruction of the same layout and groups made (a lazy result, or the
    matrices a recent one scattered into exactly this register array), else gathered;
    and whether they are known to hold no ``-0`` (:attr:`ChainResult.unsigned_zeros`)."""
    if type(regs) is Lazy:
        keep = regs.keep
        if isinstance(keep, ChainResult) and keep.layout is layout and \
                np.array_equal(keep.groups, groups):
            return keep.matrices, keep.unsigned_zeros
        if isinstance(regs.keep, Widened):  # widening is exact: gather the narrow values
            return layout.matrix(regs.keep.narrow, groups).astype(F64), False
        regs = regs.get()
    hit = getattr(m, "wgmma_results", {}).get(id(regs))
    if hit is not None and hit[0] is regs and hit[3] is layout and \
            np.array_equal(hit[1], groups):
        return hit[2], False
    return layout.matrix(regs.astype(F64, copy=False), groups), False


def result(fr: TargetFrame, layout: FragmentMap, d: np.ndarray, groups: np.ndarray,
           unsigned_zeros: bool) -> np.ndarray | Lazy:
    """The D register value of an instruction of thread ``groups`` whose float64
    matrices are ``d``: lazy in a :class:`RegisterFile`, else scattered now."""
    m = fr.m
    # the matrices as the registers hold them (rounded to f32 under "hopper")
    held = tensor_core.result(m, d).astype(F64, copy=False)
    if isinstance(fr.regs, RegisterFile):
        return Lazy(lambda: scatter(m, layout, d, groups),
                    F32 if m.tensor_cores == "hopper" else F64,
                    ChainResult(layout, groups, held, unsigned_zeros))
    regs = scatter(m, layout, d, groups)
    remember(m, regs, groups, held, layout)
    return regs


def scatter(m: Machine, layout: FragmentMap, d: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The D registers of an instruction of thread ``groups`` (zero in the other
    threads) from its float64 matrices ``d``, under the launch's tensor-core model."""
    regs = zeros_but(m.n, layout.layout.elements, groups, layout.layout.threads)
    layout.scatter(d, regs, groups)
    return tensor_core.result(m, regs)


def remember(m: Machine, regs: np.ndarray, groups: np.ndarray, d: np.ndarray,
             layout: FragmentMap) -> None:
    """Keep ``d``, the matrices scattered into the new register array ``regs`` (never
    changed in place: every step makes new arrays), for the next instruction of its
    chain; the last few results are kept."""
    kept: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, FragmentMap]] = \
        m.__dict__.setdefault("wgmma_results", {})
    kept[id(regs)] = (regs, groups, d, layout)
    while len(kept) > 4:
        kept.pop(next(iter(kept)))


def zeros_but(n: int, width: int, groups: np.ndarray, size: int) -> np.ndarray:
    """An (n, width) float64 register array that is 0 outside the thread groups
    ``groups`` of ``size`` threads (which the caller fills): no pass over the bytes a
    scatter writes anyway."""
    regs = np.empty((n, width), F64)
    outside = np.ones(n // size, bool)
    outside[groups] = False
    if outside.all():
        regs.fill(0.0)
    elif outside.any():
        regs.reshape(-1, size * width)[outside] = 0.0
    return regs


__all__ = ["ChainResult", "fragment_map", "matrices", "remember", "result", "scatter",
           "zeros_but"]
