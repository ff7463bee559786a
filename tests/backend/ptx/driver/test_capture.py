"""CUDA graph capture and replay (``capture_graph=True``) through the driver API.

A fake driver stands in for ``cuda.bindings.driver``: it records the launches enqueued
on a capturing stream into a graph (reading their parameters at capture time, as the
driver copies them into the graph's kernel nodes) and "runs" ``add_one`` when the
instantiated graph is launched. The test on a real GPU skips with the reason
``cuda_available`` gives.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from tessera.backend.ptx.driver import launch
from tessera.backend.ptx.driver.capture import GraphCapture, launch_async
from tessera.backend.ptx.driver.launch import CudaFunction, CudaModule, cuda_available
from tessera.backend.ptx.driver.params import param_specs
from tests.backend.ptx.driver.test_assemble import ADD_ONE

HAVE_GPU, WHY_NOT = cuda_available()
ADD_ONE_SIGNATURE = [("p_x", ".u64"), ("p_n", ".u32")]


class FakeGraphDriver:
    """Streams, stream capture and graphs, enough for :class:`GraphCapture`."""

    class CUstream_flags:  # mirrors the driver's class names
        CU_STREAM_NON_BLOCKING = 1

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_GLOBAL = 0

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.capturing: list[tuple[Any, ...]] | None = None
        self.graphs: dict[str, list[tuple[Any, ...]]] = {}
        self.memory = {0x1000: np.zeros(6, np.float32)}

    def cuGetErrorName(self, err: int) -> tuple[int, bytes]:
        return 0, b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    def cuStreamCreate(self, flags: int) -> tuple[int, str]:
        self.calls.append("cuStreamCreate")
        return 0, "stream"

    def cuStreamBeginCapture(self, stream: str, mode: int) -> tuple[int]:
        self.calls.append("cuStreamBeginCapture")
        self.capturing = []
        return (0,)

    def cuLaunchKernel(self, f: bytes, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared: int, stream: str, kernel_params: int, extra: int) -> tuple[int]:
        self.calls.append("cuLaunchKernel")
        if self.capturing is None or stream != "stream":
            return (900,)  # this fake only captures
        pointers = (ctypes.c_void_p * 2).from_address(kernel_params)
        x = ctypes.c_uint64.from_address(pointers[0]).value
        n = ctypes.c_uint32.from_address(pointers[1]).value
        self.capturing.append((f, x, n))  # parameters are copied into the graph node
        return (0,)

    def cuStreamEndCapture(self, stream: str) -> tuple[int, str]:
        self.calls.append("cuStreamEndCapture")
        name = f"graph{len(self.graphs)}"
        self.graphs[name] = self.capturing or []
        self.capturing = None
        return 0, name

    def cuGraphInstantiate(self, graph: str, flags: int) -> tuple[int, str]:
        self.calls.append("cuGraphInstantiate")
        return 0, f"exec:{graph}"

    def cuGraphLaunch(self, graph_exec: str, stream: str) -> tuple[int]:
        self.calls.append("cuGraphLaunch")
        for f, x, n in self.graphs[graph_exec.split(":")[1]]:
            assert f == b"add_one"
            self.memory[x][:n] += 1.0
        return (0,)

    def cuStreamSynchronize(self, stream: str) -> tuple[int]:
        self.calls.append("cuStreamSynchronize")
        return (0,)

    def cuGraphExecDestroy(self, graph_exec: str) -> tuple[int]:
        self.calls.append("cuGraphExecDestroy")
        return (0,)

    def cuGraphDestroy(self, graph: str) -> tuple[int]:
        self.calls.append("cuGraphDestroy")
        return (0,)

    def cuStreamDestroy(self, stream: str) -> tuple[int]:
        self.calls.append("cuStreamDestroy")
        return (0,)


def _add_one(driver: FakeGraphDriver) -> CudaFunction:
    return CudaFunction("add_one", b"add_one", param_specs(ADD_ONE_SIGNATURE))


def test_first_run_captures_later_runs_replay() -> None:
    driver = FakeGraphDriver()
    fn = _add_one(driver)
    issued = []

    def issue(stream: Any) -> None:  # two launches per call of the program
        issued.append(stream)
        launch_async(driver, fn, 1, 32, 0, [0x1000, 4], stream)
        launch_async(driver, fn, 1, 32, 0, [0x1000, 2], stream)

    with GraphCapture(driver) as graph:
        assert not graph.captured
        graph.run(issue)
        assert graph.captured and issued == ["stream"]
        np.testing.assert_array_equal(driver.memory[0x1000], [2, 2, 1, 1, 0, 0])
        graph.run(issue)
        graph.run(issue)
        assert issued == ["stream"] and graph.replays == 3  # issued once, launched thrice
        np.testing.assert_array_equal(driver.memory[0x1000], [6, 6, 3, 3, 0, 0])
    assert driver.calls.count("cuLaunchKernel") == 2
    assert driver.calls == [
        "cuStreamCreate", "cuStreamBeginCapture", "cuLaunchKernel", "cuLaunchKernel",
        "cuStreamEndCapture", "cuGraphInstantiate", "cuGraphLaunch", "cuStreamSynchronize",
        "cuGraphLaunch", "cuStreamSynchronize", "cuGraphLaunch", "cuStreamSynchronize",
        "cuGraphExecDestroy", "cuGraphDestroy", "cuStreamDestroy"]


def test_a_failure_while_issuing_ends_the_capture() -> None:
    driver = FakeGraphDriver()

    def issue(stream: Any) -> None:
        raise ValueError("a host array cannot be captured")

    graph = GraphCapture(driver)
    with pytest.raises(ValueError, match="cannot be captured"):
        graph.run(issue)
    assert not graph.captured and driver.capturing is None
    assert driver.calls[-2:] == ["cuStreamEndCapture", "cuGraphDestroy"]
    graph.close()
    assert driver.calls[-1] == "cuStreamDestroy"


def test_a_failed_launch_during_capture_is_a_cuda_error() -> None:
    driver = FakeGraphDriver()
    fn = _add_one(driver)
    graph = GraphCapture(driver)
    with pytest.raises(launch.CudaError, match="cuLaunchKernel\\(add_one\\) failed"):
        graph.run(lambda stream: launch_async(driver, fn, 1, 32, 0, [0x1000, 4], "other"))
    assert not graph.captured


def test_launch_async_takes_device_pointers_only() -> None:
    driver = FakeGraphDriver()
    with pytest.raises(TypeError, match="device pointers"):
        launch_async(driver, _add_one(driver), 1, 32, 0, [np.zeros(4, np.float32), 4], "s")


@pytest.mark.skipif(not HAVE_GPU, reason=f"no CUDA GPU: {WHY_NOT}")
def test_capture_and_replay_on_the_gpu() -> None:
    from tessera.backend.ptx.driver.launch import DeviceArrays

    data = np.arange(6, dtype=np.float32)
    with CudaModule(ADD_ONE) as module:
        fn = module.function("add_one", ADD_ONE_SIGNATURE)
        with DeviceArrays(module.driver, [data]) as dev, GraphCapture(module.driver) as graph:
            pointer = dev.pointer(data)
            for _ in range(3):
                graph.run(lambda stream: launch_async(module.driver, fn, 1, 32, 0,
                                                      [pointer, 4], stream))
    np.testing.assert_array_equal(data, [3, 4, 5, 6, 4, 5])
