"""Writing the write and reduce regions of a launch back into their arguments.

A DistTensor region is updated in place (the object the caller holds gets the new
value and keeps its layout); a NumPy region is overwritten with ``np.copyto``.

* ``write``: index ``i``'s final local value becomes its part of the region (its shard
  where the region is sharded over the launch axis, its summand where it is partial);
* ``reduce``: each index's contribution is combined with the region's value in index
  order, in the accumulation format, rounded once: onto that index's part where the
  region is sharded (or partial) over the axis, onto the whole value where it is
  replicated (``old + c_0 + c_1 + ...``).

Axes other than the launch axis along which the region was partial are reduced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.dist.core.construct import from_shards
from tessera.dist.core.mesh import Mesh
from tessera.dist.core.regions import REDUCE, Privilege
from tessera.dist.core.sharding import ShardSpec
from tessera.dist.core.tensor import PARTIAL, SHARDED, DistTensor
from tessera.mesh_sim.collectives import relayout
from tessera.mesh_sim.reduce import reduce_in_order


def assign_into(dst: DistTensor, src: DistTensor) -> None:
    """Make ``dst`` hold ``src``'s value and layout (the caller's object is updated)."""
    for slot in DistTensor.__slots__:
        setattr(dst, slot, getattr(src, slot))


def _new_value(t: DistTensor, arrays: list[np.ndarray], privilege: Privilege, axis: str,
               mesh: Mesh) -> DistTensor:
    from tessera.dist.launch import local_views

    state = t.placement(axis)
    if privilege.mode == REDUCE:
        old = local_views(t, axis)[0]
        if state == SHARDED or state == PARTIAL:
            arrays = [reduce_in_order([o, a], t.element, privilege.op)
                      for o, a in zip(old, arrays)]
        else:
            total = reduce_in_order([old[0], *arrays], t.element, privilege.op)
            arrays = [total] * len(arrays)
    pos = mesh.axis_position(axis)
    devices = [mesh.index(tuple(i if p == pos else 0 for p in range(mesh.ndim)))
               for i in range(len(arrays))]
    if state == SHARDED:
        layout = ShardSpec((t.sharded_dim(axis),), (axis,))
        new = from_shards(dict(zip(devices, arrays)), mesh, layout=layout, dtype=t.element,
                          shape=t.shape)
    elif state == PARTIAL:
        return from_shards(dict(zip(devices, arrays)), mesh, dtype=t.element, partial=axis,
                           shape=t.shape)
    else:
        new = from_shards({devices[0]: arrays[0]}, mesh, dtype=t.element, shape=t.shape)
    return relayout(new, t.layout)


def write_back(values: dict[str, Any], privileges: dict[str, Privilege],
               results: list[list[np.ndarray]], axis: str, mesh: Mesh) -> None:
    """Store each index's final region values (``results[i]``, in parameter order)."""
    names = [n for n in values if n in privileges and privileges[n].writes]
    for j, name in enumerate(names):
        target, privilege = values[name], privileges[name]
        arrays = [r[j] for r in results]
        if isinstance(target, DistTensor):
            assign_into(target, _new_value(target, arrays, privilege, axis, mesh))
        elif privilege.mode == REDUCE:
            np.copyto(target, reduce_in_order([target, *arrays], target.dtype,
                                              privilege.op), casting="unsafe")
        else:
            np.copyto(target, arrays[0], casting="unsafe")


__all__ = ["assign_into", "write_back"]
