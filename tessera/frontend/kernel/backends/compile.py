"""Kernel source -> Tile IR -> Target IR -> PTX: the backend's front door.

``compile_kernel(kernel, *args, target="sm_90a", **launch)`` specialises a
``@ts.kernel`` on example arguments (exactly as a launch would), lowers its Tile IR
for the target, checks the Target IR (the verifier and the ordering rules of
:mod:`tessera.ir.dialects.target.check`) and renders PTX with a map from PTX lines back to the
kernel's source lines, which :meth:`CompiledKernel.assemble` uses to report ptxas
errors at the user's line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tessera.errors import ArgumentError, Loc, user_api
from tessera.frontend.kernel import finish_launch
from tessera.frontend.kernel.tuning.bounds import refuse_out_of_bounds
from tessera.ir.core import Function
from tessera.ir.dialects.target import TARGETS, TensorMapType
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.verifier import verify_function


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel specialisation compiled for one target."""

    name: str
    target: str
    tile: Function
    kernel: Function
    ptx: str
    line_map: dict[int, Loc]
    specialization: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    #: "checked" (the tile interpreter's bits) or "fast" (approximate math)
    mode: str = "checked"

    @property
    def grid(self) -> tuple[int, int, int]:
        """CTAs along x (groups), y (batch) and z."""
        return tuple(int(g) for g in self.kernel.attrs["grid"])  # type: ignore[return-value]

    @property
    def block(self) -> int:
        """Threads per CTA."""
        return int(self.kernel.attrs["block"][0])

    @property
    def shared_bytes(self) -> int:
        """The dynamic shared memory (bytes) each launch must request: the kernel's
        buffers when they exceed the 48 KiB of static shared memory, else 0."""
        from tessera.lower.shared import shared_plan

        return shared_plan(self.kernel).dynamic_bytes

    @property
    def signature(self) -> list[tuple[str, str]]:
        """``(name, PTX parameter type)`` of each kernel parameter, in order."""
        out = []
        for k, p in enumerate(self.kernel.args):
            name = f"{self.name}_param_{k}"
            if isinstance(p.type, TensorMapType):
                out.append((name, ".align 64 .b8 [128]"))
            else:
                elem = p.type.elem  # type: ignore[attr-defined]
                out.append((name, f".{elem}"))
        return out

    def assemble(self, *, use_nvjitlink: bool = False, arch: str | None = None) -> Any:
        """Assemble with ptxas (statistics, advisories fail) or nvJitLink in process, for
        ``arch`` (default: the kernel's target; a newer one runs its PTX on a newer GPU)."""
        from tessera.backend.ptx.driver.assemble import assemble, assemble_nvjitlink

        arch = arch or self.target
        if use_nvjitlink:
            return assemble_nvjitlink(self.ptx, arch, line_map=self.line_map,
                                      kernel=self.name)
        return assemble(self.ptx, arch, line_map=self.line_map, kernel=self.name)


def lower_and_render(tile: Function, target: str, mode: str = "checked") -> tuple[
        Function, str, dict[int, Loc], dict[str, float]]:
    """Lower a specialised ``tile.kernel`` and render its PTX (timed per stage)."""
    from tessera.backend.ptx.render import render
    from tessera.ir.passes import collector_paused
    from tessera.lower.core import lower_kernel

    with collector_paused():
        t0 = time.perf_counter()
        kernel = lower_kernel(tile, target, mode)
        t1 = time.perf_counter()
        verify_function(kernel)
        check_kernel(kernel)
        t2 = time.perf_counter()
        ptx, line_map = render(kernel, line_map=True)  # type: ignore[misc]
        t3 = time.perf_counter()
    return kernel, ptx, line_map, {"lower": t1 - t0, "verify": t2 - t1, "render": t3 - t2}


def gpu_mode(kernel: Any, mode: str | None) -> str:
    """The math mode a kernel compiles in: ``mode`` if given, else the kernel's own
    (``@ts.kernel(mode="fast")``); ``"reference"`` compiles as ``"checked"`` (the same
    numerics)."""
    from tessera.frontend.kernel import MODES

    mode = mode or getattr(kernel, "mode", "checked")
    if mode not in MODES:
        raise ArgumentError(f"unknown kernel mode {mode!r}", hint=f"use one of {MODES}")
    return "fast" if mode == "fast" else "checked"


@user_api
def compile_kernel(kernel: Any, *args: Any, target: str = "sm_90a", mode: str | None = None,
                   **launch: Any) -> CompiledKernel:
    """Compile ``kernel`` for ``target`` as specialised by these example arguments and
    launch keywords (``grid``, ``group_size``, ``tile_shape``, ``config``). ``mode`` is
    the kernel's unless given: ``"fast"`` lowers ``exp``, ``log``, float division and
    ``row_sum`` to approximate f32 instructions (docs/ptx-backend.md, "Fast-math mode")."""
    if target not in TARGETS:
        raise ArgumentError(f"unknown PTX target {target!r}",
                            hint=f"use one of {', '.join(TARGETS)}")
    if not hasattr(kernel, "specialise"):
        raise ArgumentError(f"{kernel!r} is not a @ts.kernel",
                            hint="decorate the function with @ts.kernel")
    mode = gpu_mode(kernel, mode)
    t0 = time.perf_counter()
    _, module = kernel.specialise(tuple(args), dict(launch))
    tile = module.functions[kernel.name]
    refuse_out_of_bounds(tile)  # never PTX that would touch memory past a tensor
    t1 = time.perf_counter()
    lowered, ptx, line_map, seconds = lower_and_render(tile, target, mode)
    spec = {"target": target, "grid": list(tile.attrs.get("grid", ())),
            "group_size": tile.attrs.get("group_size", 1),
            "tile_shape": list(tile.attrs.get("tile_shape", ())),
            "batch": tile.attrs.get("batch", 0),
            "config": {k: v for k, v in tile.attrs.get("config", ())},
            "params": [str(a.type) for a in tile.args]}
    if mode == "fast":
        spec["mode"] = "fast"
    return CompiledKernel(kernel.name, target, tile, lowered, ptx, line_map, spec,
                          {"trace": t1 - t0, **seconds}, mode)


def target_arguments(compiled: CompiledKernel, runtime: list[Any]) -> tuple[list[Any], Any]:
    """The Target IR interpreter's arguments for a launch whose Tile IR arguments are
    ``runtime`` (the kernel's prepared arrays and scalars): the same arrays, the
    ``out`` array of a returned tile or scalar, and tensor maps over the arrays."""
    import numpy as np

    from tessera.interp.target import TensorMapArg
    from tessera.ir.dialects.tile import MemRefType
    from tessera.numerics import storage_of

    args: list[Any] = [v if isinstance(a.type, MemRefType) else np.asarray(v).reshape(-1)[0]
                       for a, v in zip(compiled.tile.args, runtime)]
    out = None
    attrs = compiled.tile.attrs
    for p in compiled.kernel.args[len(runtime):]:
        t = p.type
        if isinstance(t, TensorMapType):
            whole = np.asarray(runtime[t.arg])  # a batched tensor is (batch * rows, cols)
            args.append(TensorMapArg(whole.reshape(-1, whole.shape[-1]), t.elem, t.box,
                                     t.swizzle))
        else:  # the out parameter
            if "result_shape" in attrs:
                out = np.zeros(tuple(attrs["result_shape"]),
                               storage_of(attrs["result_element"]).np_dtype)
            else:
                ret = compiled.tile.body.terminator
                assert ret is not None
                out = np.zeros(1, storage_of(ret.operands[0].type.element).np_dtype)
            args.append(out)
    return args, out


@user_api
def run_compiled(compiled: CompiledKernel, kernel: Any, *args: Any,
                 tensor_cores: str = "exact", cta_order: str = "ascending",
                 **launch: Any) -> Any:
    """Run the compiled kernel's Target IR on these arguments with the Target IR
    interpreter (arrays updated in place, like a launch) under the tensor-core model
    ``tensor_cores`` (``"exact"`` or ``"hopper"``), the CTAs' atomics landing in
    ``cta_order`` (see ``run_target``); returns what a launch of the kernel returns."""
    from tessera.interp.target import run_target

    prep, _ = kernel.specialise(tuple(args), dict(launch))
    targs, out = target_arguments(compiled, prep.runtime)
    run_target(compiled.kernel, targs, tensor_cores=tensor_cores, cta_order=cta_order)
    return launch_result(compiled, prep, out)


def launch_result(compiled: CompiledKernel, prep: Any, out: Any) -> Any:
    """After a launch on ``target_arguments``: converted arrays written back to the
    caller's, and what a launch of the kernel returns (a tile, tile 0's scalar, or the
    caller's array of a returned parameter)."""
    if out is not None:
        return finish_launch(prep, out if "result_shape" in compiled.tile.attrs else out[0])
    ret = compiled.tile.body.terminator
    returned = ret.operands[0].hint if ret is not None and ret.operands else None
    return finish_launch(prep, None, returned=returned)


__all__ = ["CompiledKernel", "compile_kernel", "gpu_mode", "launch_result", "lower_and_render",
           "run_compiled", "target_arguments"]
