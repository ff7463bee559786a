"""``ts.index_launch(axis=...)(fn)(*args)``: one call of ``fn`` per index along an axis.

Each index ``i`` of the axis gets its *local view* of every DistTensor argument: the
part that the devices at index ``i`` hold along the axis (its shard where the argument
is sharded over the axis, its summand where it is partial, the whole value where it is
replicated), whole along the other mesh axes. NumPy arrays, tessera tensors and other
values are passed to every index as they are. ``fn`` is traced once per index (so
Python control flow and ``dist.axis_index(axis)`` may differ per index) and the bodies
run in lockstep; a collective over ``axis`` inside a body combines the values of all
indices in index order (:mod:`tessera.mesh_sim.spmd.lockstep`).

Each output of ``fn`` becomes a DistTensor on the arguments' mesh: replicated where the
body made it the same on every index (computed only from replicated inputs, or by an
all_reduce, all_gather or broadcast), else sharded over ``axis``, assembled with
``dist.from_shards``. ``out_dims`` says on which dim (an int), or ``"partial"``
(the outputs are summands); by default it is the dim that ``axis`` shards in the first
argument sharded over it (dim 0 if none, or if the ranks differ).

Parameters annotated ``Region[read]``, ``Region[write]`` or ``Region[reduce]``
(:mod:`tessera.mesh_sim.regions`) are enforced, written back in place, and recorded for
dependence analysis (:mod:`tessera.mesh_sim.spmd.depend`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.errors import user_api, user_location
from tessera.frontend.graph.pytree import flatten, unflatten
from tessera.frontend.graph.tensor import Tensor, as_tensor
from tessera.frontend.graph.trace import Trace, Tracer
from tessera.ir.core import Function
from tessera.ir.types import TensorType
from tessera.mesh_sim.collectives import all_gather, all_reduce
from tessera.mesh_sim.construct import from_shards
from tessera.mesh_sim.mesh import Mesh
from tessera.mesh_sim.regions import (
    READ,
    Privilege,
    RegionConflictError,
    RegionError,
    RegionView,
    privileges_of,
)
from tessera.mesh_sim.sharding import ShardSpec
from tessera.mesh_sim.spmd import depend
from tessera.mesh_sim.spmd.args import DistArg, one_mesh
from tessera.mesh_sim.spmd.launch_kernel import LAUNCH_KEYWORDS, is_kernel, run_kernels
from tessera.mesh_sim.spmd.lockstep import INVARIANT, LaunchError, run_lockstep
from tessera.mesh_sim.spmd.lockstep_trace import Lockstep
from tessera.mesh_sim.spmd.writeback import write_back
from tessera.mesh_sim.tensor import PARTIAL, DistTensor

_INDEX: dict[str, int] = {}


@user_api
def axis_index(axis: str) -> int:
    """The index along ``axis`` of the launch body being traced."""
    if not isinstance(axis, str) or axis not in _INDEX:
        raise LaunchError(f"axis_index({axis!r}) outside a launch over {axis!r}",
                          hint=f"call it inside ts.index_launch(axis={axis!r})(fn)")
    return _INDEX[axis]


def local_views(t: DistTensor, axis: str) -> tuple[list[np.ndarray], list[tuple[slice, ...]]]:
    """Each index's local view of ``t`` along ``axis`` and the region it covers."""
    others = [a for a in t.partial_axes if a != axis]
    if others:
        t = all_reduce(t, others)
    sharded = tuple(a for a in t.sharded_axes if a != axis)
    if sharded:
        t = all_gather(t, sharded)
    pos = t.mesh.axis_position(axis)
    keys = [tuple(i if p == pos else 0 for p in range(t.mesh.ndim))
            for i in range(t.mesh.shape[pos])]
    return [t.block(k) for k in keys], [t.region(k) for k in keys]


class IndexLaunch:
    """``fn`` launched once per index along ``axis`` (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], axis: str, out_dims: Any, mode: str) -> None:
        functools.update_wrapper(self, fn)
        self.kernel = fn if is_kernel(fn) else None
        # A @ts.jit function is traced from its Python body; a kernel is launched.
        self.fn = fn if self.kernel is not None else getattr(fn, "fn", fn)
        self.axis, self.out_dims, self.mode = axis, out_dims, mode
        python = self.kernel.fn if self.kernel is not None else self.fn
        self.signature = inspect.signature(python)
        self.privileges = privileges_of(python)

    @user_api
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        loc = user_location()
        launch_kw = {k: kwargs.pop(k) for k in LAUNCH_KEYWORDS if k in kwargs} \
            if self.kernel is not None else {}
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        values = {k: v.dist if isinstance(v, DistArg) else v for k, v in values.items()}
        mesh = one_mesh(values.values())
        if mesh is None:
            raise LaunchError(f"index_launch of {self.fn.__name__} has no DistTensor "
                              "argument to take the mesh from",
                              hint="pass at least one dist.tensor(...)")
        n = mesh.axis_size(self.axis)
        views, accesses = self._views(values, n)
        conflicts = depend.point_conflicts(accesses)
        if conflicts:
            raise _conflict(conflicts[0], loc)
        if self.kernel is not None:
            results = run_kernels(self.kernel, values, views, n, launch_kw, self.axis, mesh,
                                  loc)
            depend.record(self.kernel.name, self.axis, accesses, loc)
            outs = self._assemble(results, [False] * len(results[0]), values, mesh,
                                  [None] * len(results[0]))
            return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)
        traced = Lockstep(n, self.axis).run(
            [functools.partial(self._trace, values, views, i) for i in range(n)])
        fns = [f for f, _ in traced]
        trees = [t for _, t in traced]
        inputs = [[v[i] for v in views.values() if v is not None] for i in range(n)]
        results = run_lockstep(fns, inputs, self.axis, self.mode)
        out_tree, static = trees[0]
        n_out = out_tree.num_leaves - len(static)
        write_back(values, self.privileges, [r[n_out:] for r in results], self.axis, mesh)
        depend.record(self.fn.__name__, self.axis, accesses, loc)
        elements = [getattr(t, "element", None) for t in fns[0].result_types[:n_out]]
        outs = self._assemble([r[:n_out] for r in results],
                              _invariant_outputs(fns, values, self.axis), values, mesh,
                              elements)
        it = iter(outs)
        leaves = [static[k] if k in static else next(it) for k in range(out_tree.num_leaves)]
        return unflatten(out_tree, leaves)

    def _views(self, values: dict[str, Any], n: int) -> tuple[dict[str, Any], list[Any]]:
        views: dict[str, Any] = {}
        accesses = []
        for name, v in values.items():
            privilege = self.privileges.get(name, Privilege(READ))
            if isinstance(v, DistTensor):
                arrays, boxes = local_views(v, self.axis)
            elif isinstance(v, (np.ndarray, Tensor)) or name in self.privileges:
                if name in self.privileges and not isinstance(v, np.ndarray):
                    raise RegionError(f"region {name!r} must be a DistTensor or a NumPy "
                                      f"array, not {type(v).__name__}",
                                      hint="regions are written in place")
                arrays = [as_tensor(v).array] * n
                boxes = [tuple(slice(0, s) for s in np.shape(v))] * n
            else:
                views[name] = None
                continue
            if privilege.mode == "reduce":  # the body starts from a zero contribution
                arrays = [np.zeros_like(a) for a in arrays]
            views[name] = arrays
            accesses.append(depend.access(v, name, privilege, boxes))
        return views, accesses

    def _trace(self, values: dict[str, Any], views: dict[str, Any], i: int
               ) -> tuple[Function, Any]:
        with Trace(f"{self.fn.__name__}_{self.axis}{i}") as trace:
            call: dict[str, Any] = {}
            regions: list[RegionView] = []
            for name, v in values.items():
                if views[name] is None:
                    call[name] = v
                    continue
                elem = v.element if isinstance(v, DistTensor) else as_tensor(v).type.element
                local = views[name][i]
                tracer = trace.param(TensorType(local.shape, elem), name)
                view = RegionView(tracer, name, self.privileges.get(name, Privilege(READ)))
                call[name] = view
                if view.privilege.writes:
                    regions.append(view)
            out = self.fn(**call)
            leaves, tree = flatten(out)
            static = {k: x for k, x in enumerate(leaves) if not isinstance(x, (Tracer, Tensor))}
            from tessera.autodiff.transform import as_traced
            from tessera.frontend.graph.ops import operand

            traced = [as_traced(operand(x)) for k, x in enumerate(leaves) if k not in static]
            fn = trace.finish(traced + [v.current() for v in regions])
        return fn, (tree, static)

    def _assemble(self, results: list[list[np.ndarray]], same: Sequence[bool],
                  values: dict[str, Any], mesh: Mesh, elements: Sequence[Any]
                  ) -> list[DistTensor]:
        outs = []
        pos = mesh.axis_position(self.axis)
        devices = [mesh.index(tuple(i if p == pos else 0 for p in range(mesh.ndim)))
                   for i in range(len(results))]
        for k in range(len(results[0])):
            arrays = [r[k] for r in results]
            elem = elements[k]
            if same[k] and self.out_dims is None:
                outs.append(from_shards({devices[0]: arrays[0]}, mesh, dtype=elem))
                continue
            where = self._out_dim(k, arrays[0].ndim, values)
            if where == PARTIAL:
                outs.append(from_shards(dict(zip(devices, arrays)), mesh, dtype=elem,
                                        partial=self.axis))
            else:
                outs.append(from_shards(dict(zip(devices, arrays)), mesh, dtype=elem,
                                        layout=ShardSpec((where,), (self.axis,))))
        return outs

    def _out_dim(self, k: int, rank: int, values: dict[str, Any]) -> Any:
        spec = self.out_dims
        if isinstance(spec, (list, tuple)):
            spec = spec[k]
        if spec is not None:
            return spec
        if rank == 0:  # a scalar per index is that index's contribution
            return PARTIAL
        for v in values.values():
            if isinstance(v, DistTensor) and v.sharded_dim(self.axis) is not None:
                return v.sharded_dim(self.axis) if v.ndim == rank else 0
        return 0


def _conflict(message: str, loc: Any) -> RegionConflictError:
    return RegionConflictError(f"the indices of one launch interfere: {message}", loc=loc,
                               hint="give each index its own part (shard the tensor over "
                                    "the launch axis), or make it Region[reduce]")


def _invariant_outputs(fns: Sequence[Function], values: dict[str, Any], axis: str
                       ) -> list[bool]:
    """Which outputs every index computes alike (same inputs, same ops)."""
    first = fns[0]
    if any(len(f.body.instrs) != len(first.body.instrs) for f in fns):
        return [False] * len(first.result_types)
    arrays = [v for v in values.values() if isinstance(v, (DistTensor, np.ndarray, Tensor))]
    same = {a for a, v in zip(first.args, arrays)
            if not isinstance(v, DistTensor) or v.placement(axis) == "replicated"}
    for k, instr in enumerate(first.body.instrs):
        alike = all(f.body.instrs[k].op == instr.op for f in fns)
        if isinstance(instr.op, INVARIANT) or (alike and all(v in same for v in instr.operands)):
            same.update(instr.results)
    term = first.body.terminator
    assert term is not None
    return [v in same for v in term.operands]


@user_api
def index_launch(axis: str, *, out_dims: Any = None, mode: str = "exact"
                 ) -> Callable[[Callable[..., Any]], IndexLaunch]:
    """``index_launch(axis="tp")(fn)(*args)``: run ``fn`` once per index along ``axis``."""
    if not isinstance(axis, str):
        raise LaunchError(f"index_launch(axis=...) takes one axis name, got {axis!r}",
                          hint='write index_launch(axis="tp")')
    return lambda fn: IndexLaunch(fn, axis, out_dims, mode)


__all__ = ["IndexLaunch", "axis_index", "index_launch", "local_views"]
