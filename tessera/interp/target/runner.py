"""The Target IR interpreter: what a ``ptx.kernel`` means, bit for bit.

``run_target(fn, args)`` launches a kernel on NumPy arrays, which it updates in place.
Every thread of every CTA runs in lockstep on vectorised registers (see
:mod:`tessera.interp.target.state`); the instruction rules are in ``regs``
(register arithmetic), ``flow`` (masks, loops, barriers, shuffles),
``memory.steps`` (loads, stores, atomics), ``memory.async_copy`` (cp.async, TMA, mbarrier),
``mma`` (ldmatrix, mma.sync, wgmma) and ``warp`` (setmaxnreg, elect.sync). Results
agree bit for bit with the Tile IR interpreter under its exact-accumulation convention.

Like compute-sanitizer, the interpreter stops at the first kernel bug with a
:class:`~tessera.interp.target.state.TargetFault` (an ``InterpretError``) naming the
instruction, its source line and the thread: out-of-bounds or misaligned accesses,
divergent barriers and warp instructions, uninitialised or racing shared memory, reads
of async-copy destinations before their wait, and mbarrier phases that never complete.

A warp-specialised kernel's concurrent branches run as tasks
(:mod:`tessera.interp.target.schedule`) whose threads of every CTA still run in
lockstep; where that hangs (a CTA's loop ending before another's, say, and its release
after the loop awaited in the other's), the launch runs again from its arguments with
independent CTAs, as a GPU runs them (``run_target``'s ``ctas``).

Arguments, one per kernel parameter: a NumPy array for a ``reg<u64>`` pointer (it is
placed at a fake 256-byte aligned global address), a Python or NumPy scalar for a
scalar register (integers may also be raw addresses), and a :class:`TensorMapArg` for a
``tmap<...>`` parameter.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.ma  # np.unique imports it on its first call: here, not inside a launch

from tessera.arch.limits import SHARED_BASE, place_shared
from tessera.arch.tma import TensorMap, row_major_2d, tma_data_type
from tessera.errors import ArgumentError, user_api
from tessera.interp.target import barriers as target_barriers
from tessera.interp.target import convert as target_convert
from tessera.interp.target import flow as target_flow
from tessera.interp.target import regs as target_regs
from tessera.interp.target import tables as target_tables
from tessera.interp.target import warp as target_warp
from tessera.interp.target.cluster import rules as target_cluster_rules
from tessera.interp.target.cluster.geometry import kernel_clusters
from tessera.interp.target.memory import async_copy as target_async
from tessera.interp.target.memory import bulk_store as target_bulk_store
from tessera.interp.target.memory import reads as target_reads
from tessera.interp.target.memory import steps as target_mem
from tessera.interp.target.memory.async_copy import TmaValue
from tessera.interp.target.memory.state import GlobalMemory, SharedMemory
from tessera.interp.target.ptx import heap as target_ptx_heap
from tessera.interp.target.ptx import memory as target_ptx_memory
from tessera.interp.target.ptx import printf as target_ptx_printf
from tessera.interp.target.ptx import rules as target_ptx_rules
from tessera.interp.target.ptx import texture as target_ptx_texture
from tessera.interp.target.ptx import wmma as target_ptx_wmma
from tessera.interp.target.state import (
    DTYPES,
    Machine,
    RegisterFile,
    TargetCompiler,
    TargetFault,
    TargetFrame,
    run,
    tensor_core_model,
)
from tessera.interp.target.tensorcore import mma as target_mma
from tessera.interp.target.tensorcore import wgmma_rs as target_wgmma_rs
from tessera.ir.core import Function, walk
from tessera.ir.dialects.target import KERNEL, RegType, TensorMapType
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.async_ops import MbarrierWait
from tessera.ir.dialects.target.check import check_kernel
from tessera.progress import progress

# importing the rule modules registers their steps (and SharedMemory's read log, which
# it imports late, loads with them rather than inside the first launch)
_ = (target_async, target_barriers, target_bulk_store, target_cluster_rules, target_convert,
     target_flow, target_mem, target_mma, target_ptx_heap, target_ptx_memory, target_ptx_rules,
     target_ptx_texture, target_ptx_wmma, target_reads, target_regs, target_tables, target_warp,
     target_wgmma_rs)

#: how the CTAs of a launch run the concurrent arms of a ``ptx.if`` (see ``run_target``)
CTA_MODES = ("auto", "lockstep", "independent")

#: kernels whose lockstep launch hung: their later launches run independent CTAs at once
_INDEPENDENT: weakref.WeakSet[Function] = weakref.WeakSet()


class _LockstepHang(Exception):
    """A launch in lockstep hung in its concurrent tasks (``fault`` says where)."""

    def __init__(self, fault: TargetFault) -> None:
        super().__init__(str(fault))
        self.fault = fault


@dataclass(frozen=True, eq=False)
class TensorMapArg:
    """The argument of a ``tmap<...>`` parameter: a 2-D global ``array`` of ``elem``
    (a PTX type name, e.g. ``"bf16"``, or ``"e4m3"``/``"e5m2"``; arrays of the same
    element size holding bit patterns are accepted), copied in ``box`` = (rows, cols) tiles with
    ``swizzle`` bytes (0, 32, 64, 128). It must match the parameter's type."""

    array: np.ndarray
    elem: str
    box: tuple[int, int]
    swizzle: int = 0

    def tensor_map(self, address: int) -> TensorMap:
        """The tensor map of ``array`` placed at global ``address`` (not yet checked)."""
        return row_major_2d(self.elem, address, self.array.shape, self.box, self.swizzle)


def _geometry(value: Any, default: Any, what: str) -> tuple[int, int, int]:
    given = value if value is not None else default or [1]
    dims = [given] if isinstance(given, (int, np.integer)) else list(given)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ArgumentError(f"bad {what} {value!r}", hint=f"give 1 to 3 positive {what} sizes")
    dims = [int(d) for d in dims] + [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _shared_layout(fn: Function) -> tuple[dict[str, int], int]:
    """Shared addresses of the kernel's ``.shared`` buffers, in program order from
    :data:`~tessera.arch.limits.SHARED_BASE` (the end of the kilobyte reserved for
    system use), and the bytes they take: exactly where a kernel with dynamic shared
    memory has them (its ``.extern .shared`` array is aligned for its most aligned
    buffer), and a model of where ptxas places static buffers, aligned as declared."""
    offsets, size = place_shared((i.op.sym, i.op.size, i.op.align) for i in walk(fn.body)
                                 if isinstance(i.op, target_ops.SharedAlloc))
    return {sym: SHARED_BASE + off for sym, off in offsets.items()}, size


def _tensor_map(arg: TensorMapArg, t: TensorMapType, base: int, k: int) -> TensorMap:
    if not isinstance(arg, TensorMapArg):
        raise ArgumentError(f"argument {k} is a tensor map parameter ({t}); pass a "
                            f"TensorMapArg, not {type(arg).__name__}")
    a = arg.array
    if (arg.elem, tuple(arg.box), arg.swizzle) != (t.elem, t.box, t.swizzle):
        raise ArgumentError(f"argument {k}: TensorMapArg({arg.elem}, box {tuple(arg.box)}, "
                            f"sw{arg.swizzle}) does not match the parameter type {t}")
    elem_size = tma_data_type(t.elem, f"argument {k}").size
    if a.ndim != 2 or a.dtype.itemsize != elem_size:
        raise ArgumentError(f"argument {k}: a tensor map needs a 2-D array of {t.elem}, got "
                            f"{a.dtype} of shape {a.shape}")
    # cuTensorMapEncodeTiled runs on the host: its rules are checked at launch
    return arg.tensor_map(base).validate()


def _bind(fn: Function, args: Sequence[Any], glob: GlobalMemory, n: int) -> list[Any]:
    """Register values of the kernel parameters; arrays are placed in global memory."""
    params = fn.args
    if len(args) != len(params):
        raise ArgumentError(f"kernel '{fn.name}' takes {len(params)} arguments, got "
                            f"{len(args)}")
    placed: dict[int, int] = {}

    def place(a: np.ndarray, k: int) -> int:
        if id(a) not in placed:
            placed[id(a)] = glob.add(a, f"argument {k} ({a.dtype}{list(a.shape)})")
        return placed[id(a)]

    values: list[Any] = []
    for k, (p, a) in enumerate(zip(params, args)):
        t = p.type
        if isinstance(t, TensorMapType):
            arr = a.array if isinstance(a, TensorMapArg) else None
            base = place(arr, k) if arr is not None else 0
            tmap = _tensor_map(a, t, base, k)
            values.append(TmaValue(tmap, glob.bytes[glob.bases.index(base)]))
        elif isinstance(t, RegType) and t.count == 1:
            if isinstance(a, np.ndarray) and a.ndim > 0:
                if t.elem not in ("u64", "b64", "s64"):
                    raise ArgumentError(f"argument {k}: an array needs a reg<u64> pointer "
                                        f"parameter, not {t}")
                values.append(np.full(n, place(a, k), DTYPES[t.elem]))
            elif t.elem == "pred":
                values.append(np.full(n, bool(a)))
            else:
                values.append(target_regs.const_array(a, t.elem, n))
        else:
            raise ArgumentError(f"kernel parameter {k} of type {t} is not supported")
    return values


@user_api
def run_target(fn: Function, args: Sequence[Any], *, grid: Sequence[int] | None = None,
               block: Sequence[int] | None = None, check_races: bool = True,
               tensor_cores: str = "exact", cta_order: str = "ascending",
               ctas: str = "auto", cluster: Sequence[int] | None = None) -> None:
    """Run the ``ptx.kernel`` ``fn`` over ``grid`` x ``block`` threads (default: the
    kernel's ``grid`` and ``block`` attributes); array arguments are updated in place.

    Raises :class:`TargetFault` (an ``InterpretError``) at the first kernel bug,
    ``IRVerifyError`` before the launch where a ``wgmma`` result is read before its
    group is retired, and ``ArgumentError`` for arguments that do not fit the
    parameters. ``check_races``
    turns the shared-memory race check off (it costs about a third of the run time).
    ``tensor_cores`` picks the accumulation of ``mma.sync``/``wgmma``: ``"exact"`` (the
    definition) or ``"hopper"`` (an H100/H200's own bits, :mod:`tessera.arch.mma_hopper`).
    ``cta_order`` is the order in which the atomics (``atom``, ``red``) of different
    threads land: ``"ascending"`` CTA index, then thread index, or ``"descending"``, all
    of it reversed, another order a GPU may take (a kernel whose result must not depend
    on it can be run both ways).
    ``ctas`` picks how the arms of a ``ptx.if`` that wait for each other run (a
    warp-specialised kernel's producer and consumers): ``"lockstep"``, every CTA's
    threads of an arm together, one task an arm; ``"independent"``, one task per
    warpgroup of each CTA (started in ``cta_order``), as a GPU runs them; ``"auto"``
    (the default), lockstep, and where that hangs, the launch again from its arguments
    with independent CTAs (a hang there is the kernel's). ``cluster`` (x, y, z) runs
    the CTAs in thread block clusters of that shape (sm_90 on).
    """
    if cta_order not in ("ascending", "descending"):
        raise ArgumentError(f"unknown cta_order {cta_order!r}",
                            hint="use 'ascending' or 'descending'")
    if ctas not in CTA_MODES:
        raise ArgumentError(f"unknown ctas {ctas!r}", hint=f"use one of {CTA_MODES}")
    if fn.kind != KERNEL:
        raise ArgumentError(f"run_target runs {KERNEL} functions, not {fn.kind} '{fn.name}'")
    g = _geometry(grid, fn.attrs.get("grid"), "grid")
    b = _geometry(block, fn.attrs.get("block"), "block")
    # a wgmma result read before its wait: no run shows it (each wgmma is computed at
    # once, and ptxas would insert the wait), so it is found on the IR first
    check_kernel(fn, reads_only=True)
    layout, size = _shared_layout(fn)
    arrays = [a.array if isinstance(a, TensorMapArg) else a for a in args]
    work = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in arrays]
    for a in arrays:
        if isinstance(a, np.ndarray) and not a.flags.writeable:
            raise ArgumentError("array arguments must be writeable (the kernel may store)")
    swapped = [TensorMapArg(w, a.elem, a.box, a.swizzle) if isinstance(a, TensorMapArg)
               else w for a, w in zip(args, work)]
    # A launch makes few reference cycles but many objects: the cyclic collector's
    # passes over every object of the process would interrupt it for nothing.
    collecting = gc.isenabled()
    gc.disable()
    independent = ctas == "independent" or (ctas == "auto" and fn in _INDEPENDENT)
    # a lockstep hang is run again from the arguments: keep them (where tasks may wait)
    kept = [(w, w.copy()) for w in {id(w): w for w in work if isinstance(w, np.ndarray)}
            .values()] if ctas == "auto" and not independent and _may_wait(fn) else None
    try:
        try:
            _launch(fn, g, b, layout, size, swapped, check_races, tensor_cores, cta_order,
                    cluster, independent)
        except _LockstepHang as hang:
            if kept is None:  # "lockstep": the hang is the answer
                raise hang.fault from None
            for w, was in kept:
                w[...] = was
            _INDEPENDENT.add(fn)
            _launch(fn, g, b, layout, size, swapped, check_races, tensor_cores, cta_order,
                    cluster, True)
    finally:
        if collecting:
            gc.enable()
    for a, w in zip(arrays, work):
        if isinstance(a, np.ndarray) and w is not a:
            a[...] = w  # non-contiguous arguments ran on a copy


def _may_wait(fn: Function) -> bool:
    """Whether ``fn`` has an instruction that makes a ``ptx.if``'s arms tasks
    (:mod:`tessera.interp.target.flow`): an mbarrier wait or a named barrier."""
    return any(isinstance(i.op, (MbarrierWait, target_ops.BarArrive))
               or (isinstance(i.op, target_ops.Bar) and i.op.count) for i in walk(fn.body))


def _launch(fn: Function, g: tuple[int, int, int], b: tuple[int, int, int],
            layout: dict[str, int], size: int, swapped: list[Any], check_races: bool,
            tensor_cores: str, cta_order: str, cluster: Sequence[int] | None,
            independent: bool) -> None:
    """Place the arguments, compile the kernel and run it; a hang of tasks that ran
    CTAs in lockstep raises :class:`_LockstepHang`."""
    glob = GlobalMemory()
    nthreads = b[0] * b[1] * b[2]
    ncta = g[0] * g[1] * g[2]
    m = Machine(fn, g, b, glob, SharedMemory(ncta, nthreads, size, check_races))
    kernel_clusters(m, str(fn.attrs.get("target", "sm_90a")), {},
                    None if cluster is None else _geometry(cluster, None, "cluster"))
    m.tensor_cores = tensor_core_model(tensor_cores)
    m.shared_layout = layout
    m.cta_order = cta_order
    m.independent = independent
    values = _bind(fn, swapped, glob, m.n)
    target_tables.place_module_vars(m, fn)  # after the arguments, which keep their places
    comp = TargetCompiler(m)
    body = comp.body(fn.body)
    regs = RegisterFile([None] * len(comp.slots))
    for slot, v in zip(body.args, values):
        regs[slot] = v
    with np.errstate(all="ignore"), progress(f"Target IR @{fn.name}", unit="step") as bar:
        m.bar = bar  # counts the instructions run (every thread at once)
        try:
            run(body.steps, TargetFrame(regs, np.ones(m.n, bool), m))
            late = target_cluster_rules.check_exits(m)
            if late is not None:
                raise late[1]
        except TargetFault as err:
            if m.tasks_hung and not independent:
                m.printed.clear()  # the launch runs again, its tasks independent
                raise _LockstepHang(err) from err
            raise
        finally:
            target_ptx_printf.flush(m)
    target_bulk_store.check_drained(m)  # every CTA has exited
    target_tables.check_module_vars(m)


__all__ = ["CTA_MODES", "TargetFault", "TensorMapArg", "run_target"]
