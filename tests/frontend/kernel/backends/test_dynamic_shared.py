"""The dynamic shared memory of a kernel with more than 48 KiB of buffers reaches the
driver: ``ts.launch(..., backend="cuda")`` and ``DeviceLaunch.time`` opt in with
``cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`` and pass the
byte count to ``cuLaunchKernel``; an AOT bundle records it. A fake driver stands in for
``cuda.bindings.driver``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.driver import launch
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.frontend.kernel.backends.launch import on_device
from tests.backend.ptx.driver.test_timing import TimedDriver
from tests.lower.test_shared_memory import reverse

N_BIG, N_SMALL = 16384, 256  # 65,552 and 1,040 bytes of shared buffers
MAX_DYNAMIC = TimedDriver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class RecordingDriver(TimedDriver):
    """A device of compute capability 8.0 that loads any kernel and records the
    shared-memory opt-ins and launches."""

    def __init__(self) -> None:
        super().__init__((8, 0))
        self.attributes: list[tuple[Any, int, int]] = []

    def cuModuleGetFunction(self, module: str, name: bytes) -> tuple[int, bytes]:
        return 0, name

    def cuFuncSetAttribute(self, fn: bytes, attribute: int, value: int) -> tuple[int]:
        self.attributes.append((fn, attribute, value))
        return (0,)

    def cuLaunchKernel(self, *args: Any) -> tuple[int]:
        self.launches.append(args)
        return (0,)

    def cuModuleUnload(self, module: str) -> tuple[int]:
        return (0,)

    def cuDevicePrimaryCtxRelease(self, device: int) -> tuple[int]:
        return (0,)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingDriver:
    driver = RecordingDriver()
    monkeypatch.setattr(launch, "_driver_module", lambda: driver)
    return driver


@pytest.mark.parametrize(("n", "dynamic"), [(N_BIG, 16 + 4 * N_BIG), (N_SMALL, 0)])
def test_launch_passes_the_dynamic_byte_count(fake: RecordingDriver, n: int,
                                              dynamic: int) -> None:
    data = np.ones(n, np.float32)
    ts.launch(reverse, 1, (data, np.zeros(n, np.float32)), backend="cuda", target="sm_80",
              group_size=128)
    ((name, grid, block, shared, *_),) = [(a[0], a[1:4], a[4:7], a[7]) for a in fake.launches]
    assert name == b"reverse" and grid == (1, 1, 1) and block == (128, 1, 1)
    assert shared == dynamic
    max_dynamic = MAX_DYNAMIC
    assert fake.attributes == ([(b"reverse", max_dynamic, dynamic)] if dynamic else [])


def test_timed_launches_pass_it_too(fake: RecordingDriver) -> None:
    data = np.ones(N_BIG, np.float32)
    args = (data, np.zeros(N_BIG, np.float32))
    compiled = compile_kernel(reverse, *args, target="sm_80", grid=1, group_size=128)
    with on_device(compiled, reverse, args, {"grid": 1, "group_size": 128}) as device:
        assert device.shared_bytes == compiled.shared_bytes == 16 + 4 * N_BIG
        device.time(repeat=2, warmup=1)
    assert [a[7] for a in fake.launches] == [compiled.shared_bytes] * 3
    assert [a[2] for a in fake.attributes] == [compiled.shared_bytes]


def test_aot_bundle_records_the_dynamic_bytes(tmp_path: Path) -> None:
    data = np.ones(N_BIG, np.float32)
    path = ts.aot.save(reverse, tmp_path, data, np.zeros_like(data),
                       targets=("sm_80", "sm_90a"), grid=1, group_size=128)
    assert json.loads(path.read_text())["launch"]["shared_bytes"] == 16 + 4 * N_BIG
    small = np.ones(N_SMALL, np.float32)
    path = ts.aot.save(reverse, tmp_path / "small", small, np.zeros_like(small),
                       targets=("sm_80",), grid=1, group_size=128, assemble=False)
    assert json.loads(path.read_text())["launch"]["shared_bytes"] == 0
