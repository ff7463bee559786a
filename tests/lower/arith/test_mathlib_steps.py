"""The Target IR f64 erf, erfc, tanh and log against their NumPy meaning
(:mod:`tessera.numerics.transcendental.erf64`, ``tanh64``, ``log64``), bit for bit, in the Target
IR interpreter, and the instructions they use."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.ir.core import Block, Value, walk
from tessera.ir.dialects.target.ops import Binary, Cvt, Fma, Unary
from tessera.lower.arith.mathlib_steps import (
    emit_erf_f64_specified,
    emit_erfc_f64_specified,
    emit_log_f64_specified,
    emit_tanh_f64_specified,
)
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental.erf64 import erf_f64_specified, erfc_f64_specified
from tessera.numerics.transcendental.log64 import log_f64_specified
from tessera.numerics.transcendental.tanh64 import tanh_f64_specified
from tests.lower.arith.test_mathlib import THREADS, address, kernel

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")


def erf64_kernel(ncta: int):
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        x = e.ld("global", address(e, p[0], i, 8), "f64")
        e.st("global", address(e, p[1], i, 8), emit_erf_f64_specified(e, x), "f64")
        e.st("global", address(e, p[2], i, 8), emit_erfc_f64_specified(e, x), "f64")
        e.st("global", address(e, p[3], i, 8), emit_tanh_f64_specified(e, x), "f64")
        e.st("global", address(e, p[4], i, 8), emit_log_f64_specified(e, x), "f64")
    return kernel("erf_f64", 5, ncta, body)


def inputs() -> np.ndarray:
    codes = [0x7FF8000000000000, 0xFFF0000000000123, 0x7FF0000000000001,  # NaNs
             0x0000000000000001, 0x8000000000000001]  # subnormal inputs
    floats = [0.0, -0.0, np.inf, -np.inf, 0.25, 0.84375, 1.25, 1 / 0.35, 6.0, 10.17, 28.0,
              0.55, -0.55, 22.0, 2.0**-27, -(2.0**-28), 1.0, 2.0**-1022, 1e-310,
              np.sqrt(2), np.sqrt(0.5), 1.0 + 2.0**-52, 1.0 - 2.0**-53, 1.7976931348623157e308,
              -0.25, -0.84375, -1.25, -28.0, 1e300, -1e300, 2.0**-60]
    special = np.concatenate([np.array(codes, np.uint64).view(np.float64), floats])
    rng = np.random.default_rng(13)
    uniform = np.concatenate([rng.uniform(-6, 6, 350), rng.uniform(-30, 30, 150),
                              2.0 ** rng.uniform(-80, 0, 100),
                              2.0 ** rng.uniform(-1074, 1023, 100)])
    patterns = rng.integers(0, 2**64, 1024 - 700 - special.size, dtype=np.uint64)
    return np.concatenate([special, uniform, patterns.view(np.float64)])


def test_kernel_matches_the_specified_functions_bit_for_bit() -> None:
    x = inputs()
    erf, erfc, tanh, log = (np.zeros_like(x) for _ in range(4))
    target.run_target(erf64_kernel(x.size // THREADS), [x, erf, erfc, tanh, log])
    assert np.array_equal(erf.view(np.uint64), erf_f64_specified(x).view(np.uint64))
    assert np.array_equal(erfc.view(np.uint64), erfc_f64_specified(x).view(np.uint64))
    assert np.array_equal(tanh.view(np.uint64), tanh_f64_specified(x).view(np.uint64))
    assert np.array_equal(log.view(np.uint64), log_f64_specified(x).view(np.uint64))
    assert erf[1].view(np.uint64) == 0xFFF8000000000123  # signalling NaN quieted


def test_erf64_uses_only_ieee_rounded_operations() -> None:
    ops = [i.op for i in walk(erf64_kernel(1))]
    assert not any(isinstance(op, Fma) for op in ops)
    assert not any(isinstance(op, Unary) and op.op in ("ex2", "lg2", "rcp") for op in ops)
    floats = [op for op in ops if isinstance(op, Binary) and op.type in ("f32", "f64")]
    assert floats and all(op.mode == "rn" and op.type == "f64" for op in floats)
    assert any(isinstance(op, Binary) and op.op == "div" for op in ops)
    assert not any(isinstance(op, Cvt) and op.to == "f32" for op in ops)  # no f32 rounding


def test_erf64_takes_f64_registers_only() -> None:
    e = TargetEmitter(Block())
    for emit in (emit_erf_f64_specified, emit_erfc_f64_specified, emit_tanh_f64_specified,
                 emit_log_f64_specified):
        with pytest.raises(IRVerifyError, match="reg<f64>"):
            emit(e, e.const(1.0, "f32"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_erf64_kernel_assembles_without_spills(arch: str) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing, assemble
    from tessera.backend.ptx.render import render

    try:
        assembled = assemble(render(erf64_kernel(1)), arch)
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert "warning" not in assembled.log.lower()
    for stats in assembled.stats.values():
        assert stats.spill_stores == stats.spill_loads == stats.stack_frame == 0
