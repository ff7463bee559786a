"""Drawn elementwise expressions give the tile interpreter's bits in the Target IR
interpreter, on sm_80 and sm_90a.

A scalar kernel computes ``y[i] = cast(e(a, b), out)`` where ``a`` and ``b`` are its
inputs (f32, bf16 or f16) widened to f32 and ``e`` is a drawn expression of ``+``,
``-``, ``*``, ``/``, ``maximum``, ``minimum``, ``where``, negation, ``abs``, ``exp``,
``tanh``, ``erf``, ``log``, ``sqrt`` and round trips through bf16, f16 and fp8 e4m3.
The inputs hold the values where formats part: signed zeros, infinities, NaN, f32
subnormals, the largest f16 and e4m3 values, and bf16 and f16 half-way points.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import UnsupportedError
from tests.lower.test_drawn_epilogues import refused_at_its_line
from tests.strategies import kernel_from_source

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
UNARY = ["-{}", "ts.tile.abs({})", "ts.tile.exp(ts.tile.minimum({}, 10.0))",
         "ts.tile.tanh({})", "ts.tile.erf({})", "ts.tile.sqrt(ts.tile.abs({}))",
         "ts.tile.log(ts.tile.abs({}) + 1.0)",
         "ts.tile.cast(ts.tile.cast({}, ts.bf16), ts.f32)",
         "ts.tile.cast(ts.tile.cast({}, ts.f16), ts.f32)",
         "ts.tile.cast(ts.tile.cast({}, ts.fp8_e4m3), ts.f32)"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / ({} * {} + 2.0))",
          "ts.tile.maximum({}, {})", "ts.tile.minimum({}, {})",
          "ts.tile.where({} > {}, {}, {})"]
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 65504.0, 448.0,
            1 + 2.0**-8, 1 + 2.0**-11, 3.0e38]
KERNEL = '''import tessera as ts


@ts.kernel
def drawn(x: ts.Tensor["N", ts.{fmt}], z: ts.Tensor["N", ts.{fmt}],
          y: ts.Tensor["N", ts.{out}]):
    i = ts.tile.linear_id()
    if i < N:
        a = ts.tile.cast(x[i], ts.f32)
        b = ts.tile.cast(z[i], ts.f32)
        y[i] = ts.tile.cast({expr}, ts.{out})
'''


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """An expression of ``a``, ``b`` and constants, at most three operations deep."""
    if depth > 2 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["a", "b", "0.5", "-1.5", "3.0"]))
    if draw(st.booleans()):
        return draw(st.sampled_from(UNARY)).format(draw(expressions(depth + 1)))
    form = draw(st.sampled_from(BINARY))
    return form.format(*(draw(expressions(depth + 1)) for _ in range(form.count("{}"))))


def inputs(rng: np.random.Generator, n: int, fmt: str) -> np.ndarray:
    """Magnitudes 2^-20..2^20 after the special values (saturated where the format has
    no room: an f16 3e38 is its infinity)."""
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)
    x[:len(SPECIALS)] = SPECIALS
    with np.errstate(over="ignore"):
        return x.astype(FORMATS[fmt])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(), fmt=st.sampled_from(sorted(FORMATS)),
       out=st.sampled_from(sorted(FORMATS)), target=st.sampled_from(["sm_80", "sm_90a"]),
       seed=st.integers(0, 2**16))
def test_drawn_expressions_give_the_tile_bits(expr: str, fmt: str, out: str, target: str,
                                              seed: int) -> None:
    kernel = kernel_from_source(KERNEL.format(fmt=fmt, out=out, expr=expr))
    rng = np.random.default_rng(seed)
    x, z = inputs(rng, 256, fmt), inputs(rng, 256, fmt)[::-1].copy()
    try:
        ts.check_against_reference(kernel, x, z, np.zeros(256, FORMATS[out]),
                                   backend="target", target=target, grid=256)
    except UnsupportedError as err:
        refused_at_its_line(err)
