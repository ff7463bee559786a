"""``ts.ptx`` runs against the GPU: every PTX kernel the CPU runs without a fault also
runs on the device, from the same text, and must give the same bits.

Installed by ``tests/frontend/ptx/conftest.py`` when ``TESSERA_GPU_CROSSCHECK=1``
(``make gpu-check``, which also cross-checks the structured interpreter) or
``TESSERA_PTX_CROSSCHECK=1`` (this check alone). The PTX is assembled with ptxas
for the device's architecture (``sm_80`` PTX runs on later GPUs so). Integer outputs
and those of exactly rounded float instructions must agree bit for bit; arrays that a
kernel computes with ``mma``/``wgmma`` (whose internal precision hardware does not
specify) or approximate instructions are compared within ``rtol``, listed per kernel;
on a Hopper GPU a kernel run under the exact convention whose tensor-core steps the
measured model covers is run again under it (``tensor_cores="hopper"``) and compared
bit for bit, and steps it does not cover are compared within :data:`UNMODELLED`.
Atomics return old values in an order the GPU does not fix: the arguments of
``UNORDERED`` are compared as multisets. Kernels with module variables run on the CPU
only (the GPU side would need ``cuModuleGetGlobal``), and so do launches that carry
device addresses inside their arguments (structs, pointers into arrays, ``buffers=``)
or texture objects (the GPU side would need ``cuTexObjectCreate``).
This module holds no tests.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from typing import Any

import numpy as np

from tessera.arch import mma_hopper

#: relative tolerance of tensor-core steps the Hopper model does not cover (tf32
#: mma.sync, e5m2): an f32 ulp or two of truncation per step
UNMODELLED = 1e-5
#: kernel -> arguments holding atomics' old values (equal as multisets)
UNORDERED = {"ptx_ops": (3,)}
#: kernels whose float results may differ from the interpreter's in the last bits
APPROXIMATE = {"mma_tile": 1e-5, "matmul_kernel": 1e-5, "wmma_tile": 1e-5, "wmma": 1e-5,
               "gemm": 1e-5,
               "double_buffered_gemm": 1e-5,
               "flash_attention": 2.0 ** -7, "row_softmax": 1e-6,
               # the math library seeds with rsqrt.approx, ex2.approx, rcp.approx.f64
               "math_f32": 1e-6, "math_f64": 1e-14}
#: kernels whose results hang on more than the tensor cores (approximate instructions,
#: float atomics in the GPU's arrival order): within their tolerance even where the
#: Hopper model predicts the tensor-core steps
INEXACT = {"softmax_kernel": 2.0 ** -10, "layer_norm_kernel": 2.0 ** -7,
           "attn_fwd_causal": 2.0 ** -7, "attn_fwd_tma": 2.0 ** -7, "attn_fwd_ws": 2.0 ** -7,
           "matmul_splitk": 1e-4}


def _gpu_run(kernel: Any, grid: Any, block: Any, args: list[Any], shared_bytes: int,
             cooperative: bool = False) -> None:
    from tessera.arch.tma import row_major_2d
    from tessera.backend.ptx.driver.assemble import assemble
    from tessera.backend.ptx.driver.launch import CudaModule, DeviceArrays, device_arch
    from tessera.backend.ptx.driver.tensormap import encode
    from tessera.frontend.ptx.api import TensorMapArgument, _dims

    text = kernel.program.module.text
    arch = device_arch("sm_90a" if "sm_90a" in kernel.ir.target else "sm_80")
    arrays = [a.array if isinstance(a, TensorMapArgument) else a for a in args]
    staged = [a for a in arrays if isinstance(a, np.ndarray) and a.ndim]
    try:
        image: Any = assemble(text, arch).cubin
    except Exception:  # no ptxas here: the driver compiles the PTX itself
        image = text
    with CudaModule(image) as module:
        fn = module.function(kernel.name, [(p.name, f".align {p.align} .b8 [{p.array}]"
                                            if p.array else f".{p.type}")
                                           for p in kernel.params])
        with DeviceArrays(module.driver, staged) as dev:
            values = [encode(row_major_2d(a.elem, dev.pointer(a.array), a.array.shape,
                                          a.box, a.swizzle))
                      if isinstance(a, TensorMapArgument) else
                      dev.pointer(a) if isinstance(a, np.ndarray) and a.ndim else a
                      for a in args]
            module.launch(fn, _dims(grid, "grid"), _dims(block, "block"), shared_bytes, values,
                          cooperative)


def install() -> None:
    """Route every ``PtxKernel.run`` through the GPU as well."""
    from tessera.frontend.ptx import api

    original = api.PtxKernel.run
    if getattr(original, "crosschecked", False):
        return

    @functools.wraps(original)
    def run(self: Any, grid: Any = 1, block: Any = 1, args: Any = (), shared_bytes: int = 0,
            check_races: bool = True, **kw: Any) -> None:
        from tessera.errors import TesseraError, user_location
        from tessera.frontend.kernel.backends.launch import device_target

        before = copy.deepcopy(list(args))
        try:
            original(self, grid, block, args, shared_bytes, check_races, **kw)  # a fault stops
        except TesseraError as err:
            if err.loc.file == __file__:  # located at this wrapper: the caller's line
                raise err.relocated(user_location(2)) from None
            raise
        if self.ir.globals or kw.get("buffers") or kw.get("textures") or any(
                isinstance(a, (bytes, api.Struct, api.DevicePointer, api.TextureArgument))
                for a in args):
            return  # device addresses or texture objects: the GPU side would need them
        steps = _tensor_core_steps(self.ir)
        pristine = copy.deepcopy(before)
        _gpu_run(self, grid, block, before, shared_bytes, kw.get("cooperative", False))
        tol = APPROXIMATE.get(self.name)
        record = {"kernel": self.name, "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
        if steps and device_target() == "sm_90a" and mma_hopper.covers(steps) and \
                kw.get("tensor_cores", "exact") == "exact":
            # the hardware's own sums: the CPU runs again under the measured model
            original(self, grid, block, pristine, shared_bytes, check_races,
                     **{**kw, "tensor_cores": "hopper"})
            args, tol, record["model"] = pristine, None, "hopper"
        elif steps and not mma_hopper.covers(steps):
            tol = tol or UNMODELLED
        tol = INEXACT.get(self.name, tol)
        bitwise = True
        for k, (want, got) in enumerate(zip(args, before)):
            want = getattr(want, "array", want)
            got = getattr(got, "array", got)
            if not isinstance(want, np.ndarray) or not want.ndim:
                continue
            if k in UNORDERED.get(self.name, ()):
                want, got = np.sort(want, axis=None), np.sort(got, axis=None)
            same = np.array_equal(np.ascontiguousarray(want).view(np.uint8),
                                  np.ascontiguousarray(got).view(np.uint8))
            bitwise &= same
            if not same and tol is not None:
                same = np.allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol)
            if not same:
                bad = np.flatnonzero(np.ascontiguousarray(want).reshape(-1) !=
                                     np.ascontiguousarray(got).reshape(-1))
                record.update(status="differs", argument=k, count=len(bad))
                _log(record)
                raise AssertionError(f"PTX kernel {self.name!r}, argument {k}: {len(bad)} "
                                     f"elements differ from the GPU; first at {bad[:1]}: "
                                     f"GPU {got.reshape(-1)[bad[0]]!r}, CPU "
                                     f"{want.reshape(-1)[bad[0]]!r}")
        record["status"] = "same" if bitwise else f"within {tol}"
        _log(record)

    run.crosschecked = True  # type: ignore[attr-defined]
    api.PtxKernel.run = run  # type: ignore[method-assign]


def _tensor_core_steps(kernel: Any) -> list[tuple[bool, str, str]]:
    """The tensor-core steps of a PTX kernel (``tensor_core_steps`` of its instructions)."""
    from tessera.frontend.kernel.backends.check import tensor_core_steps

    return tensor_core_steps(instr for block in kernel.blocks for ptx in block.body
                             for instr in ptx.instrs)


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get("TESSERA_CROSSCHECK_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
