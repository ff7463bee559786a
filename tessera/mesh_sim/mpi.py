"""The mesh simulation spread over MPI ranks, with the same bits as one process.

The virtual devices ``0 .. N-1`` are split over the ranks of a communicator in
contiguous blocks (``numpy.array_split`` sizes: rank 0 holds the first block). Each rank
holds the shards of its own devices only.

MPI's own ``Allreduce`` does not add in rank order (MPICH changed 46% of the elements
of a 72-device float32 sum), even with a user-defined operation. :func:`mpi_all_reduce`
pins the order instead:

1. each device's buffer is split into one chunk per rank;
2. an all-to-all sends chunk ``q`` of every device to rank ``q``, so rank ``q`` holds
   chunk ``q`` of all ``N`` devices, in global device order (the blocks are contiguous);
3. rank ``q`` reduces its chunk over the devices, left to right, with
   :func:`.reduce.reduce_in_order` -- the same per-element order as the one-process run;
4. an all-gather puts the reduced chunks together on every rank.

Long buffers go through in segments, so that no MPI count passes 2**31 bytes and the
staging buffers stay bounded. ``mpi4py`` is imported on first use
(``pip install mpi4py mpich`` installs both the bindings and an MPI with ``mpiexec``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tessera.dist.core.sharding import split_offsets
from tessera.errors import MeshError, MeshShapeError, UnsupportedError
from tessera.mesh_sim.reduce import check_op, reduce_in_order
from tessera.numerics import from_numpy_dtype, storage_of

#: Upper bound on the bytes one rank sends per segment (well below MPI's int32 counts).
SEGMENT_BYTES = 1 << 28


def require_mpi() -> Any:
    """The ``mpi4py.MPI`` module, or UnsupportedError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise UnsupportedError(f"the MPI mesh simulation needs mpi4py ({err})",
                               hint="pip install mpi4py mpich  (the mpich wheel brings "
                                    "an MPI library and mpiexec; no system MPI needed)") \
            from None
    return MPI


def _comm(comm: Any) -> Any:
    return require_mpi().COMM_WORLD if comm is None else comm


def device_blocks(num_devices: int, num_ranks: int) -> list[range]:
    """The contiguous block of device indices that each rank holds."""
    bounds = split_offsets(num_devices, num_ranks)
    return [range(bounds[r], bounds[r + 1]) for r in range(num_ranks)]


def local_devices(num_devices: int, comm: Any = None) -> range:
    """The device indices this rank holds (its block of :func:`device_blocks`)."""
    comm = _comm(comm)
    return device_blocks(num_devices, comm.Get_size())[comm.Get_rank()]


def rank_shards(t: Any, comm: Any = None) -> dict[int, np.ndarray]:
    """This rank's shards of a DistTensor: ``{device index: shard}`` for its block."""
    return {i: t.shard(i) for i in local_devices(t.mesh.size, comm)}


def _check_layout(local: Mapping[int, np.ndarray],
                  comm: Any) -> tuple[int, tuple[int, ...], Any, list[int]]:
    """Every rank's devices: contiguous, ascending by rank, one shape and dtype."""
    keys = sorted(local)
    arrays = [local[k] for k in keys]
    shapes = {a.shape for a in arrays}
    dtypes = {a.dtype for a in arrays}
    info = (keys[0] if keys else None, len(keys), shapes, dtypes)
    everyone = comm.allgather(info)
    if keys and keys != list(range(keys[0], keys[0] + len(keys))):
        raise MeshError(f"rank {comm.Get_rank()} holds devices {keys}, not one contiguous "
                        "block", hint="use local_devices(num_devices) on every rank")
    expect = 0
    for r, (first, count, _, _) in enumerate(everyone):
        if count and first != expect:
            raise MeshError(f"rank {r} starts at device {first}, expected {expect}",
                            hint="rank r holds block r of device_blocks(N, size)")
        expect += count
    if not expect:
        raise MeshError("no rank holds a device", hint="give each rank its local shards")
    all_shapes = set().union(*(s for _, _, s, _ in everyone))
    all_dtypes = set().union(*(d for _, _, _, d in everyone))
    if len(all_shapes) != 1 or len(all_dtypes) != 1:
        raise MeshShapeError(f"device buffers differ: shapes {sorted(all_shapes)}, dtypes "
                             f"{sorted(map(str, all_dtypes))}",
                             hint="every device contributes one shape and format")
    return expect, next(iter(all_shapes)), next(iter(all_dtypes)), \
        [c for _, c, _, _ in everyone]


def mpi_all_reduce(local_shards: Mapping[int, np.ndarray], *, element: Any = None,
                   op: str = "sum", comm: Any = None,
                   segment_bytes: int = SEGMENT_BYTES) -> np.ndarray:
    """All-reduce over every device of every rank, in global device order.

    ``local_shards`` maps this rank's device indices (one contiguous block; see
    :func:`local_devices`) to their buffers. The result, on every rank, is bit for bit
    what :func:`.reduce.reduce_in_order` gives over all devices' buffers in one process
    (``functools.reduce(np.add, ...)`` for float32 sums), whatever the number of ranks.
    ``element`` defaults to the buffers' format; the result is in its storage format.
    """
    MPI = require_mpi()
    comm = _comm(comm)
    check_op(op)
    arrays = [np.ascontiguousarray(local_shards[k]).reshape(-1) for k in sorted(local_shards)]
    num, shape, dtype, counts = _check_layout(local_shards, comm)
    elem = from_numpy_dtype(dtype) if element is None else element
    out_dtype = storage_of(elem).np_dtype
    if out_dtype != dtype:
        raise MeshShapeError(f"buffers of {dtype} with element {elem}",
                             hint="pass buffers in the element's storage format")
    nranks, rank = comm.Get_size(), comm.Get_rank()
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(n, out_dtype)
    item = np.dtype(dtype).itemsize
    step = max(nranks, segment_bytes // (item * max(max(counts), 1)))
    for s0 in range(0, n, step):
        s1 = min(n, s0 + step)
        bounds = split_offsets(s1 - s0, nranks)
        width = [bounds[q + 1] - bounds[q] for q in range(nranks)]
        send = np.empty((s1 - s0) * len(arrays), dtype)
        pos = 0
        for q in range(nranks):  # destination-major: rank q's chunk of every local device
            for a in arrays:
                send[pos:pos + width[q]] = a[s0 + bounds[q]:s0 + bounds[q + 1]]
                pos += width[q]
        recv = np.empty((num, width[rank]), dtype)
        sc = [width[q] * len(arrays) * item for q in range(nranks)]
        rc = [counts[r] * width[rank] * item for r in range(nranks)]
        comm.Alltoallv([send.view(np.uint8), (sc, _displs(sc)), MPI.BYTE],
                       [recv.reshape(-1).view(np.uint8), (rc, _displs(rc)), MPI.BYTE])
        mine = np.ascontiguousarray(reduce_in_order(list(recv), elem, op))
        gc = [w * out.itemsize for w in width]
        comm.Allgatherv([mine.view(np.uint8), MPI.BYTE],
                        [out[s0:s1].view(np.uint8), (gc, _displs(gc)), MPI.BYTE])
    return out.reshape(shape)


def _displs(counts: list[int]) -> list[int]:
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])]


__all__ = ["SEGMENT_BYTES", "device_blocks", "local_devices", "mpi_all_reduce",
           "rank_shards", "require_mpi"]
