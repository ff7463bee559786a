"""Event timing of launches and the choice of the architecture a kernel is assembled
for, with a fake driver standing in for ``cuda.bindings.driver``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera.backend.ptx.driver import launch
from tessera.backend.ptx.driver.launch import CudaModule, device_arch
from tessera.backend.ptx.driver.timing import time_launches
from tessera.errors import ArgumentError
from tessera.frontend.kernel.backends.launch import device_target
from tests.backend.ptx.driver.test_launch import ADD_ONE, FakeDriver


class TimedDriver(FakeDriver):
    """A device of compute capability ``cc`` whose launches take 1, 2, 3, ... ms."""

    class CUdevice_attribute:  # mirrors the driver's class name
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    def __init__(self, cc: tuple[int, int] = (9, 0)) -> None:
        super().__init__()
        self.cc = cc
        self.events: list[str] = []

    def cuDeviceGetAttribute(self, attr: int, device: int) -> tuple[int, int]:
        return 0, self.cc[0] if attr == 75 else self.cc[1]

    def cuLaunchKernel(self, *args: Any) -> tuple[int]:
        self.launches.append(args[:7])
        return (0,)

    def cuEventCreate(self, flags: int) -> tuple[int, str]:
        self.events.append("create")
        return 0, f"event{len(self.events)}"

    def cuEventRecord(self, event: str, stream: int) -> tuple[int]:
        return (0,)

    def cuEventSynchronize(self, event: str) -> tuple[int]:
        return (0,)

    def cuEventElapsedTime(self, start: str, stop: str) -> tuple[int, float]:
        return 0, float(len(self.launches))

    def cuEventDestroy(self, event: str) -> tuple[int]:
        self.events.append("destroy")
        return (0,)


def test_time_launches_times_each_launch_after_the_warmups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = TimedDriver()
    monkeypatch.setattr(launch, "_driver_module", lambda: fake)
    module = CudaModule(ADD_ONE)
    timing = time_launches(module, "add_one", 4, 256, [0x10000, 100], repeat=5, warmup=2)
    assert timing.seconds == pytest.approx([0.003, 0.004, 0.005, 0.006, 0.007])
    assert timing.median == pytest.approx(0.005) and timing.best == pytest.approx(0.003)
    assert len(fake.launches) == 7 and fake.launches[0][1:7] == (4, 1, 1, 256, 1, 1)
    assert fake.events.count("create") == fake.events.count("destroy") == 2


def test_time_launches_refuses_host_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_driver_module", TimedDriver)
    with pytest.raises(ArgumentError, match="device arrays, not NumPy arrays"):
        time_launches(CudaModule(ADD_ONE), "add_one", 1, 32, [np.zeros(4, np.float32), 4])


@pytest.mark.parametrize(("cc", "target", "arch"), [
    ((9, 0), "sm_90a", "sm_90a"), ((9, 0), "sm_80", "sm_90a"), ((8, 6), "sm_80", "sm_86"),
    ((8, 0), "sm_80", "sm_80"), ((10, 0), "sm_80", "sm_100"),
])
def test_ptx_for_an_older_target_is_assembled_for_the_device(
        monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int], target: str, arch: str) -> None:
    monkeypatch.setattr(launch, "_driver_module", lambda: TimedDriver(cc))
    assert device_arch(target) == arch


@pytest.mark.parametrize(("cc", "target", "message"), [
    ((8, 0), "sm_90a", "exist on that architecture only"),
    ((10, 0), "sm_90a", "exist on that architecture only"),
    ((8, 0), "sm_90", "cannot run on this GPU"),
])
def test_targets_a_gpu_cannot_run_are_refused(monkeypatch: pytest.MonkeyPatch,
                                              cc: tuple[int, int], target: str,
                                              message: str) -> None:
    monkeypatch.setattr(launch, "_driver_module", lambda: TimedDriver(cc))
    with pytest.raises(ArgumentError, match=message):
        device_arch(target)


@pytest.mark.parametrize(("cc", "target"), [((9, 0), "sm_90a"), ((8, 9), "sm_89"),
                                            ((8, 6), "sm_86"), ((8, 7), "sm_80"),
                                            ((10, 0), "sm_80"), ((12, 0), "sm_80")])
def test_the_default_target_of_a_device(monkeypatch: pytest.MonkeyPatch,
                                        cc: tuple[int, int], target: str) -> None:
    monkeypatch.setattr(launch, "_driver_module", lambda: TimedDriver(cc))
    assert device_target() == target
