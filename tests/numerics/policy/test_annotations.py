"""Tensor[...] specs: parsing of dims and elements, binding shapes, errors."""

from __future__ import annotations

import pytest

import tessera.numerics as ts
from tessera.errors import DimBindingError, DTypeError
from tessera.numerics.policy.annotations import DimEnv
from tessera.numerics.policy.dims import DimExpr, parse_dim


def test_seed_forms() -> None:
    spec = ts.tensor_spec(("B", "D", ts.fp8_e4m3 @ ts.accum(ts.fp32)))
    assert spec.dims == ("B", "D") and spec.element == ts.fp8_e4m3 @ ts.accum(ts.f32)
    assert str(spec) == 'Tensor["B", "D", fp8_e4m3 @accum(f32)]'
    assert ts.tensor_spec(("n", ts.f32)) == ts.TensorSpec(("n",), ts.f32)
    spec = ts.tensor_spec(("B*H", "S", "D", ts.bf16))
    assert spec.dims[0] == DimExpr("*", "B", "H") and spec.rank == 3
    assert str(spec) == 'Tensor["B*H", "S", "D", bf16]'
    spec = ts.tensor_spec((128, "K", "f32"))
    assert spec.dims == (128, "K") and spec.element is ts.f32
    assert str(spec) == 'Tensor[128, "K", f32]'
    assert ts.tensor_spec(("M", "bf16 @accum(f32)")).element == ts.bf16 @ ts.accum(ts.f32)
    assert ts.tensor_spec(("M", "N")).element is None
    assert ts.tensor_spec("n").dims == ("n",)


def test_policy_class_element() -> None:
    @ts.precision_policy
    class QuantizedPolicy:
        storage = ts.int8

    spec = ts.tensor_spec(("M", "N", QuantizedPolicy))
    assert spec.element is QuantizedPolicy
    assert str(spec) == 'Tensor["M", "N", QuantizedPolicy]'


def test_expression_normal_form() -> None:
    assert parse_dim("B * H") == parse_dim("B*H") == parse_dim("(B*H)")
    assert str(parse_dim("a - (b - c)")) == "a-(b-c)"
    assert str(parse_dim("(a + b) * c")) == "(a+b)*c"
    assert str(parse_dim("a + b + c")) == "a+b+c"
    assert str(parse_dim("N // 2 + 1")) == "N//2+1"
    assert parse_dim("64") == 64


@pytest.mark.parametrize("items", [
    (3.0, "K", ts.f32), ("", ts.f32), (-1, ts.f32), ("B**", ts.f32), ("B**2",),
    ("B/2",), ("f(x)",), (True, ts.f32), ("-N",),
])
def test_bad_dims(items: tuple) -> None:
    with pytest.raises(DimBindingError) as info:
        ts.tensor_spec(items)
    assert info.value.hint


def test_element_not_last() -> None:
    with pytest.raises(DTypeError):
        ts.tensor_spec((ts.f32, "N"))


def test_binding_is_consistent_across_arguments() -> None:
    env = DimEnv()
    a = ts.tensor_spec(("M", "K", ts.f32))
    b = ts.tensor_spec(("K", "N", ts.f32))
    a.bind((8, 64), env, arg_name="A")
    b.bind((64, 16), env, arg_name="B")
    assert dict(env) == {"M": 8, "K": 64, "N": 16}
    with pytest.raises(DimBindingError,
                       match="dim 'K' is 64 in argument 'A' but 32 in argument 'C'"):
        b.bind((32, 16), env, arg_name="C")


def test_plain_dict_env_and_literal_dims() -> None:
    env: dict[str, int] = {}
    spec = ts.tensor_spec((128, "K", "f32"))
    spec.bind((128, 5), env, arg_name="x")
    assert env == {"K": 5}
    with pytest.raises(DimBindingError) as info:
        spec.bind((64, 5), env, arg_name="y")
    msg = str(info.value)
    assert "'y'" in msg and "dim 0" in msg and "64" in msg and "128" in msg
    with pytest.raises(DimBindingError, match="rank"):
        spec.bind((128,), env, arg_name="z")


def test_expressions_bind_and_solve() -> None:
    spec = ts.tensor_spec(("B*H", "S", "D", ts.bf16))
    env = DimEnv()
    spec.bind((32, 128, 64), env, arg_name="Q")
    assert env["B*H"] == 32 and "B" not in env  # neither symbol known: composite name
    spec.bind((32, 128, 64), env, arg_name="K")
    with pytest.raises(DimBindingError, match="'B\\*H' is 32 in argument 'Q'"):
        spec.bind((16, 128, 64), env, arg_name="V")

    env = DimEnv({"H": 8})
    spec.bind((32, 128, 64), env, arg_name="Q")
    assert env["B"] == 4  # one unknown factor: solved
    with pytest.raises(DimBindingError):
        spec.bind((36, 128, 64), DimEnv({"H": 8}), arg_name="Q")  # 36 is not 8 * B

    env = DimEnv({"B": 2, "H": 8})
    spec.bind((16, 1, 1), env, arg_name="Q")
    with pytest.raises(DimBindingError, match="'B\\*H' = 16"):
        spec.bind((15, 1, 1), env, arg_name="K")

    off = ts.tensor_spec(("N+1",))
    env = DimEnv()
    off.bind((9,), env, arg_name="x")
    assert env["N"] == 8
    with pytest.raises(DimBindingError):
        ts.tensor_spec(("4-N",)).bind((6,), DimEnv(), arg_name="y")


def test_composite_checked_when_its_symbols_arrive() -> None:
    env = DimEnv()
    ts.tensor_spec(("B*H",)).bind((32,), env, arg_name="Q")
    with pytest.raises(DimBindingError, match="B\\*H"):
        ts.tensor_spec(("B", "H")).bind((4, 4), env, arg_name="mask")
    env = DimEnv()
    ts.tensor_spec(("B*H",)).bind((32,), env, arg_name="Q")
    ts.tensor_spec(("B", "H")).bind((4, 8), env, arg_name="mask")
    assert env["B"] * env["H"] == env["B*H"]
