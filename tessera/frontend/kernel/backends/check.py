"""``ts.check_against_reference``: a backend's results against the tile simulator's.

The tile simulator is the definition of a kernel's meaning. The Target IR interpreter
must agree with it bit for bit (the lowering must not change a bit), NaN payloads aside:
a NaN matches a NaN, since the tile simulator keeps NumPy's NaN bits and the Target IR
interpreter the canonical NaN a GPU writes. A GPU may differ
by its accumulation: on a Hopper GPU, a kernel whose tensor-core steps the measured model
covers (bf16, f16, e4m3: :mod:`tessera.arch.mma_hopper`) must give the bits the Target IR
interpreter predicts under that model; other GPU results are compared within
:func:`tolerance`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, InterpretError, user_api
from tessera.frontend.kernel.backends.compile import compile_kernel, gpu_mode, run_compiled
from tessera.frontend.kernel.backends.fast_bounds import fast_tolerance, within_fast_bound
from tessera.frontend.kernel.backends.launch import launch, target_compiled


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


def _fp8_mma(fn: Any) -> bool:
    """Whether a tile kernel multiplies fp8 tiles with ``tile.mma``."""
    from tessera.ir.core import walk
    from tessera.ir.dialects.tile import compute as tile_compute

    return any(isinstance(instr.op, tile_compute.Mma)
               and "fp8" in str(instr.operands[0].type.element) for instr in walk(fn.body))


def tolerance(kernel: Any, reference: np.ndarray, args: tuple[Any, ...],
              launch_kw: dict[str, Any]) -> np.ndarray:
    """Elementwise tolerance of a GPU result against the interpreter's: one unit in the
    last place of the output format (both results are rounded, from slightly different
    sums) plus f32 accumulation over the kernel's longest reduction (``gamma_K = K u /
    (1 - K u)``, Higham sec. 3.1, scaled by ``|reference| + 1`` since the products'
    magnitudes are not known here). fp8 tensor-core steps keep fewer bits (the
    DeepSeek-V3 technical report, 2024, sec. 3.3.2, found about 14 on H800): on an H200
    one 32-product step erred by up to ``2**-11`` of the sum of its product magnitudes,
    and up to ``1.3e-3 (|reference| + 1)`` on standard-normal operands, so fp8 kernels
    take ``u = 2**-9`` per step instead."""
    module = kernel.compile(*args, **launch_kw)
    fn = module.functions[kernel.name]
    k = longest_reduction(fn)
    finfo = np.finfo(reference.dtype) if reference.dtype.kind == "f" else None
    u_out = float(finfo.eps) if finfo is not None else 0.0
    u = 2.0 ** -24
    if _fp8_mma(fn):
        k, u = -(-k // 32), 2.0 ** -9
    gamma = k * u / (1 - k * u)
    ref = np.abs(reference.astype(np.float64))
    return u_out * ref + gamma * (ref + 1.0)


@user_api
def check_against_reference(kernel: Any, *args: Any, backend: str = "cuda",
                            target: str | None = None, bitwise: bool | None = None,
                            mode: str | None = None, **launch_kw: Any) -> None:
    """Run ``kernel`` on a backend and on the tile interpreter, each on its own copy of
    the arguments, and compare every output: bit for bit for ``backend="target"`` (the
    lowering must not change a bit; a NaN matches any NaN), within :func:`tolerance`
    for ``"cuda"`` unless ``bitwise=True`` (Tessera's own PTX promises the interpreter's
    bits on a GPU too).
    On a Hopper GPU, a kernel whose tensor-core steps the measured model covers is
    compared bit for bit with the Target IR interpreter under that model instead.
    A kernel compiled in fast mode (``mode="fast"``, or a kernel declared so) is
    compared with the tile interpreter's *checked* result within
    :func:`~tessera.frontend.kernel.backends.fast_bounds.fast_tolerance`.
    Raises ``InterpretError`` naming the first output and element that differ."""
    if not (callable(kernel) and hasattr(kernel, "specialise")):
        raise ArgumentError(f"check_against_reference needs a @ts.kernel function, got "
                            f"{type(kernel).__name__}",
                            hint="pass the kernel first: check_against_reference(k, *args)")
    if bitwise is not None and not isinstance(bitwise, bool | np.bool_):
        raise ArgumentError(f"bitwise={bitwise!r} should be True, False or None",
                            hint="None compares bit for bit on the target backend only")
    fast = backend != "interp" and gpu_mode(kernel, mode) == "fast"
    exact = (backend == "target" and not fast) if bitwise is None else bool(bitwise)
    got_args = copy.deepcopy(args)
    ref: list[np.ndarray] | None = None
    against = "the interpreter"
    if backend == "cuda" and bitwise is None and not fast:
        ref = _hopper_reference(kernel, args, target, mode, launch_kw)
        if ref is not None:
            exact, against = True, "the Hopper tensor-core model"
    ref_is_tile_simulator = ref is None
    if ref is None:  # the tile simulator's outputs, needed only without the model's
        ref_args = copy.deepcopy(args)
        ref = _outputs(ref_args, kernel(*ref_args, mode="checked" if fast else mode,
                                        **launch_kw))
    compiled = None
    if backend == "target":  # compiled once, for both orders of the atomics below
        compiled = target_compiled(kernel, got_args, target, mode, launch_kw)
        got = _outputs(got_args, run_compiled(compiled, kernel, *got_args, **launch_kw))
    else:
        grid = launch_kw.pop("grid", None)
        got = _outputs(got_args, launch(kernel, grid, got_args, backend=backend,
                                        target=target, mode=mode, **launch_kw))
    for k, (r, g) in enumerate(zip(ref, got)):
        if exact:
            bad = r.view(np.uint8).reshape((*r.shape, -1)) != g.view(np.uint8).reshape(
                (*g.shape, -1))
            bad = bad.any(axis=-1)
            if ref_is_tile_simulator and r.dtype.kind in "fV" and bad.any():
                bad &= ~_both_nan(r, g)
        elif fast:
            bad = ~within_fast_bound(r, g, fast_tolerance(kernel, r, args, launch_kw))
        else:
            r64, g64 = r.astype(np.float64), g.astype(np.float64)
            with np.errstate(invalid="ignore"):  # inf - inf: equal infinities agree
                bad = ~((np.abs(r64 - g64) <= tolerance(kernel, r, args, launch_kw))
                        | (r64 == g64) | (np.isnan(r64) & np.isnan(g64)))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InterpretError(f"output {k} of '{kernel.name}' differs from "
                                 f"{against} at {at}: {g[at]!r} instead of {r[at]!r} "
                                 f"({int(bad.sum())} elements differ, backend {backend})")
    if compiled is not None and exact:
        _same_in_either_order(compiled, kernel, args, got, launch_kw)


def _same_in_either_order(compiled: Any, kernel: Any, args: tuple[Any, ...],
                          got: list[np.ndarray], launch_kw: dict[str, Any]) -> None:
    """A kernel with float atomics (``red``, ``atom``), which a GPU applies in arrival
    order, runs again with every thread's atomics in the reverse order (the last
    CTA's first, and within a CTA the last thread's first): different bits mean the
    GPU's result depends on the schedule, which the check reports."""
    from tessera.ir.core import walk
    from tessera.ir.dialects.target.ops import Reduce
    from tessera.ir.dialects.target.ptx_ops import Atom

    if not any(isinstance(i.op, Reduce | Atom) and i.op.type.startswith("f")
               for i in walk(compiled.kernel.body)):
        return
    other_args = copy.deepcopy(args)
    other = _outputs(other_args, run_compiled(compiled, kernel, *other_args,
                                              cta_order="descending", **launch_kw))
    for k, (a, b) in enumerate(zip(got, other)):
        bad = a.view(np.uint8).reshape((*a.shape, -1)) != b.view(np.uint8).reshape(
            (*b.shape, -1))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad.any(axis=-1))[0])
            raise InterpretError(
                f"output {k} of '{kernel.name}' depends on the order in which its float "
                f"atomics land: {a[at]!r} with the first thread's first, {b[at]!r} with "
                f"the last thread's first, at {at}; a GPU applies them in arrival order, "
                "so its bits vary from run to run",
                hint="the atomics are updates Tessera cannot apply in tile order on a GPU "
                     "(a float '+=' in a loop of run-time bounds, or of a tensor the kernel "
                     "also reads): update once per tile after the loop, or read in a second "
                     "launch")


def _both_nan(r: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Where both results are NaN: the tile simulator keeps NumPy's NaN bits, the Target
    IR interpreter (and a GPU) the canonical NaN's, and between those levels a NaN is a
    NaN (the Target IR interpreter's NaN bits are checked against a GPU's instead)."""
    try:
        with np.errstate(invalid="ignore"):
            return np.isnan(r) & np.isnan(g)
    except TypeError:  # a structured or non-float format: compared bit for bit
        return np.zeros(r.shape, bool)


def tensor_core_steps(instrs: Iterable[Any]) -> list[tuple[bool, str, str]]:
    """``(is_wgmma, A format, B format)`` of each tensor-core instruction among Target IR
    ``instrs`` (:func:`tessera.arch.mma_hopper.covers`' argument)."""
    return [(instr.op.name == "ptx.wgmma", str(instr.op.atype), str(instr.op.btype))
            for instr in instrs if hasattr(instr.op, "atype")]


def hopper_modelled(fn: Any) -> bool:
    """Whether a Target IR kernel has tensor-core steps and Hopper's measured
    accumulation (:mod:`tessera.arch.mma_hopper`) covers every one of them."""
    from tessera.arch import mma_hopper
    from tessera.ir.core import walk

    return mma_hopper.covers(tensor_core_steps(walk(fn.body)))


def _hopper_reference(kernel: Any, args: tuple[Any, ...], target: str | None,
                      mode: str | None, launch_kw: dict[str, Any]) -> list[np.ndarray] | None:
    """On a Hopper GPU, the outputs the Target IR interpreter predicts for the kernel
    under the measured tensor-core model, when it has tensor-core steps the model
    covers; otherwise None (the tolerance applies)."""
    from tessera.frontend.kernel.backends.launch import device_target

    if device_target() != "sm_90a":  # the model was measured on Hopper only
        return None
    compiled = compile_kernel(kernel, *args, target=target or "sm_90a", mode=mode,
                              **launch_kw)
    if not hopper_modelled(compiled.kernel):
        return None
    ref_args = copy.deepcopy(args)  # the compiled kernel runs as is: no second lowering
    return _outputs(ref_args, run_compiled(compiled, kernel, *ref_args,
                                           tensor_cores="hopper", **launch_kw))


__all__ = ["check_against_reference", "hopper_modelled", "longest_reduction",
           "tensor_core_steps", "tolerance"]
