"""Drawn GEMM epilogues give the tile interpreter's bits in the Target IR interpreter, on
sm_80 and sm_90a, one CTA a tile and persistent.

The kernels are the example GEMM (a K loop of ``mma`` into an f32 accumulator) followed
by a drawn chain of epilogue operations on the accumulator: a bias row, scaling,
division, ``maximum``/``minimum`` against constants, ``where`` on a comparison, ``abs``,
negation, a round trip through bf16 or f16, ``exp``, ``tanh``, ``sqrt``, the accumulator
added again, a row's max subtracted or its sum added; then a store of the result,
rounded to a drawn output format (f32, bf16, f16), or an f32 ``+=`` of it rounded to
f32. Which accumulator values are wide (the exact sum, rounded once where something
other than an add or a move uses it) is where the tile and Target IR interpreters can
part, and the inputs are drawn to meet roundings: magnitudes apart, and sums at half-way
points of bf16 once rounded to f32.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import UnsupportedError
from tests.strategies import DRAWN_DIR, kernel_from_source

HEADER = '''import tessera as ts
from tests.lower.sm90a.epilogue_kernels import product


@ts.kernel
def drawn(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
          bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.{out}]):
    acc = product(A, B)
    v = acc
'''

consts = st.sampled_from(["0.5", "1.5", "-0.25", "2.0", "-3.0", "0.0"])
STEPS = {
    "bias": lambda c: "v = v + bias[tile_n:tile_n + BN]",
    "scale": lambda c: f"v = v * {c}",
    "shift": lambda c: f"v = v - {c}",
    "relu": lambda c: f"v = ts.tile.maximum(v, {c})",
    "clip": lambda c: f"v = ts.tile.minimum(v, {c})",
    "leaky": lambda c: f"v = ts.tile.where(v > {c}, v, v * 0.125)",
    "abs": lambda c: "v = ts.tile.abs(v)",
    "bf16": lambda c: "v = ts.tile.cast(ts.tile.cast(v, ts.bf16), ts.f32)",
    "f16": lambda c: "v = ts.tile.cast(ts.tile.cast(v, ts.f16), ts.f32)",
    "exp": lambda c: "v = ts.tile.exp(ts.tile.minimum(v, 8.0))",
    "tanh": lambda c: "v = ts.tile.tanh(v)",
    "sqrt": lambda c: "v = ts.tile.sqrt(ts.tile.abs(v))",
    "div": lambda c: "v = v / 3.0",
    "neg": lambda c: "v = -v",
    "add_acc": lambda c: "v = v + acc",
    "sub_acc": lambda c: "v = acc - v",
    "row_max": lambda c: "v = v - ts.tile.row_max(v)[:, None]",
    "row_sum": lambda c: "v = v * 0.001 + ts.tile.row_sum(v)[:, None]",
}


@st.composite
def epilogues(draw: st.DrawFn) -> tuple[str, str, bool]:
    """A kernel's source, its output format and whether it adds into C."""
    steps = draw(st.lists(st.sampled_from(sorted(STEPS)), min_size=0, max_size=4))
    out = draw(st.sampled_from(["f32", "bf16", "f16"]))
    adds = out == "f32" and draw(st.booleans())
    body = [STEPS[s](draw(consts)) for s in steps]
    store = "C[tile_m:tile_m + BM, tile_n:tile_n + BN]"
    if adds:  # an f32 atomic cannot add the exact sum: it is rounded first
        body.append(f"{store} += ts.tile.cast(v, ts.f32)")
    elif out == "f32" or draw(st.booleans()):
        body.append(f"{store} = v" if out == "f32" else f"{store} = ts.tile.cast(v, ts.{out})")
    else:  # the store's own rounding
        body.append(f"{store} = v")
    return HEADER.format(out=out) + "".join(f"    {line}\n" for line in body), out, adds


def refused_at_its_line(err: UnsupportedError) -> None:
    """What the lowering refuses it says at the drawn kernel's line."""
    assert err.loc.file.startswith(str(DRAWN_DIR)), err


def inputs(rng: np.random.Generator, m: int, n: int, k: int, out: str
           ) -> tuple[np.ndarray, ...]:
    """Operands whose sums meet roundings: magnitudes 2^-6..2^3 apart, and a few columns
    whose sums, ``1 + 2^-8 + 2^-30``, round to a half-way point of bf16 in f32. The sums
    stay exact in float64 (products from 2^-30 to 2^6 of 16-bit significands, fewer than
    2^10 of them), where both interpreters define the accumulator; wider ranges round
    there, in an order that depends on the instruction's K (docs/kernels.md, section
    7)."""
    a = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-6, 3, (m, k))
    b = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-6, 3, (k, n))
    a[:, :3] = [1.0, 2.0**-8, 2.0**-30]  # 1 + 2^-8 + 2^-30: just past a bf16 tie
    b[:3, : n // 2] = 1.0
    b[:3, n // 2:] = 0.0  # else 2^-30 times b's 2^-6 would leave float64's 53 bits
    bias = (rng.standard_normal(n) * 2.0 ** rng.integers(-10, 4, n)).astype(np.float32)
    fmt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[out]
    c = (rng.standard_normal((m, n)) * 4).astype(fmt)
    return a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), bias, c


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=epilogues(), target=st.sampled_from(["sm_80", "sm_90a"]),
       persistent=st.booleans(), seed=st.integers(0, 2**16))
def test_drawn_epilogues_give_the_tile_bits(drawn: tuple[str, str, bool], target: str,
                                            persistent: bool, seed: int) -> None:
    source, out, adds = drawn
    kernel = kernel_from_source(source)
    tile = (128, 128, 64) if target == "sm_90a" else (64, 64, 32)
    args = inputs(np.random.default_rng(seed), 2 * tile[0], 2 * tile[1], 3 * tile[2], out)
    launch: dict[str, Any] = {"tile_shape": tile}
    if persistent and target == "sm_90a" and not adds:
        launch["config"] = {"persistent": True}
    try:
        ts.check_against_reference(kernel, *args, backend="target", target=target, **launch)
    except UnsupportedError as err:
        refused_at_its_line(err)
