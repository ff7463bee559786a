"""The fp8 conversions of :mod:`tessera.lower.arith.fp8` against ``ml_dtypes``: small
``ptx.kernel``s built with the emitter run on the Target IR interpreter. Every byte
of e4m3 and e5m2 widens to the f32 ``ml_dtypes`` gives; f32 values (the grid, every
midpoint and its neighbours, subnormals, overflow, infinities, NaNs of any payload)
round to the byte and value of :func:`tessera.numerics.formats.convert.convert`, by
integer arithmetic on sm_80 (no fp8 instruction) and by sm_89's ``cvt ... e4m3x2`` on
sm_89 and sm_90a, to the same bits; the PTX assembles for each target."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.render import render
from tessera.interp.target import run_target
from tessera.ir.core import Block, Function, Value
from tessera.ir.dialects.target import KERNEL, RegType, Return
from tessera.lower.arith import fp8
from tessera.lower.emit import TargetEmitter
from tessera.numerics.formats.convert import convert

THREADS = 128
U64 = RegType("u64")
FORMATS = {"float8_e4m3fn": (ml_dtypes.float8_e4m3fn, ts.fp8_e4m3),
           "float8_e5m2": (ml_dtypes.float8_e5m2, ts.fp8_e5m2)}


TARGETS = ("sm_80", "sm_89", "sm_90a")


def _kernel(ncta: int, body: Callable[[TargetEmitter, Value, list[Value]], None],
            target: str = "sm_80") -> Function:
    block = Block()
    params = [block.add_arg(U64) for _ in range(3)]
    e = TargetEmitter(block, target=target)
    i = e.add(e.mul(e.sreg("ctaid.x"), e.const(THREADS, "u32"), "u32"), e.sreg("tid.x"), "u32")
    body(e, i, params)
    e.op(Return())
    return Function("fp8", block, [], kind=KERNEL,
                    attrs={"target": target, "block": [THREADS], "grid": [ncta]})


def _at(e: TargetEmitter, base: Value, i: Value, size: int) -> Value:
    return e.add(base, e.bin("mul", i, e.const(size, "u32"), "u32", "wide"), "u64")


def _widen_kernel(name: str, ncta: int) -> Function:
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        byte = e.ld("global", _at(e, p[0], i, 1), "b8")
        e.st("global", _at(e, p[1], i, 4), fp8.widen(e, byte, name), "f32")
    return _kernel(ncta, body)


def _round_kernel(name: str, ncta: int, target: str = "sm_80") -> Function:
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        x = e.ld("global", _at(e, p[0], i, 4), "f32")
        e.st("global", _at(e, p[1], i, 4), fp8.round_value(e, x, name), "f32")
        e.st("global", _at(e, p[2], i, 1), fp8.to_byte(e, x, name), "u8")
    return _kernel(ncta, body, target)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_byte_widens_as_ml_dtypes_does(name: str) -> None:
    dt, _ = FORMATS[name]
    every = np.arange(256, dtype=np.uint8)
    out = np.zeros(256, np.float32)
    run_target(_widen_kernel(name, 2), [every, out, np.zeros(1, np.uint8)])
    want = every.view(dt).astype(np.float32)
    assert out.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def _cases(dt: type) -> np.ndarray:
    grid = np.sort(np.arange(256, dtype=np.uint8).view(dt).astype(np.float64))
    grid = grid[np.isfinite(grid)]
    mid = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)  # exact: 4 bits more at most
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA00000, 0x7FFFFFFF],
                    np.uint32).view(np.float32)
    special = np.array([np.inf, -np.inf, 1e30, -1e30, 1e-30, -1e-40, 0.0, -0.0, 464.0,
                        480.0, 57344.0, 61439.0, 61440.0, 65504.0, 2.0**-17, 2.0**-10],
                       np.float32)
    rng = np.random.default_rng(0)
    out = np.concatenate([grid.astype(np.float32), mid, np.nextafter(mid, np.inf),
                          np.nextafter(mid, -np.inf), nans, special,
                          (rng.standard_normal(400) * 200).astype(np.float32),
                          (rng.standard_normal(400) * 1e-3).astype(np.float32)])
    return np.resize(out, -(-out.size // THREADS) * THREADS)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_f32_rounds_to_the_nearest_fp8_as_convert_does(name: str, target: str) -> None:
    dt, fmt = FORMATS[name]
    x = _cases(dt)
    value, byte = np.zeros_like(x), np.zeros(x.size, np.uint8)
    run_target(_round_kernel(name, x.size // THREADS, target), [x, value, byte])
    want = convert(x, fmt)
    # a NaN byte for a NaN, its bits aside: ``convert`` keeps the sign, while the
    # lowering's e4m3 scaling ``mul`` writes the canonical NaN, as a GPU does (0x7F)
    nan = np.isnan(want)
    assert byte[~nan].tolist() == want.view(np.uint8)[~nan].tolist()
    assert np.isnan(byte.view(dt)[nan]).all()
    if name == "float8_e4m3fn":  # measured on an H100
        assert set(byte[nan].tolist()) == {0x7F}
    assert value.view(np.uint32).tolist() == want.astype(np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_constants_round_once_from_float64(name: str) -> None:
    _, fmt = FORMATS[name]
    for v in [0.1, 1 / 3, 1e6, -1e-9, 2.0**-10 * 1.5]:
        assert fp8.constant(v, fmt) == float(convert(np.float64(v), fmt).astype(np.float32))


def test_the_conversions_assemble_for_sm80() -> None:
    from tessera.backend.ptx.driver.assemble import assemble

    for name in FORMATS:
        for make in (_widen_kernel, _round_kernel):
            ptx = render(make(name, 1))
            assert isinstance(ptx, str) and "e4m3" not in ptx and "e5m2" not in ptx
            assemble(ptx, "sm_80")


def _instructions(ptx: str) -> int:
    return sum(1 for ln in ptx.splitlines() if ln.startswith("\t") and
               not ln.strip().startswith("."))


@pytest.mark.parametrize("target", ["sm_89", "sm_90a"])
def test_sm89_rounds_with_its_fp8_cvt(target: str) -> None:
    """One ``cvt.rn.satfinite`` pair conversion per result instead of the integer
    rounding: the round kernel (value and byte) is 40 instructions against sm_80's 97
    for e4m3 and 48 against 90 for e5m2."""
    from tessera.backend.ptx.driver.assemble import assemble

    for name, pair in (("float8_e4m3fn", "e4m3x2"), ("float8_e5m2", "e5m2x2")):
        ptx = render(_round_kernel(name, 1, target))
        assert ptx.count(f"cvt.rn.satfinite.{pair}.f32") == 2
        assemble(ptx, target)
        assert _instructions(ptx) < 0.55 * _instructions(render(_round_kernel(name, 1)))
