"""The user-facing backend calls: ``ts.launch``, ``ts.check_against_reference`` and
``ts.aot.save`` / ``ts.aot.load``.

Backends of :func:`launch`:

* ``"interp"`` — the tile interpreter (the definition of meaning);
* ``"target"`` — the kernel lowered for ``target`` and run by the Target IR
  interpreter, on the CPU: what the emitted PTX means, bit for bit;
* ``"cuda"`` — the kernel assembled for the GPU's architecture and launched through
  the CUDA driver API (raises :class:`~tessera.backend.ptx.driver.GpuUnavailable` with
  the reason where there is no GPU).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, InterpretError, user_api
from tessera.frontend.kernel.backends.compile import (
    CompiledKernel,
    compile_kernel,
    launch_result,
    run_compiled,
    target_arguments,
)

BACKENDS = ("interp", "target", "cuda")


def device_target() -> str:
    """The PTX target of GPU 0: sm_90a on Hopper, sm_80 on Ampere and Ada."""
    from tessera.backend.ptx.driver.launch import device_compute_capability

    major, _ = device_compute_capability()
    if major >= 9:
        return "sm_90a"
    if major == 8:
        return "sm_80"
    raise ArgumentError(f"compute capability {major}.x is below sm_80",
                        hint="Tessera's PTX backend targets sm_80 and sm_90a")


def _run_cuda(compiled: CompiledKernel, kernel: Any, args: tuple[Any, ...],
              launch_kw: dict[str, Any]) -> Any:
    from tessera.backend.ptx.driver.launch import CudaModule, DeviceArrays
    from tessera.backend.ptx.driver.tensormap import encode

    prep, _ = kernel.specialise(tuple(args), dict(launch_kw))
    targs, out = target_arguments(compiled, prep.runtime)
    cubin = compiled.assemble().cubin
    with CudaModule(cubin) as module:
        fn = module.function(compiled.name, compiled.signature)
        staged = [a for a in targs if isinstance(a, np.ndarray)]
        with DeviceArrays(module.driver, staged) as dev:
            values = []
            for a in targs:
                if isinstance(a, np.ndarray):
                    values.append(dev.pointer(a))
                elif hasattr(a, "box"):  # a TensorMapArg: encode over the device copy
                    values.append(encode(a.tensor_map(dev.pointer(a.array))))
                else:
                    values.append(a)
            module.launch(fn, compiled.grid, compiled.block, 0, values)
    return launch_result(compiled, prep, out)


@user_api
def launch(kernel: Any, grid: Any, args: tuple[Any, ...] | list[Any], *,
           backend: str = "cuda", target: str | None = None, **launch_kw: Any) -> Any:
    """Launch ``kernel`` over ``grid`` on ``args`` with one backend (see the module doc);
    arrays are updated in place and the kernel's result is returned."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown backend {backend!r}", hint=f"use one of {BACKENDS}")
    if grid is not None:
        launch_kw["grid"] = grid
    if backend == "interp":
        return kernel(*args, **launch_kw)
    if backend == "cuda":
        from tessera.backend.ptx.driver import GpuUnavailable, cuda_available

        ok, why = cuda_available()
        if not ok:
            raise GpuUnavailable(f"no CUDA GPU: {why}",
                                 hint="use backend='target' to run the lowered kernel on the CPU")
        compiled = compile_kernel(kernel, *args, target=target or device_target(), **launch_kw)
        return _run_cuda(compiled, kernel, tuple(args), launch_kw)
    compiled = compile_kernel(kernel, *args, target=target or "sm_90a", **launch_kw)
    return run_compiled(compiled, kernel, *args, **launch_kw)


def _outputs(args: tuple[Any, ...], result: Any) -> list[np.ndarray]:
    """The arrays a launch may write, then its result when it is a fresh array."""
    outs = [a for a in args if isinstance(a, np.ndarray) and a.flags.writeable]
    if result is not None and not any(result is a for a in args):
        outs.append(np.atleast_1d(np.asarray(result)))
    return outs


def longest_reduction(fn: Any) -> int:
    """The most terms any output element of a tile kernel sums: an ``mma``'s K times
    the trip counts of the loops around it (``acc = mma(a, b, acc)`` in a K loop), or
    a row reduction's length."""
    from tessera.ir.dialects import tile as tile_ir
    from tessera.ir.dialects.tile import compute as tile_compute

    consts: dict[Any, int] = {}
    best = 1

    def walk(block: Any, trips: int) -> None:
        nonlocal best
        for instr in block.instrs:
            op = instr.op
            if isinstance(op, tile_ir.Constant) and isinstance(op.value, int):
                consts[instr.results[0]] = op.value
            elif isinstance(op, tile_compute.Mma):
                best = max(best, instr.operands[0].type.shape[-1] * trips)
            elif isinstance(op, tile_compute.Reduce):
                best = max(best, instr.operands[0].type.shape[op.axis])
            inner = trips
            if isinstance(op, tile_ir.For):
                lo, hi, step = (consts.get(v) for v in instr.operands[:3])
                inner = trips * (len(range(lo, hi, step)) if None not in (lo, hi, step) else 1)
            for region in instr.regions:
                walk(region.block, inner)

    walk(fn.body, 1)
    return best


def tolerance(kernel: Any, reference: np.ndarray, args: tuple[Any, ...],
              launch_kw: dict[str, Any]) -> np.ndarray:
    """Elementwise tolerance of a GPU result against the interpreter's: one rounding
    of the output format plus f32 accumulation over the kernel's longest reduction
    (``gamma_K = K u / (1 - K u)``, Higham sec. 3.1, scaled by ``|reference| + 1``
    since the products' magnitudes are not known here)."""
    module = kernel.compile(*args, **launch_kw)
    k = longest_reduction(module.functions[kernel.name])
    finfo = np.finfo(reference.dtype) if reference.dtype.kind == "f" else None
    u_out = float(finfo.eps) / 2 if finfo is not None else 0.0
    u = 2.0 ** -24
    gamma = k * u / (1 - k * u)
    ref = np.abs(reference.astype(np.float64))
    return u_out * ref + gamma * (ref + 1.0)


@user_api
def check_against_reference(kernel: Any, *args: Any, backend: str = "cuda",
                            target: str | None = None, **launch_kw: Any) -> None:
    """Run ``kernel`` on a backend and on the tile interpreter, each on its own copy of
    the arguments, and compare every output: bit for bit for ``backend="target"`` (the
    lowering must not change a bit), within :func:`tolerance` for ``"cuda"``. Raises
    ``InterpretError`` naming the first output and element that differ."""
    if not (callable(kernel) and hasattr(kernel, "specialise")):
        raise ArgumentError(f"check_against_reference needs a @ts.kernel function, got "
                            f"{type(kernel).__name__}",
                            hint="pass the kernel first: check_against_reference(k, *args)")
    ref_args = copy.deepcopy(args)
    got_args = copy.deepcopy(args)
    ref = _outputs(ref_args, kernel(*ref_args, **launch_kw))
    got = _outputs(got_args, launch(kernel, launch_kw.pop("grid", None), got_args,
                                    backend=backend, target=target, **launch_kw))
    for k, (r, g) in enumerate(zip(ref, got)):
        if backend == "target":
            bad = r.view(np.uint8).reshape((*r.shape, -1)) != g.view(np.uint8).reshape(
                (*g.shape, -1))
            bad = bad.any(axis=-1)
        else:
            diff = np.abs(r.astype(np.float64) - g.astype(np.float64))
            bad = ~(diff <= tolerance(kernel, r, args, launch_kw))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InterpretError(f"output {k} of '{kernel.name}' differs from the "
                                 f"interpreter at {at}: {g[at]!r} instead of {r[at]!r} "
                                 f"({int(bad.sum())} elements differ, backend {backend})")


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
        return save(path, first.name, {c.target: c.ptx for c in compiled},
                    signature=first.signature, specialization=first.specialization,
                    assemble=assemble, grid=list(first.grid), block=[first.block, 1, 1],
                    shared_bytes=0)

    @staticmethod
    def load(path: str | Path) -> Any:
        """Read and verify a bundle (see :func:`tessera.backend.ptx.driver.aot.load`)."""
        from tessera.backend.ptx.driver.aot import load

        return load(path)


aot = _Aot()

__all__ = ["BACKENDS", "aot", "check_against_reference", "device_target", "launch",
           "longest_reduction", "tolerance"]
