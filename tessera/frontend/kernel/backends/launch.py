"""The user-facing backend calls: ``ts.launch`` and ``ts.aot.save`` / ``ts.aot.load``
(``ts.check_against_reference`` is in :mod:`tessera.frontend.kernel.backends.check`).

Backends of :func:`launch`:

* ``"interp"`` — the tile interpreter (the definition of meaning);
* ``"target"`` — the kernel lowered for ``target`` and run by the Target IR
  interpreter, on the CPU: what the emitted PTX means, bit for bit;
* ``"cuda"`` — the kernel assembled for the GPU's architecture and launched through
  the CUDA driver API (raises :class:`~tessera.backend.ptx.driver.GpuUnavailable` with
  the reason where there is no GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, user_api
from tessera.frontend.kernel.backends.compile import (
    CompiledKernel,
    compile_kernel,
    launch_result,
    run_compiled,
    target_arguments,
)

BACKENDS = ("interp", "target", "cuda")


def device_target() -> str:
    """The PTX target of GPU 0: sm_90a on Hopper (its arch-specific wgmma and TMA), sm_86
    and sm_89 on those Ampere and Ada parts (sm_89's fp8 mma.sync), sm_80 on every other
    GPU from Ampere on (PTX for sm_80 runs on newer GPUs)."""
    from tessera.backend.ptx.driver.launch import device_compute_capability

    major, minor = device_compute_capability()
    if (major, minor) == (9, 0):
        return "sm_90a"
    if (major, minor) in ((8, 6), (8, 9)):
        return f"sm_{major}{minor}"
    if major >= 8:
        return "sm_80"
    raise ArgumentError(f"compute capability {major}.{minor} is below sm_80",
                        hint="Tessera's PTX backend targets sm_80, sm_86, sm_89 and sm_90a")


@dataclass
class DeviceLaunch:
    """A compiled kernel loaded on GPU 0 with its arguments copied there (made by
    :func:`on_device`): :meth:`run` launches it once, :meth:`time` times launches."""

    module: Any
    function: Any
    grid: tuple[int, int, int]
    block: int
    values: list[Any]
    prep: Any
    out: Any
    shared_bytes: int = 0  # dynamic shared memory per CTA

    def run(self) -> None:
        """Launch once and wait."""
        self.module.launch(self.function, self.grid, self.block, self.shared_bytes,
                           self.values)

    def time(self, *, repeat: int = 20, warmup: int = 3) -> Any:
        """A :class:`~tessera.backend.ptx.driver.timing.Timing` of ``repeat`` launches."""
        from tessera.backend.ptx.driver.timing import time_launches

        return time_launches(self.module, self.function, self.grid, self.block, self.values,
                             repeat=repeat, warmup=warmup, shared_bytes=self.shared_bytes)


@contextlib.contextmanager
def on_device(compiled: CompiledKernel, kernel: Any, args: tuple[Any, ...],
              launch_kw: dict[str, Any]) -> Iterator[DeviceLaunch]:
    """Load ``compiled`` on GPU 0 (assembled for its architecture) and copy ``args``
    there; on a normal exit the arrays are copied back into the caller's."""
    from tessera.backend.ptx.driver.launch import CudaModule, DeviceArrays, device_arch

    prep, _ = kernel.specialise(tuple(args), dict(launch_kw))
    targs, out = target_arguments(compiled, prep.runtime)
    cubin = compiled.assemble(arch=device_arch(compiled.target)).cubin
    with CudaModule(cubin) as module:
        fn = module.function(compiled.name, compiled.signature)
        staged = [a for a in targs if isinstance(a, np.ndarray)]
        with DeviceArrays(module.driver, staged) as dev:
            yield DeviceLaunch(module, fn, compiled.grid, compiled.block, dev.values(targs),
                               prep, out, compiled.shared_bytes)


def _run_cuda(compiled: CompiledKernel, kernel: Any, args: tuple[Any, ...],
              launch_kw: dict[str, Any]) -> Any:
    with on_device(compiled, kernel, args, launch_kw) as device:
        device.run()
    return launch_result(compiled, device.prep, device.out)


@user_api
def launch(kernel: Any, grid: Any, args: tuple[Any, ...] | list[Any], *,
           backend: str = "cuda", target: str | None = None, mode: str | None = None,
           tensor_cores: str = "exact", **launch_kw: Any) -> Any:
    """Launch ``kernel`` over ``grid`` on ``args`` with one backend (see the module doc);
    arrays are updated in place and the kernel's result is returned. ``mode`` (default:
    the kernel's) is the tile interpreter's mode, or the math of the compiled kernel
    (``"fast"``: approximate instructions, see :func:`compile_kernel`).
    ``tensor_cores="hopper"`` (backend ``"target"`` only) gives the interpreter's
    ``mma``/``wgmma`` an H100/H200's truncating accumulation, predicting its bits."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown backend {backend!r}", hint=f"use one of {BACKENDS}")
    if tensor_cores != "exact" and backend != "target":
        raise ArgumentError(f"tensor_cores={tensor_cores!r} is a model of the Target IR "
                            f"interpreter, not of backend {backend!r}",
                            hint="use backend='target' with it")
    if grid is not None:
        launch_kw["grid"] = grid
    if backend == "interp":
        return kernel(*args, mode=mode, **launch_kw)
    if backend == "cuda":
        from tessera.backend.ptx.driver import GpuUnavailable, cuda_available

        ok, why = cuda_available()
        if not ok:
            raise GpuUnavailable(f"no CUDA GPU: {why}",
                                 hint="use backend='target' to run the lowered kernel on the CPU")
        compiled = compile_kernel(kernel, *args, target=target or device_target(), mode=mode,
                                  **launch_kw)
        return _run_cuda(compiled, kernel, tuple(args), launch_kw)
    compiled = target_compiled(kernel, tuple(args), target, mode, launch_kw)
    return run_compiled(compiled, kernel, *args, tensor_cores=tensor_cores, **launch_kw)


def target_compiled(kernel: Any, args: tuple[Any, ...], target: str | None,
                    mode: str | None, launch_kw: dict[str, Any]) -> CompiledKernel:
    """``kernel`` compiled as the Target IR backend runs it (for sm_90a unless
    ``target`` names another)."""
    return compile_kernel(kernel, *args, target=target or "sm_90a", mode=mode, **launch_kw)


class _Aot:
    """``ts.aot``: ahead-of-time bundles of a kernel's PTX for several targets."""

    @staticmethod
    @user_api
    def save(kernel: Any, path: str | Path, *args: Any, targets: tuple[str, ...] = ("sm_90a",),
             assemble: bool = True, **launch_kw: Any) -> Path:
        """Compile ``kernel`` (specialised on these example arguments) for ``targets``
        and write a bundle directory; returns the manifest's path."""
        from tessera.backend.ptx.driver.aot import save

        compiled = [compile_kernel(kernel, *args, target=t, **launch_kw) for t in targets]
        first = compiled[0]
        shared = {c.shared_bytes for c in compiled}
        if len(shared) > 1:  # one manifest entry serves every target's image
            raise ArgumentError(
                f"kernel '{first.name}' needs different dynamic shared memory per target "
                f"({', '.join(f'{c.target}: {c.shared_bytes}' for c in compiled)})",
                hint="save one bundle per target")
        return save(path, first.name, {c.target: c.ptx for c in compiled},
                    signature=first.signature, specialization=first.specialization,
                    assemble=assemble, grid=list(first.grid), block=[first.block, 1, 1],
                    shared_bytes=first.shared_bytes)

    @staticmethod
    def load(path: str | Path) -> Any:
        """Read and verify a bundle (see :func:`tessera.backend.ptx.driver.aot.load`)."""
        from tessera.backend.ptx.driver.aot import load

        return load(path)


aot = _Aot()

__all__ = ["BACKENDS", "DeviceLaunch", "aot", "device_target", "launch", "on_device"]
