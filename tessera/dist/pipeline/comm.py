"""Collectives on per-rank blocks, run on the mesh and placed on a timeline.

Pipeline stages and MoE ranks hold plain arrays, one per rank of a mesh axis (devices
along the other axes are replicas). The functions here wrap the blocks in a DistTensor,
run the real collective of the simulator (:mod:`tessera.mesh_sim.collectives`,
:mod:`tessera.mesh_sim.p2p`; quietly: the call is recorded here, with a name, rather
than by the profile hook), unwrap the result and put the operation on the
:class:`tessera.mesh_sim.trace.Timeline`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.dist.core.construct import from_shards
from tessera.dist.core.sharding import ShardSpec
from tessera.mesh_sim.collectives import all_gather, all_reduce, all_to_all
from tessera.mesh_sim.p2p import ppermute
from tessera.mesh_sim.profile import quiet
from tessera.mesh_sim.trace import Timeline


def representatives(mesh: Any, axis: str) -> list[int]:
    """One device per rank of ``axis`` (coordinate 0 on every other axis)."""
    return [mesh.index({axis: r}) for r in range(mesh.axis_size(axis))]


def send_block(value: np.ndarray, element: Any, mesh: Any, axis: str, src: int, dst: int,
               tl: Timeline, name: str, after: float) -> tuple[np.ndarray, float]:
    """Rank ``src`` sends ``value`` to rank ``dst`` (a one-pair ``ppermute`` of a tensor
    partial over ``axis``), starting at ``after``; returns it and its arrival (µs)."""
    rep = representatives(mesh, axis)
    zeros = np.zeros_like(value)
    shards = {d: value if r == src else zeros for r, d in enumerate(rep)}
    t = from_shards(shards, mesh=mesh, dtype=element, partial=axis)
    with quiet():
        moved = ppermute(t, axis, [(src, dst)])
    pairs = [[g[src], g[dst]] for g in mesh.groups(axis)]
    _, end = tl.collective(pairs, "send_recv", float(value.nbytes), name=name, after=after,
                           wait_compute=False, ranks=2)
    return moved.shard(rep[dst]), end


def exchange(blocks: list[np.ndarray], mesh: Any, axis: str, src: int, dst: int,
             tl: Timeline, name: str) -> list[np.ndarray]:
    """``all_to_all`` of per-rank blocks split on dim ``src`` into blocks split on
    ``dst`` (each rank's block cut along ``dst``, the pieces joined along ``src``)."""
    rep = representatives(mesh, axis)
    t = from_shards(dict(zip(rep, blocks)), mesh=mesh, layout=ShardSpec((src,), (axis,)))
    with quiet():
        moved = all_to_all(t, axis, split_dim=dst, concat_dim=src)
    nbytes = float(max(b.nbytes for b in blocks))
    tl.collective(mesh.groups(axis), "all_to_all", nbytes, name=f"{name}({axis})")
    return [moved.shard(d) for d in rep]


def gather_blocks(blocks: list[np.ndarray], mesh: Any, axis: str, tl: Timeline,
                  name: str) -> np.ndarray:
    """``all_gather`` of per-rank blocks: their stack ``[ranks, ...]``, on every rank."""
    rep = representatives(mesh, axis)
    t = from_shards({d: b[None] for d, b in zip(rep, blocks)}, mesh=mesh,
                    layout=ShardSpec((0,), (axis,)))
    with quiet():
        out = np.asarray(all_gather(t, axis))
    tl.collective(mesh.groups(axis), "all_gather", float(out.nbytes), name=f"{name}({axis})")
    return out


def reduce_blocks(parts: list[np.ndarray], mesh: Any, axis: str, tl: Timeline,
                  name: str) -> np.ndarray:
    """``all_reduce`` (sum in rank order) of per-rank summands."""
    t = from_shards(dict(zip(representatives(mesh, axis), parts)), mesh=mesh, partial=axis)
    with quiet():
        out = np.asarray(all_reduce(t, axis))
    tl.collective(mesh.groups(axis), "all_reduce", float(parts[0].nbytes),
                  name=f"{name}({axis})")
    return out


def from_blocks(blocks: list[np.ndarray], mesh: Any, axis: str) -> Any:
    """A DistTensor whose dim 0 is split over ``axis`` into ``blocks`` (rank order)."""
    return from_shards(dict(zip(representatives(mesh, axis), blocks)), mesh=mesh,
                       layout=ShardSpec((0,), (axis,)))


__all__ = ["exchange", "from_blocks", "gather_blocks", "reduce_blocks", "representatives",
           "send_block"]
