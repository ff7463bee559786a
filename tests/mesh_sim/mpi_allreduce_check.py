"""Order-pinned MPI all-reduce over 72 virtual devices; prints the result's SHA-256.

Run under MPI with any number of ranks (the digest must not depend on it)::

    mpiexec -n 2 .venv/bin/python tests/mesh_sim/mpi_allreduce_check.py

Each device's data (8 MB of float32 by default) comes from a generator seeded with the
device index alone, so every rank count sums the same numbers. ``--reference`` prints
the digest of the one-process sum instead (``functools.reduce(np.add, shards)``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

DEVICES = 72
ELEMENTS = 2 * 1024 * 1024  # 8 MB of float32 per device
SEED = 20240


def device_data(index: int, elements: int = ELEMENTS, seed: int = SEED) -> np.ndarray:
    """The buffer of virtual device ``index``: independent of how devices meet ranks."""
    return np.random.default_rng([seed, index]).standard_normal(elements, dtype=np.float32)


def digest(a: np.ndarray) -> str:
    """SHA-256 of the array's bytes."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=DEVICES)
    parser.add_argument("--elements", type=int, default=ELEMENTS)
    parser.add_argument("--segment", type=int, default=None,
                        help="bytes per MPI segment (small values force several rounds)")
    parser.add_argument("--reference", action="store_true",
                        help="print the one-process functools.reduce digest")
    args = parser.parse_args()
    if args.reference:
        shards = [device_data(i, args.elements) for i in range(args.devices)]
        print(digest(functools.reduce(np.add, shards)))
        return 0
    from tessera.mesh_sim.mpi import local_devices, mpi_all_reduce, require_mpi

    comm = require_mpi().COMM_WORLD
    mine = {i: device_data(i, args.elements) for i in local_devices(args.devices, comm)}
    kw = {} if args.segment is None else {"segment_bytes": args.segment}
    result = mpi_all_reduce(mine, comm=comm, **kw)
    if comm.Get_rank() == 0:
        print(digest(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
