"""Rack scale: 72 devices of 8 MB, and the MPI run that must give the same bits."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import dist

from .mpi_allreduce_check import DEVICES, ELEMENTS, device_data, digest
from .util import raises_here

HERE = Path(__file__).parent
NVL72 = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))


@pytest.fixture(scope="module")
def shards() -> list[np.ndarray]:
    """72 buffers of 8 MB float32, device i's seeded by i alone."""
    return [device_data(i) for i in range(DEVICES)]


def test_rack_all_reduce_is_the_sequential_sum(shards: list[np.ndarray]) -> None:
    t = dist.from_shards(shards, mesh=NVL72, partial=("dp", "tp", "pp"))
    r = dist.all_reduce(t, ("dp", "tp", "pp"))
    expect = functools.reduce(np.add, shards)  # rank order = device order for this group
    out = r.shard("cuda:0")
    assert out.dtype == np.float32 and out.tobytes() == expect.tobytes()
    assert all(r.shard(i) is out for i in range(72))  # one result shared by 72 devices
    assert r.materialized_nbytes == ELEMENTS * 4


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                    reason="mpi4py is not installed (pip install mpi4py mpich)")
@pytest.mark.skipif(_mpiexec() is None,
                    reason="no mpiexec found (the mpich wheel installs one beside python)")
def test_mpi_all_reduce_on_two_ranks_has_the_one_process_bits(
        shards: list[np.ndarray]) -> None:
    run = subprocess.run([_mpiexec(), "-n", "2", sys.executable,
                          str(HERE / "mpi_allreduce_check.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = run.stdout.split()
    assert len(got) == 1, run.stdout  # rank 0 prints, rank 1 does not
    one_process = dist.all_reduce(dist.from_shards(shards, mesh=dist.mesh(
        devices=range(72), axes="x"), partial="x"), "x")
    assert got[0] == digest(one_process.shard(0))
    assert got[0] == digest(functools.reduce(np.add, shards))


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or _mpiexec() is None,
                    reason="mpi4py or mpiexec is not installed (pip install mpi4py mpich)")
def test_mpi_uneven_device_blocks_and_chunks() -> None:
    # 7 devices of 1001 elements over 3 ranks: blocks of 3, 2, 2 devices and chunks of
    # 334, 334, 333 elements; a small segment size forces several segments as well.
    args = [str(HERE / "mpi_allreduce_check.py"), "--devices", "7", "--elements", "1001"]
    ref = subprocess.run([sys.executable, *args, "--reference"], capture_output=True,
                         text=True, timeout=120)
    run = subprocess.run([_mpiexec(), "-n", "3", sys.executable, *args, "--segment", "96"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and ref.returncode == 0, run.stderr + ref.stderr
    assert run.stdout.split() == ref.stdout.split()


def test_missing_mpi4py_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.mesh_sim import mpi

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now fails
    raises_here(ts.UnsupportedError, lambda: mpi.require_mpi(), "mpi4py", "pip install")
    raises_here(ts.UnsupportedError, lambda: mpi.local_devices(72), "mpi4py mpich")
