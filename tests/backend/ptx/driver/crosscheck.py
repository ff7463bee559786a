"""The Target IR interpreter against the GPU: every kernel it runs also runs on the device.

Loaded by ``tests/conftest.py`` when ``TESSERA_GPU_CROSSCHECK=1`` (``make gpu-check``).
It wraps :func:`tessera.interp.target.runner.run_target`: a kernel the interpreter runs
without a fault is rendered to PTX, assembled for the device (a ``sm_80`` kernel for the
device's own architecture, since PTX is forward compatible and a cubin is not), launched
on copies of the same arguments, and every array argument must come back with the
interpreter's bits. The interpreter claims to be PTX's meaning bit for bit; this is the
check of that claim on hardware. Tensor-core steps are compared under the model of
the hardware's own accumulation (``tensor_cores="hopper"``, measured on an H200) when
the kernel's formats are modelled: the interpreter runs the kernel again under it, and
the record says ``"model": "hopper"``. A kernel the interpreter faults on never reaches
the GPU; a fast-mode kernel (approximate instructions) runs there but its bits are not
compared. A difference where the interpreter makes no claim (a kernel run with its race
check off, float atomics or atomics' returned values, whose order is the hardware's,
and tensor-core steps the Hopper model does not cover) is recorded under that reason
instead of failing the test. Each comparison is appended to ``$TESSERA_CROSSCHECK_LOG``
as one JSON line.
This module holds no tests.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_CUBINS: dict[tuple[str, str], bytes] = {}
#: the kernel whose launch left this process's CUDA context unusable (an illegal
#: address is sticky: every later call fails), after which nothing more is launched
_LOST: list[str] = []


def _cubin(ptx: str, arch: str) -> bytes:
    from tessera.backend.ptx.driver.assemble import assemble

    key = (hashlib.sha256(ptx.encode()).hexdigest(), arch)
    if key not in _CUBINS:
        _CUBINS[key] = assemble(ptx, arch).cubin
    return _CUBINS[key]


def copy_args(args: Sequence[Any]) -> list[Any]:
    """A deep copy of kernel arguments in which arrays that share memory still do: a
    tensor map's array is often a reshape of a plain argument, and a kernel that
    stores through the map must be seen to write that argument."""
    from tessera.interp.target.runner import TensorMapArg

    roots: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def copied(a: np.ndarray) -> np.ndarray:
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not root.flags.c_contiguous:
            return a.copy()
        old, new = roots.setdefault(id(root), (root, root.copy()))
        return np.ndarray(a.shape, a.dtype, buffer=new, strides=a.strides,
                          offset=a.ctypes.data - old.ctypes.data)

    return [copied(a) if isinstance(a, np.ndarray)
            else TensorMapArg(copied(a.array), a.elem, a.box, a.swizzle)
            if isinstance(a, TensorMapArg) else copy.deepcopy(a) for a in args]


def run_on_gpu(fn: Any, args: Sequence[Any], grid: Sequence[int] | None,
               block: Sequence[int] | None) -> list[Any]:
    """Launch the ``ptx.kernel`` ``fn`` on copies of ``args``; the copies, after the run."""
    from tessera.backend.ptx.driver.launch import CudaModule, DeviceArrays, device_arch
    from tessera.backend.ptx.driver.params import entry_signature
    from tessera.backend.ptx.render import render
    from tessera.interp.target.runner import TensorMapArg, _geometry
    from tessera.lower.shared import shared_plan

    ptx = render(fn)
    work = copy_args(args)
    arrays = [a.array if isinstance(a, TensorMapArg) else a for a in work]
    staged: list[np.ndarray] = []  # plain arguments first: a tensor map's view of one
    for a in sorted((a for a in arrays if isinstance(a, np.ndarray)),  # resolves to it
                    key=lambda a: any(a is t.array for t in work if isinstance(t, TensorMapArg))):
        if not any(np.shares_memory(a, s) for s in staged):
            staged.append(a)
    g = _geometry(grid, fn.attrs.get("grid"), "grid")
    b = _geometry(block, fn.attrs.get("block"), "block")
    with CudaModule(_cubin(ptx, device_arch(fn.attrs.get("target", "sm_80")))) as module:
        kernel = module.function(fn.name, entry_signature(ptx, fn.name))
        with DeviceArrays(module.driver, staged) as dev:
            module.launch(kernel, g, b, shared_plan(fn).dynamic_bytes, dev.values(work))
    return arrays


def _first_difference(want: np.ndarray, got: np.ndarray) -> str | None:
    w = np.ascontiguousarray(want).view(np.uint8).reshape((*want.shape, -1))
    g = np.ascontiguousarray(got).view(np.uint8).reshape((*got.shape, -1))
    bad = (w != g).any(axis=-1)
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    # the bits too: NaN encodings and last-bit differences print alike as values
    bits = [bytes(x[at])[::-1].hex() for x in (g, w)]  # most significant byte first
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {at}: "
            f"GPU {got[at]!r} (0x{bits[0]}), interpreter {want[at]!r} (0x{bits[1]})")


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get("TESSERA_CROSSCHECK_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _save(fn: Any, before: Sequence[Any], got: Sequence[Any]) -> str | None:
    """Write a kernel's array arguments before the run and the GPU's after it beside
    the log (``in<k>`` and ``gpu<k>``); the file's name, or None without a log."""
    from tessera.interp.target.runner import TensorMapArg

    path = os.environ.get("TESSERA_CROSSCHECK_LOG")
    if not path:
        return None
    arrays = {}
    for k, (a, g) in enumerate(zip(before, got)):
        a = a.array if isinstance(a, TensorMapArg) else a
        if isinstance(a, np.ndarray):  # raw bits: ml_dtypes formats do not round-trip
            arrays[f"in{k}"] = np.ascontiguousarray(a).view(np.uint8)
            arrays[f"gpu{k}"] = np.ascontiguousarray(g).view(np.uint8)
            arrays[f"dtype{k}"] = np.array(str(a.dtype))
    name = f"{path}.{fn.name}.{fn.attrs.get('target')}.{os.getpid()}.{time.time_ns()}.npz"
    np.savez_compressed(name, **arrays)
    return os.path.basename(name)


def _hopper_modelled(fn: Any) -> bool:
    """Whether the GPU is a Hopper and its measured accumulation covers every
    tensor-core step of ``fn``."""
    from tessera.backend.ptx.driver.launch import device_compute_capability
    from tessera.frontend.kernel.backends.check import hopper_modelled

    return hopper_modelled(fn) and device_compute_capability()[0] == 9


def _unclaimed(fn: Any, kw: dict[str, Any]) -> str | None:
    """Why the interpreter's bits are not a claim about the GPU's for ``fn``, or None:
    the kernel ran with its race check off (a racy kernel's bits are the schedule's),
    its float atomics or atomics' returned values follow the hardware's order (the
    interpreter applies them in thread order), or its tensor-core steps are of a kind
    whose hardware accumulation is not modelled (tf32 and e4m3 ``mma.sync``, e5m2)."""
    from tessera.ir.core import walk

    if not kw.get("check_races", True):
        return "racy"
    ops = [instr.op for instr in walk(fn.body)]
    if any(op.name == "ptx.atom" or (op.name == "ptx.red" and op.type[0] in "fb")
           for op in ops):
        return "unordered"
    if any(hasattr(op, "atype") for op in ops) and not _hopper_modelled(fn):
        return "unmodelled"
    return None


def crosschecked(run_target: Callable[..., None]) -> Callable[..., None]:
    """``run_target`` that also runs each kernel on the GPU and compares the bits."""
    from tessera.interp.target.runner import TensorMapArg

    @functools.wraps(run_target)
    def run(fn: Any, args: Sequence[Any], *, grid: Sequence[int] | None = None,
            block: Sequence[int] | None = None, **kw: Any) -> None:
        before = copy_args(args)
        run_target(fn, args, grid=grid, block=block, **kw)  # a fault stops here
        record: dict[str, Any] = {"kernel": fn.name, "target": fn.attrs.get("target"),
                                  "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                                  "pid": os.getpid()}
        if _LOST:
            record.update(status="not run", error=f"context lost at {_LOST[0]}")
            _log(record)
            return
        t0 = time.perf_counter()
        try:
            got = run_on_gpu(fn, before, grid, block)
        except Exception as exc:  # recorded, then failed: the test names the kernel
            record.update(status="error", error=f"{type(exc).__name__}: {exc}"[:2000])
            _log(record)
            if "ILLEGAL" in str(exc) or "LAUNCH_FAILED" in str(exc):
                _LOST.append(f"{fn.name} ({fn.attrs.get('target')})")
            raise AssertionError(f"kernel {fn.name!r} did not run on the GPU: {exc}") from exc
        record["seconds"] = round(time.perf_counter() - t0, 4)
        if fn.attrs.get("mode") == "fast":  # .approx bits are the hardware's: ran, not
            record["status"] = "approximate"  # compared (tests/lower/test_fast_math.py
            _log(record)  # checks the results against their bound on the GPU)
            return
        after = [a.array if isinstance(a, TensorMapArg) else a for a in args]
        if _hopper_modelled(fn) and kw.get("tensor_cores", "exact") == "exact":
            hopper = copy_args(before)
            run_target(fn, hopper, grid=grid, block=block,
                       **{**kw, "tensor_cores": "hopper"})
            after = [a.array if isinstance(a, TensorMapArg) else a for a in hopper]
            record["model"] = "hopper"
        for k, (want, have) in enumerate(zip(after, got)):
            if isinstance(want, np.ndarray):
                diff = _first_difference(want, have)
                if diff is not None:
                    why = _unclaimed(fn, kw)
                    record.update(status=why or "differs", argument=k, detail=diff)
                    if why == "unmodelled":  # the operands and the GPU's bits, to fit
                        record["saved"] = _save(fn, before, got)
                    _log(record)
                    if why:  # recorded and summarised, not a failure of the claim
                        return
                    raise AssertionError(f"kernel {fn.name!r} ({fn.attrs.get('target')}), "
                                         f"argument {k}: {diff}")
        record["status"] = "same"
        _log(record)

    return run


def install() -> None:
    """Route every Target IR interpreter run through :func:`crosschecked`."""
    from tessera.interp import target as target_pkg
    from tessera.interp.target import runner

    wrapped = crosschecked(runner.run_target)
    runner.run_target = wrapped  # type: ignore[assignment]
    target_pkg.__dict__["run_target"] = wrapped


def summary(path: str) -> str:
    """A readable account of a crosscheck log: kernels compared per target and status,
    then every kernel that differed or did not run."""
    from collections import Counter

    records = [json.loads(line) for line in open(path) if line.strip()]
    # records of ts.ptx kernels (tests/frontend/ptx/gpu_crosscheck.py) name no target
    counts = Counter((r.get("target") or "ts.ptx text",
                      r["status"] + (" (hopper model)" if "model" in r else ""))
                     for r in records)
    lines = [f"{len(records)} Target IR interpreter runs also ran on the GPU"]
    lines += [f"  {target}: {n} {status}" for (target, status), n in sorted(counts.items())]
    kernels = Counter((r["kernel"], r.get("target")) for r in records if r["status"] == "same")
    lines.append(f"  {len(kernels)} distinct kernels gave the interpreter's bits")
    for r in records:
        if r["status"] not in ("same", "not run"):
            model = " under the hopper model" if "model" in r else ""
            lines.append(f"  {r['status']}{model}: {r['kernel']} ({r.get('target')}) in "
                         f"{r['test']}: "
                         f"{r.get('detail') or r.get('error')}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(summary(sys.argv[1]))
