"""Policies: building with @, parsing, printing, errors, and @precision_policy classes."""

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tessera.numerics as ts
from tessera.errors import DTypeError, PolicyError
from tessera.numerics import accum, loss_scale, stochastic_round

FLOATS = ["f64", "f32", "tf32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3",
          "fp6_e3m2", "fp4_e2m1"]


def test_chain_equals_string_and_prints_canonically() -> None:
    built = ts.bf16 @ accum(ts.f32) @ stochastic_round @ loss_scale(128)
    assert str(built) == "bf16 @accum(f32) @stochastic_round @loss_scale(128.0)"
    assert built.text == "bf16@accum(f32)@stochastic_round@loss_scale(128.0)"
    assert ts.parse_policy(str(built)) == built
    assert ts.parse_policy(built.text) == built
    assert ts.parse_policy("fp8_e4m3@accum(fp32)@loss_scale(128)") == \
        ts.fp8_e4m3 @ accum(ts.fp32) @ loss_scale(128.0)
    assert ts.parse_policy("fp32") is ts.f32
    assert ts.parse_policy("ts.bf16 @ts.accum(ts.f32)") == ts.bf16 @ accum(ts.f32)
    assert repr(ts.bf16) == "ts.bf16" and str(ts.bf16) == "bf16"


def test_modifier_order_does_not_matter_and_seeds_print() -> None:
    a = ts.f16 @ loss_scale(8) @ stochastic_round(seed=7) @ accum("f32")
    b = ts.f16 @ accum(ts.f32) @ stochastic_round(seed=7) @ loss_scale(8.0)
    assert a == b and hash(a) == hash(b)
    assert str(a) == "f16 @accum(f32) @stochastic_round(seed=7) @loss_scale(8.0)"
    assert ts.parse_policy("f16 @stochastic_round(seed=7)") == ts.f16 @ stochastic_round(7)
    assert str(ts.f16 @ stochastic_round()) == "f16 @stochastic_round"


def test_decorator_like_spelling() -> None:
    # ``bf16 @accum(f32)`` parses as bf16.__matmul__(accum(f32)).
    pol = eval("bf16 @accum(f32)", {"bf16": ts.bf16, "accum": accum, "f32": ts.f32})
    assert pol == ts.Policy(ts.bf16, accum=ts.f32)
    assert ("bf16" @ accum("f32")) == pol


def test_accum_defaults() -> None:
    assert ts.accum_of(ts.bf16) == ts.f32 and ts.accum_of(ts.fp4) == ts.f32
    assert ts.accum_of(ts.f64) == ts.f64 and ts.accum_of(ts.tf32) == ts.f32
    assert ts.accum_of(ts.int8) == ts.int32 and ts.accum_of(ts.c64) == ts.c64
    assert ts.accum_of("bf16 @accum(f64)") == ts.f64
    assert (ts.fp8 @ loss_scale(4)).accum_dtype == ts.f32
    assert ts.storage_of("fp8_e4m3 @accum(f32)") == ts.fp8_e4m3
    assert ts.loss_scale_of(ts.bf16 @ loss_scale(2)) == 2.0
    assert ts.loss_scale_of(ts.bf16) is None
    assert ts.element("bf16 @accum(f32)") == ts.bf16 @ accum(ts.f32)
    assert ts.element(np.float32) == ts.f32


@pytest.mark.parametrize("make", [
    lambda: ts.bf16 @ 3,
    lambda: ts.bf16 @ ts.f32,
    lambda: ts.bf16 @ "f32",
    lambda: ts.bf16 @ accum(ts.f32) @ accum(ts.f32),
    lambda: ts.bf16 @ stochastic_round @ stochastic_round(seed=2),
    lambda: ts.bf16 @ loss_scale(2) @ loss_scale(2),
    lambda: ts.bf16 @ accum(ts.f16),
    lambda: ts.f32 @ accum(ts.bf16),
    lambda: ts.bf16 @ accum(ts.int32),
    lambda: ts.int8 @ accum(ts.f32),
    lambda: ts.int32 @ accum(ts.int8),
    lambda: loss_scale(0),
    lambda: loss_scale(-1.0),
    lambda: loss_scale(math.inf),
    lambda: loss_scale(math.nan),
    lambda: loss_scale("big"),
    lambda: stochastic_round(seed=-1),
    lambda: ts.Policy(ts.bf16, accum=ts.f16),
    lambda: ts.parse_policy("bf16 @"),
    lambda: ts.parse_policy("bf16 @accum"),
    lambda: ts.parse_policy("bf16 @foo(1)"),
    lambda: ts.parse_policy("bf16 @ 3"),
    lambda: ts.parse_policy("bf16 @accum(f32, f64)"),
    lambda: ts.parse_policy("bf16 @loss_scale(x)"),
    lambda: ts.parse_policy("bf16 @accum(f32) @accum(f32)"),
    lambda: ts.parse_policy("bf16 + 1"),
])
def test_malformed_chains_raise_policy_error(make: Callable[[], object]) -> None:
    with pytest.raises(PolicyError) as info:
        make()
    assert info.value.hint


def test_errors_name_the_bad_token() -> None:
    with pytest.raises(DTypeError, match="f33"):
        ts.parse_policy("bf16 @accum(f33)")
    with pytest.raises(DTypeError, match="bogus"):
        ts.parse_policy("bogus @accum(f32)")
    with pytest.raises(PolicyError, match="foo"):
        ts.parse_policy("bf16 @foo")
    with pytest.raises(PolicyError) as info:
        ts.bf16 @ ts.f32
    assert "accum(f32)" in info.value.hint
    assert "test_policy.py" in str(info.value)  # the user's file:line comes first


@st.composite
def policies(draw: st.DrawFn) -> ts.Policy:
    storage = ts.dtype(draw(st.sampled_from(FLOATS)))
    pol = ts.Policy(storage)
    mods = []
    if draw(st.booleans()):
        wider = [f for f in FLOATS if ts.promote(storage, ts.dtype(f)) == ts.dtype(f)]
        mods.append(accum(draw(st.sampled_from(wider))))
    if draw(st.booleans()):
        mods.append(stochastic_round(seed=draw(st.integers(0, 2**40))))
    if draw(st.booleans()):
        scale = draw(st.floats(1e-30, 1e30, allow_nan=False, allow_infinity=False))
        mods.append(loss_scale(scale))
    for mod in draw(st.permutations(mods)):
        pol = pol @ mod
    return pol


@given(policies())
def test_str_parse_round_trip(pol: ts.Policy) -> None:
    for text in (str(pol), pol.text):
        parsed = ts.parse_policy(text)
        if pol.accum is None and not pol.stochastic_round and pol.loss_scale is None:
            assert parsed == pol.storage
        else:
            assert parsed == pol
            assert str(parsed) == str(pol)


def test_precision_policy_seed_text() -> None:
    @ts.precision_policy
    class QuantizedPolicy:
        storage = ts.int8
        scale = ts.f32
        compute = ts.f32
        accumulate = ts.f32
        def quantize(self, x: ts.f32) -> ts.int8:
            scale = ts.max(ts.abs(x)) / 127.0
            return ts.round(x / scale).astype(ts.int8), scale
        def dequantize(self, x: ts.int8, scale: ts.f32) -> ts.f32:
            return x.astype(ts.f32) * scale

    assert isinstance(QuantizedPolicy, ts.PolicyClass)
    assert QuantizedPolicy.storage == ts.int8 and QuantizedPolicy.compute == ts.f32
    assert QuantizedPolicy.accum_dtype == ts.f32 and QuantizedPolicy.scale == ts.f32
    assert str(QuantizedPolicy) == "QuantizedPolicy"
    method = QuantizedPolicy.quantize
    assert isinstance(method.__self__, QuantizedPolicy.user_class)
    assert method.__func__ is QuantizedPolicy.user_class.quantize
    assert ts.storage_of(QuantizedPolicy) == ts.int8
    assert ts.dtype(QuantizedPolicy) == ts.int8
    assert ts.element(QuantizedPolicy) is QuantizedPolicy
    with pytest.raises(AttributeError):
        QuantizedPolicy.no_such_method  # noqa: B018


def test_precision_policy_methods_are_callable() -> None:
    @ts.precision_policy
    class Scaled:
        storage = "fp8_e4m3"
        factor = 4.0

        def dequantize(self, x: np.ndarray) -> np.ndarray:
            return x * self.factor

    assert Scaled.dequantize(np.array([1.0, 2.0])).tolist() == [4.0, 8.0]
    assert Scaled.accum_dtype == ts.f32  # compute defaults to storage


def test_precision_policy_needs_storage() -> None:
    with pytest.raises(PolicyError, match="storage"):
        @ts.precision_policy
        class NoStorage:
            compute = ts.f32
    with pytest.raises(PolicyError):
        @ts.precision_policy
        class BadAccum:
            storage = ts.f32
            accumulate = ts.bf16
