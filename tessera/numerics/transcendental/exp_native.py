"""The specified f32 ``exp`` compiled to native vector code with llvmlite.

:mod:`tessera.numerics.transcendental.exp` defines ``exp`` by an algorithm of binary64
``add``/``sub``/``mul``, selects, a round-to-nearest-even and bit operations. NumPy
evaluates it (or a proven-equal shortcut through the platform's float64 ``exp``) pass
by pass over memory; where NumPy's float64 ``exp`` is not a SIMD loop (x86-64 without
AVX-512F, where glibc computes one value at a time) that costs 9-10 ns per value.

Here the same steps are written once in LLVM IR, one loop over the elements, and LLVM
vectorises the loop for the host CPU. The instructions carry no fast-math flags, so
LLVM keeps every IEEE-754 operation as written: no fused multiply-add (contraction
needs the ``contract`` flag), no reassociation, round-to-nearest-even throughout. The
result is the algorithm's, bit for bit (the tests compare the unrounded binary64 value
with NumPy's evaluation of the same steps), at about 3 ns per value on an AVX2 core
(NumPy's own float32 ``exp`` takes about as long there).

llvmlite is optional at run time: :func:`native_exp` is None when it is missing or the
build fails (the reason is in :data:`UNAVAILABLE`), and ``TESSERA_NATIVE_EXP=0`` turns
the compiled loop off; callers then use the NumPy evaluation, which gives the same bits.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Callable

import numpy as np

from tessera.numerics.transcendental.exp import (
    _SHIFTER,
    CLAMP_HI,
    CLAMP_LO,
    COEFFS,
    LN2_HI,
    LN2_LO,
    LOG2E,
    QUIET_BIT,
)

Kernel = Callable[[np.ndarray, np.ndarray], None]
UNAVAILABLE = ""
_lock = threading.Lock()
_kernels: dict[str, Kernel] | None = None
_engine: object = None  # the JIT engine that owns the compiled code: kept alive here


def _d(x: float) -> str:
    """A binary64 constant as LLVM IR spells it exactly: the hex of its bits."""
    return f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"


def _ir(name: str, wide: bool) -> str:
    """One loop ``out[i] = exp(x[i])``; ``wide`` stores the binary64 value ``v`` of step
    6 before its rounding (for tests), otherwise the binary32 result with NaN quieted."""
    horner = [f"  %p0 = fmul double %r, {_d(COEFFS[0])}",
              f"  %p1 = fadd double %p0, {_d(COEFFS[1])}"]
    for k, c in enumerate(COEFFS[2:], start=1):  # mul then add, never fused
        horner += [f"  %m{k} = fmul double %p{k}, %r",
                   f"  %p{k + 1} = fadd double %m{k}, {_d(c)}"]
    last = f"%p{len(COEFFS) - 1}"
    store = ["  store double %v, ptr %po"] if wide else [
        "  %vf = fptrunc double %v to float",
        "  %nan = fcmp uno float %xf, %xf",
        "  %xb = bitcast float %xf to i32",
        f"  %qb = or i32 %xb, {QUIET_BIT}",
        "  %qf = bitcast i32 %qb to float",
        "  %res = select i1 %nan, float %qf, float %vf",
        "  store float %res, ptr %po"]
    out_t = "double" if wide else "float"
    body = [
        f"define void @{name}(ptr noalias nocapture readonly %x, "
        "ptr noalias nocapture %out, i64 %n) {",
        "entry:",
        "  %any = icmp sgt i64 %n, 0",
        "  br i1 %any, label %loop, label %done",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]",
        "  %px = getelementptr inbounds float, ptr %x, i64 %i",
        "  %xf = load float, ptr %px",
        "  %x0 = fpext float %xf to double",
        # step 2: the spec's two setp+selp (a NaN becomes 89)
        f"  %lt = fcmp olt double %x0, {_d(CLAMP_HI)}",
        f"  %x1 = select i1 %lt, double %x0, double {_d(CLAMP_HI)}",
        f"  %gt = fcmp ogt double %x1, {_d(CLAMP_LO)}",
        f"  %x2 = select i1 %gt, double %x1, double {_d(CLAMP_LO)}",
        # step 3: n = rne(x * LOG2E)
        f"  %t = fmul double %x2, {_d(LOG2E)}",
        "  %nn = call double @llvm.roundeven.f64(double %t)",
        # step 4: Cody-Waite
        f"  %a = fmul double %nn, {_d(LN2_HI)}",
        "  %r0 = fsub double %x2, %a",
        f"  %b = fmul double %nn, {_d(LN2_LO)}",
        "  %r = fsub double %r0, %b",
        *horner,
        # step 6: 2^n from its bits, the product, one rounding
        f"  %sh = fadd double %nn, {_d(_SHIFTER)}",
        "  %sb = bitcast double %sh to i64",
        "  %eb = shl i64 %sb, 52",
        "  %s = bitcast i64 %eb to double",
        f"  %v = fmul double {last}, %s",
        f"  %po = getelementptr inbounds {out_t}, ptr %out, i64 %i",
        *store,
        "  %next = add nuw nsw i64 %i, 1",
        "  %end = icmp eq i64 %next, %n",
        "  br i1 %end, label %done, label %loop",
        "done:",
        "  ret void",
        "}"]
    return "\n".join(body)


def optimized(*names: tuple[str, bool]) -> tuple[object, object]:
    """The module of the loops ``(name, wide)``, optimised (and vectorised) for the host
    CPU, and its target machine."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = "\n\n".join([*(_ir(name, wide) for name, wide in names),
                        "declare double @llvm.roundeven.f64(double)"])
    module = llvm.parse_assembly(text)
    module.verify()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                      features=llvm.get_host_cpu_features().flatten(),
                                      opt=3)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    return module, tm


def _build() -> dict[str, Kernel]:
    global _engine
    import llvmlite.binding as llvm

    module, tm = optimized(("exp_f32", False), ("exp_f32_wide", True))
    _engine = engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    kernels: dict[str, Kernel] = {}
    for name, dtype in (("exp_f32", np.float32), ("exp_f32_wide", np.float64)):
        fn = proto(engine.get_function_address(name))

        def run(x: np.ndarray, out: np.ndarray, fn=fn, dtype=dtype) -> None:
            assert x.dtype == np.float32 and out.dtype == dtype and x.size == out.size
            assert x.flags.c_contiguous and out.flags.c_contiguous
            fn(x.ctypes.data, out.ctypes.data, x.size)
        kernels[name] = run
    return kernels


def _kernel(name: str) -> Kernel | None:
    global _kernels, UNAVAILABLE
    if os.environ.get("TESSERA_NATIVE_EXP", "1") == "0":
        return None
    if _kernels is None and not UNAVAILABLE:
        with _lock:
            if _kernels is None and not UNAVAILABLE:
                try:
                    _kernels = _build()
                except Exception as exc:  # no llvmlite, or no native target: NumPy then
                    UNAVAILABLE = f"{type(exc).__name__}: {exc}"
    return None if _kernels is None else _kernels[name]


def native_exp() -> Kernel | None:
    """``run(x, out)``: the specified e^x of a C-contiguous float32 array into a float32
    array of its size, or None when the compiled loop is unavailable."""
    return _kernel("exp_f32")


def native_exp_wide() -> Kernel | None:
    """Like :func:`native_exp`, into a float64 array: the value before the final
    rounding (what :func:`tessera.numerics.transcendental.exp.exp_f32_unrounded` gives)."""
    return _kernel("exp_f32_wide")


__all__ = ["UNAVAILABLE", "native_exp", "native_exp_wide", "optimized"]
