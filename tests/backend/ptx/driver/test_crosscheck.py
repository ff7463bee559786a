"""The GPU cross-check's own rules, without a GPU: which differences are claims of the
interpreter, and how the arguments reach the device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera.arch import mma_hopper
from tessera.interp.target.runner import TensorMapArg
from tessera.ir.dialects.target import ptx_ops as p
from tessera.ir.dialects.target.async_ops import MmaSync
from tessera.ir.dialects.target.ops import Reduce
from tests.backend.ptx.driver import crosscheck
from tests.interp.target.kit import U64, Kernel


def _kernel(add: Any = None) -> Any:
    k = Kernel("k", [U64], block=(32,))
    if add is not None:
        add(k)
    return k.build()


def test_modelled_steps_are_the_measured_ones() -> None:
    assert mma_hopper.covers([(True, "e4m3", "e4m3"), (False, "bf16", "bf16")])
    assert not mma_hopper.covers([(False, "e4m3", "e4m3")])  # measured through wgmma only
    assert mma_hopper.covers([(True, "tf32", "tf32")])
    assert not mma_hopper.covers([(False, "tf32", "tf32")])  # mma.sync: not measured
    assert not mma_hopper.covers([(True, "e4m3", "e5m2")])
    assert not mma_hopper.covers([])


def test_race_checked_off_and_atomics_are_not_claims() -> None:
    plain = _kernel()
    assert crosscheck._unclaimed(plain, {}) is None
    assert crosscheck._unclaimed(plain, {"check_races": False}) == "racy"

    def atom(k: Kernel) -> None:
        k.op(p.Atom("global", "add", "u32"), k.args[0], k.const(1, "u32"))

    def red(elem: str) -> Any:
        return lambda k: k.op(Reduce("global", "add", elem), k.args[0], k.const(1, elem))

    assert crosscheck._unclaimed(_kernel(atom), {}) == "unordered"
    assert crosscheck._unclaimed(_kernel(red("f32")), {}) == "unordered"
    assert crosscheck._unclaimed(_kernel(red("u32")), {}) is None  # integer sums: any order


def test_unmodelled_tensor_cores_are_not_claims() -> None:
    def mma(atype: str) -> Any:
        def add(k: Kernel) -> None:
            a, b = (k.ld("global", "b32", k.args[0], vec=n) for n in (4, 2))
            k.op(MmaSync("m16n8k8" if atype == "tf32" else "m16n8k16", atype, atype), a, b,
                 k.ld("global", "f32", k.args[0], vec=4))
        return add

    assert crosscheck._unclaimed(_kernel(mma("tf32")), {}) == "unmodelled"
    assert mma_hopper.covers([(False, "bf16", "bf16")])  # bf16 needs the GPU to decide


def test_arguments_sharing_an_array_reach_the_device_as_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TMA-store epilogue writes C through its tensor map while C's plain pointer is
    also an argument: both must stay one array on the device, or the store lands in a
    copy that is never compared."""
    from tessera.backend.ptx.driver import launch

    staged: list[list[np.ndarray]] = []

    class Module:
        driver = None

        def __init__(self, image: bytes) -> None: ...
        def __enter__(self) -> Module: return self
        def __exit__(self, *exc: object) -> None: ...
        def function(self, *args: Any) -> str: return "k"
        def launch(self, *args: Any) -> None: ...

    class Arrays:
        def __init__(self, driver: Any, arrays: list[np.ndarray]) -> None:
            staged.append(arrays)

        def __enter__(self) -> Arrays: return self
        def __exit__(self, *exc: object) -> None: ...
        def values(self, work: list[Any]) -> list[Any]: return work

    monkeypatch.setattr(launch, "CudaModule", Module)
    monkeypatch.setattr(launch, "DeviceArrays", Arrays)
    monkeypatch.setattr(launch, "device_arch", lambda target: "sm_90a")
    monkeypatch.setattr(crosscheck, "_cubin", lambda ptx, arch: b"")
    c = np.zeros((2, 32, 64), np.float32)  # the map's array is a reshape of C, a view
    k = Kernel("k", [U64, U64], block=(32,))
    got = crosscheck.run_on_gpu(k.build(), [c, TensorMapArg(c.reshape(64, 64), "f32",
                                                               (64, 32), 0)], None, None)
    assert len(staged) == 1 and len(staged[0]) == 1 and staged[0][0] is got[0]
    assert np.shares_memory(got[0], got[1]) and not np.shares_memory(got[0], c)


def test_copies_of_arguments_keep_their_aliasing() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = crosscheck.copy_args([a, a[1:], TensorMapArg(a.reshape(4, 3), "f32", (4, 3), 0), 5])
    out[0][1, 0] = -1.0
    assert out[1][0, 0] == -1.0 and out[2].array[1, 1] == -1.0 and a[1, 0] == 4.0
    assert out[3] == 5


def test_unmodelled_runs_keep_their_operands_for_fitting(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ml_dtypes

    monkeypatch.setenv("TESSERA_CROSSCHECK_LOG", str(tmp_path / "log.jsonl"))
    a = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3)
    c = np.zeros(4, np.float32)
    name = crosscheck._save(_kernel(), [TensorMapArg(a, "bf16", (2, 3), 0), 7, c],
                            [a + 1, 7, c + 2])
    saved = np.load(tmp_path / name)
    assert sorted(saved.files) == ["dtype0", "dtype2", "gpu0", "gpu2", "in0", "in2"]
    assert saved["in0"].view(ml_dtypes.bfloat16).reshape(2, 3).tolist() == a.tolist()
    assert saved["gpu2"].view(np.float32).tolist() == [2.0] * 4
    assert str(saved["dtype0"]) == "bfloat16"
