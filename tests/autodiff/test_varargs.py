"""``argnums`` and ``wrt`` address the arguments of the call: ``*args`` elements count one
by one and ``**kwargs`` entries are named by their keyword (grad, value_and_grad, vjp,
jvp).

References are hand-derived NumPy float64 derivatives of L = sum(a * b**2 + c).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tests.autodiff.util import close

RNG = np.random.default_rng(11)
A, B, C = (RNG.normal(size=(2, 3)) for _ in range(3))


def loss(*xs: Any) -> Any:
    a, b, c = xs
    return ts.sum(a * b * b + c)


def loss_kw(a: Any, **terms: Any) -> Any:
    return ts.sum(a * terms["b"] * terms["b"] + terms["c"])


def grads() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dL/da, dL/db, dL/dc)."""
    return B * B, 2 * A * B, np.ones_like(C)


@pytest.mark.parametrize("fn", [loss, ts.jit(loss)])
def test_grad_argnums_index_varargs(fn: Any) -> None:
    da, db, dc = grads()
    close(ts.grad(fn, argnums=1)(A, B, C), db)
    close(ts.grad(fn, argnums=-1)(A, B, C), dc)
    got = ts.grad(fn, argnums=(0, 2))(A, B, C)
    assert isinstance(got, tuple) and len(got) == 2
    close(got[0], da)
    close(got[1], dc)


def test_default_rule_differentiates_every_float_vararg() -> None:
    got = ts.grad(loss)(A, B, C)
    for g, want in zip(got, grads()):
        close(g, want)


def test_value_and_grad_of_varargs() -> None:
    value, db = ts.value_and_grad(loss, argnums=1)(A, B, C)
    close(value, np.sum(A * B * B + C))
    close(db, grads()[1])


def test_wrt_names_keyword_arguments() -> None:
    da, db, dc = grads()
    close(ts.grad(loss_kw, wrt="b")(A, b=B, c=C), db)
    got = ts.grad(loss_kw, wrt=("c", "a"))(A, c=C, b=B)
    close(got[0], dc)
    close(got[1], da)
    # keywords are ordered by name, so argnums=1 is "b" whatever the call's order
    close(ts.grad(loss_kw, argnums=1)(A, c=C, b=B), db)


def test_vjp_and_jvp_of_varargs() -> None:
    out, pullback = ts.vjp(lambda *xs: xs[0] * xs[1], A, B)
    close(out, A * B)
    ct = RNG.normal(size=A.shape)
    ga, gb = pullback(ct)
    close(ga, ct * B)
    close(gb, ct * A)
    ta, tb = RNG.normal(size=A.shape), RNG.normal(size=B.shape)
    out, tangent = ts.jvp(lambda *xs: xs[0] * xs[1], (A, B), (ta, tb))
    close(out, A * B)
    close(tangent, ta * B + A * tb)


def test_out_of_range_argnums_lists_the_arguments() -> None:
    with pytest.raises(ts.ArgumentError) as info:
        ts.grad(loss, argnums=3)(A, B, C)
    text = str(info.value)
    assert "out of range for 3 argument(s) (xs[0], xs[1], xs[2])" in text
    assert "test_varargs.py" in text
    with pytest.raises(ts.ArgumentError, match="argnums must be an int"):
        ts.grad(loss, argnums="1")(A, B, C)
    with pytest.raises(ts.ArgumentError, match="wrt='d' is not an argument"):
        ts.grad(loss_kw, wrt="d")(A, b=B, c=C)
