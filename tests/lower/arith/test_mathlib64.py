"""The Target IR f64 exp against the tile interpreter's checked-mode meaning
(:func:`tessera.numerics.transcendental.exp64.exp_f64_specified`), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.ir.core import Block, Value, walk
from tessera.ir.dialects.target.ops import Binary, Cvt, Fma, Unary
from tessera.lower.arith.mathlib64 import emit_exp_f64_specified
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental.exp64 import exp_f64_specified
from tests.lower.arith.test_mathlib import THREADS, address, kernel

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")


def exp64_kernel(ncta: int):
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        x = e.ld("global", address(e, p[0], i, 8), "f64")
        e.st("global", address(e, p[1], i, 8), emit_exp_f64_specified(e, x), "f64")
    return kernel("exp_f64", 2, ncta, body)


def inputs() -> np.ndarray:
    codes = [0x7FF8000000000000, 0xFFF0000000000123, 0x7FF0000000000001,  # NaNs
             0x0000000000000001, 0x8000000000000001]  # subnormal inputs
    floats = [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, -104.0, np.nextafter(-104.0, -1e9),
              -103.99999, 709.78, 709.79, 710.0, 1e300, -1e300, 0.5 * np.log(2),
              -0.5 * np.log(2)]
    special = np.concatenate([np.array(codes, np.uint64).view(np.float64), floats])
    rng = np.random.default_rng(11)
    uniform = np.concatenate([rng.uniform(-110, 0, 600), rng.uniform(0, 720, 200)])
    patterns = rng.integers(0, 2**64, 1024 - 800 - special.size, dtype=np.uint64)
    return np.concatenate([special, uniform, patterns.view(np.float64)])


def test_exp64_kernel_matches_the_specified_exp_bit_for_bit() -> None:
    x = inputs()
    out = np.zeros_like(x)
    target.run_target(exp64_kernel(x.size // THREADS), [x, out])
    with np.errstate(all="ignore"):
        want = exp_f64_specified(x)
    assert np.array_equal(out.view(np.uint64), want.view(np.uint64))
    assert out[1].view(np.uint64) == 0xFFF8000000000123  # signalling NaN quieted


def test_exp64_uses_only_ieee_rounded_operations() -> None:
    ops = [i.op for i in walk(exp64_kernel(1))]
    assert not any(isinstance(op, Fma) for op in ops)
    assert not any(isinstance(op, Unary) and op.op in ("ex2", "lg2", "rcp") for op in ops)
    floats = [op for op in ops if isinstance(op, Binary) and op.type in ("f32", "f64")]
    assert floats and all(op.mode == "rn" and op.type == "f64" for op in floats)
    assert not any(isinstance(op, Cvt) and op.to == "f32" for op in ops)  # no f32 rounding


def test_exp64_takes_f64_registers_only() -> None:
    e = TargetEmitter(Block())
    with pytest.raises(IRVerifyError, match="reg<f64>"):
        emit_exp_f64_specified(e, e.const(1.0, "f32"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_exp64_kernel_assembles(arch: str) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing, assemble
    from tessera.backend.ptx.render import render

    try:
        assemble(render(exp64_kernel(1)), arch)
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")


@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_f64_to_narrow_rounds_once(fmt: str) -> None:
    """The cast of f64 registers to bf16 / f16 (softmax results): rounded to odd on the
    f32 grid, then to nearest even, equals one rounding of the f64 value, where rounding
    through f32 to nearest would round twice."""
    from tessera.lower.exact.longacc import to_format
    from tessera.numerics import dtype
    from tessera.numerics.formats.convert import convert

    element = dtype(fmt)
    bits = 8 if fmt == "bf16" else 11  # significand bits
    rng = np.random.default_rng(5)
    base = convert(rng.standard_normal(300) * 4.0 ** rng.integers(-4, 5, 300), element)
    base = base.astype(np.float64)
    base = base[base != 0]
    half = np.ldexp(1.0, np.frexp(base)[1] - 1 - bits)  # half an ulp of each value
    x = np.concatenate([base + half * (1 + 2.0**-35), base + half * (1 - 2.0**-35),
                        base - half * (1 + 2.0**-35), base + half,
                        [np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300, 0.0, -0.0]])
    x = np.resize(x, THREADS * (x.size // THREADS + 1))

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        v = e.ld("global", address(e, p[0], i, 8), "f64")
        e.st("global", address(e, p[1], i, 4), to_format(e, v, element), "f32")

    out = np.zeros(x.size, np.float32)
    target.run_target(kernel("to_narrow", 2, x.size // THREADS, body), [x, out])
    want = convert(x, element).astype(np.float32)
    with np.errstate(over="ignore"):
        twice = convert(x.astype(np.float32), element).astype(np.float32)
    assert (twice != want).sum() > 50  # the inputs do tell the roundings apart
    same = (out == want) | (np.isnan(out) & np.isnan(want))
    assert same.all()


def minmax64_kernel(ncta: int):
    from tessera.lower.arith.mathlib64 import emit_max_nan_f64, emit_min_nan_f64

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        a = e.ld("global", address(e, p[0], i, 8), "f64")
        b = e.ld("global", address(e, p[1], i, 8), "f64")
        e.st("global", address(e, p[2], i, 8), emit_max_nan_f64(e, a, b), "f64")
        e.st("global", address(e, p[3], i, 8), emit_min_nan_f64(e, a, b), "f64")
    return kernel("minmax_f64", 4, ncta, body)


def test_f64_maximum_and_minimum_propagate_nans_as_numpy() -> None:
    """The f64 ``tile.maximum`` / ``tile.minimum`` of the key-block passes: equal values
    to ``np.maximum`` / ``np.minimum``, a NaN wherever an operand is one."""
    rng = np.random.default_rng(12)
    a, b = inputs(), rng.permutation(inputs())
    hi, lo = np.zeros_like(a), np.zeros_like(a)
    target.run_target(minmax64_kernel(a.size // THREADS), [a, b, hi, lo])
    for got, fn in ((hi, np.maximum), (lo, np.minimum)):
        want = fn(a, b)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.array_equal(got[ok], want[ok])  # (a tie of +0 and -0 may pick either)
