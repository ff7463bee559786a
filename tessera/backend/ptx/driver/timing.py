"""Kernel run times on the GPU, measured with CUDA events around each launch.

The arguments are device addresses and scalars only: a NumPy array would be copied in
and out around every launch, and the copies, not the kernel, would be timed. Events
are recorded on the default stream just before and after each ``cuLaunchKernel``
(CUDA Driver API, "Event Management": ``cuEventElapsedTime`` has a resolution of about
half a microsecond), so a launch's time excludes the Python work between launches.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.backend.ptx.driver.launch import (
    CudaFunction,
    CudaModule,
    _call,
    _dims,
    opt_in_shared,
    prepare_args,
)
from tessera.backend.ptx.driver.params import NativeParams, pack_params
from tessera.errors import ArgumentError


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds per launch of one kernel: every timed launch, and their median and min."""

    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        return min(self.seconds)


def time_launches(module: CudaModule, function: CudaFunction | str, grid: int | Sequence[int],
                  block: int | Sequence[int], args: Sequence[Any], *, repeat: int = 20,
                  warmup: int = 3, shared_bytes: int = 0) -> Timing:
    """Launch ``function`` ``warmup + repeat`` times on device-resident ``args`` (with
    ``shared_bytes`` of dynamic shared memory per CTA) and time the last ``repeat``
    launches one by one."""
    driver = module.driver
    fn = module.function(function) if isinstance(function, str) else function
    grid3, block3 = _dims("grid", grid), _dims("block", block)
    prepared = prepare_args(fn.specs, args)
    if any(item.host_array is not None for item in prepared):
        raise ArgumentError("time_launches takes device arrays, not NumPy arrays",
                            hint="copy the inputs to the GPU once (DeviceArrays) and pass "
                                 "their device addresses")
    native = NativeParams(pack_params(fn.specs, [item.value for item in prepared]))
    opt_in_shared(driver, fn, shared_bytes)
    start = _call(driver, "cuEventCreate", driver.cuEventCreate(0))
    stop = _call(driver, "cuEventCreate", driver.cuEventCreate(0))
    times: list[float] = []
    try:
        for k in range(warmup + repeat):
            _call(driver, "cuEventRecord", driver.cuEventRecord(start, 0))
            _call(driver, f"cuLaunchKernel({fn.name})", driver.cuLaunchKernel(
                fn.handle, *grid3, *block3, shared_bytes, 0, native.kernel_params, 0))
            _call(driver, "cuEventRecord", driver.cuEventRecord(stop, 0))
            _call(driver, "cuEventSynchronize", driver.cuEventSynchronize(stop))
            if k >= warmup:
                ms = _call(driver, "cuEventElapsedTime", driver.cuEventElapsedTime(start, stop))
                times.append(float(np.float64(ms)) * 1e-3)
    finally:
        driver.cuEventDestroy(start)
        driver.cuEventDestroy(stop)
    return Timing(tuple(times))


__all__ = ["Timing", "time_launches"]
