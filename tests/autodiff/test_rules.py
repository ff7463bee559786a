"""Every differentiable Graph IR op: VJP and JVP against float64 finite differences.

Each case is a tessera function and an independent NumPy float64 reference of the same
mathematical function; ``check_derivatives`` compares ``ts.vjp`` and ``ts.jvp`` with the
finite-difference Jacobian of the reference and checks ``<vjp(ct), t> == <ct, jvp(t)>``.
Complex ops are tested through real inputs and real outputs (``z = x + i y``), which
is what a real loss sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tests.autodiff.util import away_from_zero, check_derivatives, close, distinct, shapes, values

SETTINGS = settings(max_examples=25, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)

_erf = np.vectorize(math.erf, otypes=[np.float64])
C = 0.6 - 1.3j  # a complex constant that mixes real and imaginary parts


def _z(x: Any, y: Any) -> Any:
    """The complex tensor ``x + i y`` built from two real tensors."""
    return ts.cast(x, ts.c128) + ts.cast(y, ts.c128) * 1j


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


# name -> (tessera function, NumPy reference, transform of raw draws into the domain)
Case = tuple[Callable[..., Any], Callable[..., np.ndarray], Callable[[np.ndarray], np.ndarray]]


def ident(x: np.ndarray) -> np.ndarray:
    """Any value is in the domain."""
    return x


def positive(x: np.ndarray) -> np.ndarray:
    """Into the domain of log, sqrt and real powers: at least 0.25."""
    return np.abs(x) + 0.25


UNARY: dict[str, Case] = {
    "neg": (lambda x: -x, np.negative, ident),
    "exp": (ts.exp, np.exp, ident),
    "log": (ts.log, np.log, positive),
    "tanh": (ts.tanh, np.tanh, ident),
    "sqrt": (ts.sqrt, np.sqrt, positive),
    "relu": (ts.relu, lambda x: np.maximum(x, 0.0), away_from_zero),
    "sin": (ts.sin, np.sin, ident),
    "cos": (ts.cos, np.cos, ident),
    "erf": (ts.erf, _erf, ident),
    "abs": (ts.abs, np.abs, away_from_zero),
    "gelu_tanh": (ts.gelu, _gelu_tanh, ident),
    "gelu_erf": (lambda x: ts.gelu(x, approximate=False), _gelu_erf, ident),
    "imag_of_real": (lambda x: x * 2.0 + ts.imag(x), lambda x: 2.0 * x, ident),
    "real_of_real": (lambda x: ts.real(x) * 3.0, lambda x: 3.0 * x, ident),
    "cast_to_complex": (lambda x: ts.imag(ts.cast(x, ts.c128) * C),
                        lambda x: np.imag(x.astype(np.complex128) * C), ident),
    "conj_of_real": (lambda x: ts.conj(x) * x, lambda x: x * x, ident),
}

# complex ops as functions of (x, y) with z = x + i y
COMPLEX: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray]]] = {
    "abs": (lambda x, y: ts.abs(_z(x, y)), lambda x, y: np.abs(x + 1j * y)),
    "real": (lambda x, y: ts.real(_z(x, y) * C), lambda x, y: np.real((x + 1j * y) * C)),
    "imag": (lambda x, y: ts.imag(_z(x, y) * C), lambda x, y: np.imag((x + 1j * y) * C)),
    "conj": (lambda x, y: ts.imag(ts.conj(_z(x, y)) * C),
             lambda x, y: np.imag(np.conj(x + 1j * y) * C)),
    "mul": (lambda x, y: ts.real(_z(x, y) * _z(y, x)),
            lambda x, y: np.real((x + 1j * y) * (y + 1j * x))),
    "div": (lambda x, y: ts.imag(_z(x, y) / (_z(y, x) + 3.0)),
            lambda x, y: np.imag((x + 1j * y) / (y + 1j * x + 3.0))),
    "exp": (lambda x, y: ts.real(ts.exp(_z(x, y)) * C),
            lambda x, y: np.real(np.exp(x + 1j * y) * C)),
    "matmul": (lambda x, y: ts.real(ts.matmul(_z(x, y), ts.transpose(_z(y, x)) * C)),
               lambda x, y: np.real((x + 1j * y) @ (y + 1j * x).T * C)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_unary(name: str, data: st.DataObject, seed: int) -> None:
    fn, ref, domain = UNARY[name]
    x = domain(data.draw(values(data.draw(shapes(0, 3)))))
    check_derivatives(fn, ref, [x], seed)


@pytest.mark.parametrize("name", sorted(COMPLEX))
@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_complex(name: str, data: st.DataObject, seed: int) -> None:
    fn, ref = COMPLEX[name]
    shape = data.draw(shapes(2, 2))
    x = data.draw(values(shape))
    if name == "abs":  # |z| has a kink at z == 0
        x = away_from_zero(x, 0.2)
    check_derivatives(fn, ref, [x, data.draw(values(shape))], seed)


BINARY: dict[str, Case] = {
    "add": (lambda a, b: a + b, np.add, ident),
    "sub": (lambda a, b: a - b, np.subtract, ident),
    "mul": (lambda a, b: a * b, np.multiply, ident),
    "div": (lambda a, b: a / b, np.divide, away_from_zero),
    "pow": (lambda a, b: a**b, np.power, ident),
    "maximum": (ts.maximum, np.maximum, ident),
    "minimum": (ts.minimum, np.minimum, ident),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_binary(name: str, data: st.DataObject, seed: int) -> None:
    fn, ref, domain = BINARY[name]
    shape = data.draw(shapes(0, 3))
    a, b = data.draw(values(shape)), domain(data.draw(values(shape, 0.5, 2.0)))
    if name == "pow":
        a = positive(a)  # real powers need a positive base
        b = data.draw(values(shape))
    if name in ("maximum", "minimum"):
        b = a + away_from_zero(data.draw(values(shape)))  # no ties: the kink
    if name == "div":
        b = np.where(data.draw(values(shape)) >= 0, b, -b)  # both signs, never 0
    check_derivatives(fn, ref, [a, b], seed)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_broadcasting_binary_ops(data: st.DataObject, seed: int) -> None:
    """Broadcast operands (rank and size-1 axes) get their cotangents summed back."""
    m, n, k = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), data.draw(
        st.integers(1, 3))
    col, row, full = (data.draw(values(s)) for s in [(m, 1), (n,), (k, m, n)])
    scalar = data.draw(values(()))
    check_derivatives(lambda c, r, f, s: (c * r - f) / (2.0 + ts.sin(c)) + s * f,
                      lambda c, r, f, s: (c * r - f) / (2.0 + np.sin(c)) + s * f,
                      [col, row, full, scalar], seed)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_where(data: st.DataObject, seed: int) -> None:
    shape = data.draw(shapes(1, 3))
    mask = data.draw(values(shape)) > 0
    a, b = data.draw(values(shape)), data.draw(values(shape))
    check_derivatives(lambda a, b: ts.where(mask, a * a, ts.sin(b)),
                      lambda a, b: np.where(mask, a * a, np.sin(b)), [a, b], seed)


MATMUL_SHAPES = [
    ((3, 4), (4, 2)),        # 2-D
    ((2, 3, 4), (2, 4, 2)),  # batched
    ((2, 3, 4), (4, 2)),     # batch broadcast of the right operand
    ((4,), (4,)),            # vector . vector -> scalar
    ((4,), (4, 3)),          # vector @ matrix
    ((3, 4), (4,)),          # matrix @ vector
    ((2, 1, 3), (3, 2)),     # 1 x k rows
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=SEEDS)
def test_matmul(sa: tuple[int, ...], sb: tuple[int, ...], data: st.DataObject,
                seed: int) -> None:
    a, b = data.draw(values(sa)), data.draw(values(sb))
    check_derivatives(ts.matmul, np.matmul, [a, b], seed)


def _axis_choices(rank: int) -> st.SearchStrategy:
    singles = [k for k in range(-rank, rank)]
    pairs = [(0, rank - 1)] if rank >= 2 else []
    return st.sampled_from([None, *singles, *pairs])


REDUCTIONS: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray]]] = {
    "sum": (ts.sum, np.sum),
    "mean": (ts.mean, np.mean),
    "max": (ts.max, np.max),
    "min": (ts.min, np.min),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_reductions(name: str, data: st.DataObject, seed: int) -> None:
    fn, ref = REDUCTIONS[name]
    x = distinct(data.draw(values(data.draw(shapes(1, 3)))))  # no ties at the extremum
    axis = data.draw(_axis_choices(x.ndim))
    keepdims = data.draw(st.booleans())
    check_derivatives(lambda x: fn(x, axis=axis, keepdims=keepdims),
                      lambda x: ref(x, axis=axis, keepdims=keepdims), [x], seed)


def test_max_min_ties_share_the_cotangent() -> None:
    """Tied extrema split the cotangent equally (the rule JAX uses), and so do ties of
    ``maximum``/``minimum``: the gradient is then a valid subgradient (sums to 1)."""
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    close(ts.grad(lambda x: ts.max(x))(x), [[0, 0.5, 0.5], [0, 0, 0]])
    close(ts.grad(lambda x: ts.sum(ts.max(x, axis=1)))(x), [[0, 0.5, 0.5], [1 / 3] * 3])
    close(ts.grad(lambda x: ts.sum(ts.min(x, axis=0, keepdims=True)))(x),
          [[1, 0, 0], [0, 1, 1]])
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0])
    ga, gb = ts.grad(lambda a, b: ts.sum(ts.maximum(a, b)), argnums=(0, 1))(a, b)
    close(ga, [0.5, 0, 1])
    close(gb, [0.5, 1, 0])
    ga, gb = ts.grad(lambda a, b: ts.sum(ts.minimum(a, b)), argnums=(0, 1))(a, b)
    close(ga, [0.5, 1, 0])
    close(gb, [0.5, 0, 1])
    # maximum(x, x) is x: the two halves add up to the identity's derivative
    close(ts.grad(lambda x: ts.sum(ts.maximum(x, x) * x))(a), 2 * a)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_softmax(data: st.DataObject, seed: int) -> None:
    x = data.draw(values(data.draw(shapes(1, 3))))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    check_derivatives(lambda x: ts.softmax(x, axis=axis), lambda x: _softmax(x, axis), [x],
                      seed)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_mse(data: st.DataObject, seed: int) -> None:
    shape = data.draw(shapes(0, 3))
    a, b = data.draw(values(shape)), data.draw(values(shape))
    check_derivatives(ts.mse, lambda a, b: np.mean((a - b) ** 2), [a, b], seed)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_transpose(data: st.DataObject, seed: int) -> None:
    x = data.draw(values(data.draw(shapes(1, 4, 3))))
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    w = np.arange(x.size, dtype=np.float64).reshape([x.shape[p] for p in perm])
    check_derivatives(lambda x: ts.transpose(x, perm) * w, lambda x: np.transpose(x, perm) * w,
                      [x], seed)
    check_derivatives(lambda x: x.T, lambda x: x.T, [x], seed)


@SETTINGS
@given(data=st.data(), seed=SEEDS)
def test_reshape(data: st.DataObject, seed: int) -> None:
    x = data.draw(values(data.draw(shapes(1, 3))))
    target = data.draw(st.sampled_from([(-1,), (x.size, 1), tuple(reversed(x.shape)),
                                        (1, *x.shape, 1)]))
    w = np.linspace(-1.0, 2.0, x.size).reshape(np.empty(x.shape).reshape(target).shape)
    check_derivatives(lambda x: ts.reshape(x, target) * w, lambda x: x.reshape(target) * w,
                      [x], seed)


INDEXES = [np.s_[1:3], np.s_[:, ::2], np.s_[0], np.s_[None], np.s_[..., 1], np.s_[1::2, 2],
           np.s_[-1, None, 1:4:2], np.s_[:, :]]


@pytest.mark.parametrize("index", INDEXES, ids=[str(i) for i in INDEXES])
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=SEEDS)
def test_getitem(index: Any, data: st.DataObject, seed: int) -> None:
    x = data.draw(values((4, 5)))
    # a nonlinear use of the slice, so repeated cotangents are not all alike
    check_derivatives(lambda x: x[index] ** 2 + x[index], lambda x: x[index] ** 2 + x[index],
                      [x], seed)


def test_getitem_twice_accumulates() -> None:
    """Overlapping slices add their cotangents at the shared elements."""
    x = np.arange(6.0)
    close(ts.grad(lambda x: ts.sum(x[1:4]) + ts.sum(x[::2] * 10.0) + x[3] * 100.0)(x),
          [10, 1, 11, 101, 10, 0])


SPECTRAL: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray]]] = {
    # the real losses of the brief
    "sum_abs_fft_sq": (lambda x, y: ts.sum(ts.abs(ts.fft(x)) ** 2) + ts.sum(y),
                       lambda x, y: np.sum(np.abs(np.fft.fft(x)) ** 2) + np.sum(y)),
    "sum_real_ifft_w": (lambda x, y: ts.sum(ts.real(ts.ifft(x)) * y),
                        lambda x, y: np.sum(np.real(np.fft.ifft(x)) * y)),
    # vector outputs from complex input, along both axes
    "fft_complex": (lambda x, y: ts.real(ts.fft(_z(x, y)) * C),
                    lambda x, y: np.real(np.fft.fft(x + 1j * y) * C)),
    "fft_axis0": (lambda x, y: ts.imag(ts.fft(_z(x, y), axis=0)),
                  lambda x, y: np.imag(np.fft.fft(x + 1j * y, axis=0))),
    "ifft_complex": (lambda x, y: ts.imag(ts.ifft(_z(x, y)) * C),
                     lambda x, y: np.imag(np.fft.ifft(x + 1j * y) * C)),
    # |.|**2 rather than |.|: a DFT coefficient can be 0, where |.| has a kink
    "ifft_fft": (lambda x, y: ts.abs(ts.ifft(ts.fft(_z(x, y) * _z(y, x)), axis=0)) ** 2,
                 lambda x, y: np.abs(np.fft.ifft(np.fft.fft((x + 1j * y) * (y + 1j * x)),
                                                 axis=0)) ** 2),
}


@pytest.mark.parametrize("name", sorted(SPECTRAL))
@settings(max_examples=12, deadline=None)
@given(data=st.data(), seed=SEEDS)
def test_fft(name: str, data: st.DataObject, seed: int) -> None:
    fn, ref = SPECTRAL[name]
    shape = data.draw(shapes(2, 2, 5))
    x, y = data.draw(values(shape)), data.draw(values(shape))
    check_derivatives(fn, ref, [x, y], seed)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_grad_with_respect_to_complex_argument(data: st.DataObject) -> None:
    """For a real loss of complex z the gradient is dL/d(re z) + i dL/d(im z)."""
    shape = data.draw(shapes(1, 2))
    x, y, w = (data.draw(values(shape)) for _ in range(3))
    z = x + 1j * y

    def loss(z: Any) -> Any:
        return ts.sum(ts.abs(z) ** 2 * w) + ts.sum(ts.real(ts.fft(z) * C)) + \
            ts.sum(ts.imag(ts.exp(z)))

    def ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        z = x + 1j * y
        return np.sum(np.abs(z) ** 2 * w) + np.sum(np.real(np.fft.fft(z) * C)) + \
            np.sum(np.imag(np.exp(z)))

    from tests.autodiff.util import jacobians

    dx, dy = jacobians(ref, [x, y])
    got = ts.grad(loss)(z)
    assert np.asarray(got).dtype == np.complex128
    close(got, dx + 1j * dy)


def test_cast_pulls_back_in_the_source_format() -> None:
    """Through a narrowing cast the cotangent comes back in the argument's format."""
    x = np.array([0.1, 0.2, 0.3])
    w = np.array([1.0 / 3.0, 2.0, -1.5])
    g = ts.grad(lambda x: ts.sum(ts.cast(x, ts.f32) * w.astype(np.float32)))(x)
    assert np.asarray(g).dtype == np.float64
    close(g, w.astype(np.float32).astype(np.float64), rtol=0, atol=0)
    g16 = ts.grad(lambda x: ts.sum(ts.cast(x, ts.f64) * 3.0))(x.astype(np.float16))
    assert np.asarray(g16).dtype == np.float16
    close(g16, [3.0, 3.0, 3.0], rtol=0, atol=0)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_complex_to_complex_forward_and_reverse(data: st.DataObject) -> None:
    """Holomorphic f: jvp gives f'(z) t and the pullback gives ct * conj(f'(z))."""
    shape = data.draw(shapes(1, 1, 5))
    z = data.draw(values(shape)) + 1j * data.draw(values(shape))
    t = data.draw(values(shape)) + 1j * data.draw(values(shape))
    ct = data.draw(values(shape)) + 1j * data.draw(values(shape))
    for fn, deriv in [(ts.exp, np.exp), (lambda z: 1.0 / (z + 3.0),
                                         lambda z: -1.0 / (z + 3.0) ** 2)]:
        _, tan = ts.jvp(fn, (z,), (t,))
        close(tan, deriv(z) * t, rtol=1e-12, atol=1e-12)
        _, pullback = ts.vjp(fn, z)
        close(pullback(ct)[0], ct * np.conj(deriv(z)), rtol=1e-12, atol=1e-12)
    # a linear map: the DFT matrix F; jvp is F t and the pullback is F^H ct
    f = np.fft.fft(np.eye(z.size))
    _, tan = ts.jvp(lambda z: ts.fft(z) + z * 2.0, (z,), (t,))
    close(tan, f @ t + 2.0 * t, rtol=1e-12, atol=1e-12)
    _, pullback = ts.vjp(lambda z: ts.fft(z) + z * 2.0, z)
    close(pullback(ct)[0], f.conj().T @ ct + 2.0 * ct, rtol=1e-12, atol=1e-12)
