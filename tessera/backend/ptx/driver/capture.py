"""CUDA graphs: a program's kernel launches recorded once and replayed
(``@ts.jit(capture_graph=True)`` on the ``"cuda"`` backend).

A graph program launches several kernels per call; each ``cuLaunchKernel`` costs
microseconds of CPU time. Stream capture records the launches a call enqueues on a
stream into a CUDA graph instead of running them (``cuStreamBeginCapture`` /
``cuStreamEndCapture``), ``cuGraphInstantiate`` makes it executable once, and every
call after that is one ``cuGraphLaunch`` (CUDA Programming Guide, "CUDA Graphs",
"Creating a Graph Using Stream Capture"). The graph holds the launches' parameters as
they were captured, so the program's device buffers must stay where they are: a
caller copies each call's inputs into the same buffers before :meth:`GraphCapture.run`
and reads the outputs from the same buffers after it.

Only work enqueued on the capture stream may happen while capturing: synchronous
copies and ``cuCtxSynchronize`` are errors during capture, which is why
:func:`launch_async` enqueues one launch and returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessera.backend.ptx.driver.launch import (
    CudaFunction,
    _call,
    _dims,
    _ready_driver,
    prepare_args,
)
from tessera.backend.ptx.driver.params import NativeParams, pack_params


def launch_async(driver: Any, function: CudaFunction, grid: int | Sequence[int],
                 block: int | Sequence[int], shared_bytes: int, args: Sequence[Any],
                 stream: Any) -> None:
    """Enqueue one launch of ``function`` on ``stream`` (device pointers and scalars as
    ``args``; no host arrays, no synchronisation): the form a captured launch takes."""
    prepared = prepare_args(function.specs, args)
    if any(item.host_array is not None for item in prepared):
        raise TypeError("launch_async takes device pointers, not host arrays")
    native = NativeParams(pack_params(function.specs, [item.value for item in prepared]))
    grid3, block3 = _dims("grid", grid), _dims("block", block)
    _call(driver, f"cuLaunchKernel({function.name})", driver.cuLaunchKernel(
        function.handle, *grid3, *block3, shared_bytes, stream, native.kernel_params, 0))


class GraphCapture:
    """One program's launches as a CUDA graph: captured on the first :meth:`run`,
    replayed by every later one."""

    def __init__(self, driver: Any = None) -> None:
        self._driver = driver if driver is not None else _ready_driver()
        self._stream: Any = None
        self._graph: Any = None
        self._exec: Any = None
        #: how many times the captured graph was launched
        self.replays = 0

    @property
    def captured(self) -> bool:
        """Whether the launches have been captured (and the graph instantiated)."""
        return self._exec is not None

    @property
    def stream(self) -> Any:
        """The stream the graph is captured on and launched on."""
        if self._stream is None:
            driver = self._driver
            flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
            self._stream = _call(driver, "cuStreamCreate", driver.cuStreamCreate(flags))
        return self._stream

    def capture(self, issue: Callable[[Any], None]) -> None:
        """Record the launches ``issue(stream)`` enqueues into a graph and instantiate it
        (nothing runs yet). A failure while issuing ends the capture first."""
        driver = self._driver
        stream = self.stream
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
        _call(driver, "cuStreamBeginCapture", driver.cuStreamBeginCapture(stream, mode))
        try:
            issue(stream)
        except BaseException:
            result = driver.cuStreamEndCapture(stream)  # leave the stream usable
            if result[0] == 0 and len(result) > 1 and result[1] is not None:
                driver.cuGraphDestroy(result[1])
            raise
        self._graph = _call(driver, "cuStreamEndCapture", driver.cuStreamEndCapture(stream))
        self._exec = _call(driver, "cuGraphInstantiate",
                           driver.cuGraphInstantiate(self._graph, 0))

    def run(self, issue: Callable[[Any], None]) -> None:
        """Run the program: capture ``issue`` the first time, then launch the graph on
        the stream and wait for it (the first call runs the captured launches too)."""
        if not self.captured:
            self.capture(issue)
        driver = self._driver
        _call(driver, "cuGraphLaunch", driver.cuGraphLaunch(self._exec, self.stream))
        _call(driver, "cuStreamSynchronize", driver.cuStreamSynchronize(self.stream))
        self.replays += 1

    def close(self) -> None:
        """Destroy the executable graph, the graph and the stream."""
        driver = self._driver
        if self._exec is not None:
            driver.cuGraphExecDestroy(self._exec)
            self._exec = None
        if self._graph is not None:
            driver.cuGraphDestroy(self._graph)
            self._graph = None
        if self._stream is not None:
            driver.cuStreamDestroy(self._stream)
            self._stream = None

    def __enter__(self) -> GraphCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GraphCapture", "launch_async"]
