"""``index_launch`` of a tile kernel (``@ts.kernel``): one kernel launch per index.

A kernel cannot meet the other indices in a collective (tile kernels have none), so
the launches run one after another in index order, each on its own writable copies
of its local views (a DistTensor's shard along the axis, a NumPy array or tensor as
it is). Launch keywords (``grid``, ``group_size``, ``tile_shape``, ``config``,
``mode``, ``schedule``) pass through to every launch.

Arguments a kernel writes (as kernels write NumPy arrays in place) are written back:
each index's part of a DistTensor sharded over the axis; a replicated argument or
NumPy array only if every index left the same bits in it (else the indices interfere:
a RegionConflictError). Returned arrays are assembled like a traced body's outputs
(``out_dims``; a returned scalar is each index's summand: partial).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.frontend.graph.tensor import Tensor
from tessera.mesh_sim.regions import WRITE, Privilege, RegionConflictError
from tessera.mesh_sim.spmd.writeback import write_back
from tessera.mesh_sim.tensor import SHARDED, DistTensor

LAUNCH_KEYWORDS = ("grid", "group_size", "tile_shape", "config", "mode", "schedule")


def is_kernel(fn: Any) -> bool:
    """Whether ``fn`` is a ``@ts.kernel`` (the tile level may be absent)."""
    try:
        from tessera.frontend.kernel import Kernel
    except ImportError:  # pragma: no cover - a build without the tile level
        return False
    return isinstance(fn, Kernel)


def run_kernels(kernel: Any, values: dict[str, Any], views: dict[str, Any], n: int,
                launch_kw: dict[str, Any], axis: str, mesh: Any, loc: Loc
                ) -> list[list[np.ndarray]]:
    """Launch ``kernel`` once per index; write modified arguments back; return each
    index's results (a list of arrays)."""
    copies = {name: [np.array(a) for a in arrays] for name, arrays in views.items()
              if arrays is not None}
    results = []
    for i in range(n):
        call = {name: copies[name][i] if name in copies else v for name, v in values.items()}
        out = kernel(**call, **launch_kw)
        outs = out if isinstance(out, (tuple, list)) else [out]
        results.append([np.asarray(o.array if isinstance(o, Tensor) else o) for o in outs
                        if o is not None])
    written = {}
    for name, arrays in copies.items():
        changed = [not np.array_equal(a, b, equal_nan=True) or a.tobytes() != b.tobytes()
                   for a, b in zip(arrays, views[name])]
        if not any(changed):
            continue
        target = values[name]
        sharded = isinstance(target, DistTensor) and target.placement(axis) == SHARDED
        if not sharded and any(a.tobytes() != arrays[0].tobytes() for a in arrays):
            raise RegionConflictError(f"the indices of the launch of {kernel.name} wrote "
                                      f"different values into {name!r}, which they share",
                                      loc=loc, hint="shard it over the launch axis, or "
                                                    "return the per-index values instead")
        written[name] = arrays
    if written:
        names = list(written)
        write_back({k: values[k] for k in names}, {k: Privilege(WRITE) for k in names},
                   [[written[k][i] for k in names] for i in range(n)], axis, mesh)
    return results


__all__ = ["LAUNCH_KEYWORDS", "is_kernel", "run_kernels"]
