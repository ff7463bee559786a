"""Numerics policies as types: ``dtype @accum(t) @stochastic_round @loss_scale(s)``,
their string form, their checks, and what they do to a program's values."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

import tessera as ts
from tessera.conformance.reference import FORMATS, exact_sum, f32_of
from tessera.conformance.registry import GRAPH, case

SPEC = "decisions.md Numerics: policies build an immutable type; the string parses to it"
SPEC_ACC = "numerics.md Policies: @accum(t) same kind, holds every storage value"
# annotations built once here (dimension names are strings, not forward references)
X_F32 = ts.Tensor["B", "D", ts.f32]
W_BF16 = ts.Tensor["D", "H", ts.bf16 @ ts.accum(ts.f32)]
A_FP8 = ts.Tensor["M", "K", ts.fp8_e4m3 @ ts.accum(ts.f32)]
B_FP8 = ts.Tensor["K", "N", ts.fp8_e4m3 @ ts.accum(ts.f32)]
W_SCALED = ts.Tensor["N", ts.bf16 @ ts.accum(ts.f32) @ ts.loss_scale(128.0)]


@case("policy.parse.string-equals-type", spec=SPEC)
def _parse(ctx: Any) -> None:
    """``"bf16 @accum(f32) @stochastic_round(seed=3)"`` parses to the value the
    operators build, prints back in modifier order, and hashes equal."""
    p = ts.bf16 @ ts.accum(ts.f32) @ ts.stochastic_round(seed=3)
    q = ts.parse_policy("ts.bfloat16 @accum(fp32) @stochastic_round(seed=3)")
    assert p == q and hash(p) == hash(q) and {p: 1}[q] == 1
    assert str(p) == "bf16 @accum(f32) @stochastic_round(seed=3)", str(p)
    assert ts.parse_policy(str(p)) == p
    assert ts.Tensor["B", "D", "bf16 @accum(f32)"] == ts.Tensor["B", "D", ts.bf16 @ ts.accum(
        ts.f32)]


@case("policy.immutable", spec=SPEC)
def _immutable(ctx: Any) -> None:
    """A policy cannot be changed after it is built."""
    p = ts.fp8_e4m3 @ ts.accum(ts.f32) @ ts.loss_scale(128.0)
    assert (p.storage, p.accum, p.loss_scale) == (ts.fp8_e4m3, ts.f32, 128.0)
    try:
        p.loss_scale = 1.0  # type: ignore[misc]
    except (AttributeError, dataclasses.FrozenInstanceError, TypeError):
        pass
    else:
        raise AssertionError("a policy accepted an attribute assignment")
    assert p.loss_scale == 128.0


@case("policy.stochastic-round.bare-and-called", spec=SPEC)
def _bare(ctx: Any) -> None:
    """``@stochastic_round`` works bare and called; the modifier is recorded."""
    bare = ts.bf16 @ ts.accum(ts.f32) @ ts.stochastic_round
    called = ts.bf16 @ ts.accum(ts.f32) @ ts.stochastic_round()
    assert bare == called and bare.stochastic_round


def _rejects(text: str) -> Any:
    def run(ctx: Any) -> None:

        try:
            ts.parse_policy(text)
        except ts.errors.PolicyError as err:
            assert str(err), "the error says why"
        else:
            raise AssertionError(f"{text!r} was accepted")

    run.__doc__ = f"``{text}`` is a PolicyError (the accumulator must hold the storage)."
    return run


for _name, _text in [("kind-mismatch", "bf16 @accum(int32)"),
                     ("too-narrow", "f32 @accum(bf16)"), ("int-into-float", "int8 @accum(f16)"),
                     ("twice", "bf16 @accum(f32) @accum(f32)"),
                     ("bad-scale", "bf16 @loss_scale(-1.0)")]:
    case(f"policy.rejects.{_name}", spec=SPEC_ACC)(_rejects(_text))


@case("policy.annotation.bf16-accum-f32", spec="programming-model-guide.md Type System with "
      "Policies; numerics.md Exact reductions", backends=GRAPH)
def _annotation(ctx: Any) -> None:
    """An argument annotated ``bf16 @accum(f32)`` is rounded to bf16 on entry; the
    matmul is the exact sum of exact products, rounded once to f32."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 24)).astype(np.float32)
    w = rng.standard_normal((24, 3)).astype(np.float32)

    def mm(x: X_F32, W: W_BF16):
        return ts.matmul(x, W)

    got = np.asarray(ctx.graph(mm, x, w))
    bf = FORMATS["bf16"]
    wb = [[Fraction(bf.round(Fraction(float(v)))) for v in row] for row in w.T]
    want = np.array([[f32_of(sum((Fraction(float(a)) * b for a, b in zip(row, col)),
                                 Fraction(0))) for col in wb] for row in x])
    assert got.dtype == np.float32 and np.array_equal(got, want), (got, want)


@case("policy.default-accumulator.bf16", spec="numerics.md Exact reductions: bf16 without "
      "@accum gives exact -> f32 -> bf16", backends=GRAPH)
def _default_acc(ctx: Any) -> None:
    """bf16 operands without ``@accum``: the exact product rounded to f32, then to bf16."""
    import ml_dtypes


    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 40)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((40, 4)).astype(ml_dtypes.bfloat16)
    got = np.asarray(ctx.graph(lambda a, b: ts.matmul(a, b), a, b))
    bf = FORMATS["bf16"]
    want = [[bf.round(Fraction(float(f32_of(exact_sum(a[i].astype(np.float64) * b[:, j].astype(
        np.float64)))))) for j in range(4)] for i in range(5)]
    assert got.dtype == ml_dtypes.bfloat16
    assert np.array_equal(got.astype(np.float64), np.array(want)), (got, want)


@case("policy.fp8-accum-f32.result-format", spec="user-guide.md §5: fp8 @accum(f32) inputs "
      "give an f32 result", backends=GRAPH)
def _fp8(ctx: Any) -> None:
    """fp8_e4m3 ``@accum(f32)`` operands: an f32 result, the exact product rounded once."""
    from tessera.numerics import convert

    rng = np.random.default_rng(7)
    a8 = convert(rng.standard_normal((8, 32)) * 4, "fp8_e4m3")
    b8 = convert(rng.standard_normal((32, 16)) * 4, "fp8_e4m3")

    def mm(a: A_FP8, b: B_FP8):
        return ts.matmul(a, b)

    got = np.asarray(ctx.graph(mm, a8, b8))
    want = (a8.astype(np.float64) @ b8.astype(np.float64)).astype(np.float32)  # exact in f64
    assert got.dtype == np.float32 and np.array_equal(got, want)


@case("policy.loss-scale.grad", spec="decisions.md Numerics: @loss_scale(s); autodiff.md "
      "Loss scaling")
def _loss_scale(ctx: Any) -> None:
    """``@loss_scale(128)``: grad seeds with 128 and divides once; the gradient is the
    unscaled one, and its element keeps the scale."""

    @ts.jit
    def sq(w: W_SCALED):
        return ts.sum(ts.cast(w, ts.f32) ** 2)

    w = np.array([1e-3, 2.0, 3.0, -0.5], np.float32)
    gw = ts.grad(sq)(w)
    assert gw.element.loss_scale == 128.0
    wb = np.array([FORMATS["bf16"].round(Fraction(float(v))) for v in w])
    want = np.array([FORMATS["bf16"].round(Fraction(2 * v)) for v in wb])
    assert np.array_equal(np.asarray(gw).astype(np.float64), want), (gw, want)


@case("policy.precision-policy-class", spec="programming-model-guide.md Custom Numeric "
      "Policies; numerics.md Policies")
def _policy_class(ctx: Any) -> None:
    """A ``@precision_policy`` class is an element type: values round to its storage."""

    @ts.precision_policy
    class Int8Weights:
        storage = ts.int8
        compute = ts.f32
        accumulate = ts.f32

    t = ts.as_tensor(np.array([2.5, -3.5, 300.0, 0.4], np.float32), Int8Weights)
    assert np.asarray(t).tolist() == [2, -4, 127, 0]
