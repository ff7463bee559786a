"""Error bounds of the fast-mode kernels that reassociate, derived from the formats and
the reduction lengths (docs/schedule.md, "The fast-mode bound").

A fast-mode kernel keeps no bit contract; what it promises is that its result stays
within a bound of the graph interpreter's exact-mode result. Both are compared with
the exact real value, so the bound is the sum of the fast kernel's error and the
graph's own rounding error, each from the standard results (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., 2002):

* a float dot product or sum of ``n`` terms computed in any order in a format of unit
  roundoff ``u`` has absolute error at most ``gamma_n sum |terms|``, ``gamma_n = n u /
  (1 - n u)`` (Higham, eq. 3.5 and sec. 4.2); a sum of positive terms has relative
  error at most ``gamma_{n-1}``;
* each rounding of a value to a format with unit roundoff ``u_f`` is a relative error
  of at most ``u_f``;
* NumPy's float32 ``exp``, which the tile simulator's fast mode runs, is accurate to
  within :data:`EXP_ULPS` units in the last place (NumPy 1.18 release notes: 2.52 ulp
  for the SIMD float32 ``exp``), a relative error of at most ``EXP_ULPS * 2^-23``;
* a perturbation of a score by at most ``delta`` moves ``exp(score)`` by a factor in
  ``[e^-delta, e^delta]``.

Terms that underflow float32 (weights below ``2^-126``) are bounded absolutely.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: NumPy's float32 exp, in units in the last place (with room above the documented 2.52)
EXP_ULPS = 4
#: unit roundoff of the float formats the kernels compute in or round to
UNIT_ROUNDOFF = {"f64": 2.0**-53, "f32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8,
                 "f16": 2.0**-11}
#: float32: the fast kernels' arithmetic
U32 = UNIT_ROUNDOFF["f32"]


def gamma(n: int, u: float = U32) -> float:
    """``gamma_n = n u / (1 - n u)``, the constant of an ``n``-term sum or dot product."""
    if n * u >= 0.5:
        raise ValueError(f"a reduction of {n} terms has no useful bound at u = {u}")
    return n * u / (1 - n * u)


def attention_bound(q: Any, k: Any, v: Any, scale: float, *, block: int,
                    bias: Any = None, keep: Any = None, fill: float = -1e9,
                    formats: tuple[str, str, str] = ("f32", "f32", "f32")) -> np.ndarray:
    """The largest difference, element by element, between the fast-mode online-softmax
    attention ``softmax(scale * q kᵀ [+ bias] [where keep else fill]) v`` over key blocks
    of ``block`` and the graph interpreter's exact-mode result. ``formats`` are the
    scores', the softmax's and the output's elements."""
    us, up, uo = (UNIT_ROUNDOFF[f] for f in formats)
    u = U32
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    kt = np.swapaxes(k64, -1, -2)
    d, n = q64.shape[-1], k64.shape[-2]
    blocks = math.ceil(n / block)
    s = (q64 @ kt) * scale
    mag = (np.abs(q64) @ np.abs(kt)) * abs(scale)  # |scale| sum |q||k| per score
    # the scores against the exact value: the fast kernel's f32 dot product (gamma_d),
    # the graph's one rounding, then each rounds to the accumulator, to the scores'
    # format and after the scaling; the float64 reference itself is within 2 gamma_d
    ref = 2 * gamma(d, UNIT_ROUNDOFF["f64"]) * mag
    fast = mag * ((1 + gamma(d)) * (1 + u) * (1 + us) ** 2 - 1) + ref
    graph = mag * ((1 + u) * (1 + us) ** 2 - 1) + ref
    if bias is not None:
        s = s + np.asarray(bias, dtype=np.float64)
        fast = fast + us * (np.abs(s) + fast)  # the addition's rounding
        graph = graph + us * (np.abs(s) + graph)
    if keep is not None:  # a selected constant carries no error
        s = np.where(keep, s, fill)
        fast, graph = np.where(keep, fast, 0.0), np.where(keep, graph, 0.0)
    top = s.max(axis=-1, keepdims=True)
    with np.errstate(under="ignore"):
        w = np.exp(s - top)
    p = w / w.sum(axis=-1, keepdims=True)
    av = np.abs(v64)
    weighted = p @ av  # sum_j p_j |v_j|, which bounds |o|
    # float64's own evaluation of the reference softmax and the graph's
    eps64 = (n + d + 8) * UNIT_ROUNDOFF["f64"]
    # the fast weights: the exponent's error (the scores', the subtraction of the running
    # max, the rescalings' subtractions, which add up to the range the max moves over),
    # then exp and one multiplication per rescaling, at most one per block
    moves = top - s[..., :block].max(axis=-1, keepdims=True)
    exponent = fast + u * (np.abs(s - top) + fast) + u * moves
    # a weight below float64's range whose score error cannot lift it into float32's
    # (a masked key) is 0 in every computation: it contributes nothing
    dead = (p == 0) & (np.maximum(exponent, graph) < np.abs(s - top) - 800)
    with np.errstate(over="ignore"):
        factor = np.exp(np.where(dead, 0.0, exponent))
    factor = factor * ((1 + EXP_ULPS * 2.0**-23) * (1 + u)) ** (blocks + 1) * (1 + eps64)
    chain = gamma(n + 2 * blocks)  # l and acc: n terms, a rescaled carry per block
    fast_err = _weights_error(p, factor, up, chain) @ av
    fast_err = fast_err + chain * (weighted + fast_err)
    fast_err = fast_err + ((1 + u) * (1 + uo) - 1) * (weighted + fast_err)
    fast_err = fast_err + n * 2.0**-126 * av.max(axis=-2, keepdims=True)  # underflow
    with np.errstate(over="ignore"):
        graph_factor = np.exp(np.where(dead, 0.0, graph)) * (1 + eps64)
    graph_err = _weights_error(p, graph_factor, up, 0.0) @ av
    graph_err = graph_err + ((1 + u) * (1 + uo) - 1) * (weighted + graph_err)
    return np.asarray(fast_err + graph_err)


def _weights_error(p: np.ndarray, factor: np.ndarray, up: float, chain: float) -> np.ndarray:
    """``p_j`` times the relative error of the normalised weight ``j`` when each weight
    is off by a factor within ``[1 / factor, factor]``, rounded to the softmax's format
    (``up``) and normalised by a sum off by ``chain`` relative."""
    with np.errstate(invalid="ignore", over="ignore"):
        # (a weight of 0 whose factor is infinite leaves no bound: NaN, then inf)
        spread = (p * (factor - 1)).sum(axis=-1, keepdims=True)  # the normaliser's error
        tau = factor * (1 + up) / ((1 - spread) * (1 - chain)) - 1
        out = np.where(spread < 1, p * tau, np.inf)
    return np.asarray(np.where(np.isnan(out), np.inf, out))


def matmul_bound(a: Any, b: Any, out: str = "f32") -> np.ndarray:
    """A bound on ``|fast - graph|`` for ``a @ b`` summed in float32 in any order (the
    slices of split-K, then their sum), rounded to ``out``, against the graph's exact
    product rounded once to ``out``: with ``T = |a| @ |b|`` and ``o`` the exact value,
    the float32 sum is within ``gamma_K T``, its rounding adds ``u_out`` of its
    magnitude and the graph's rounding ``u_out |o|``, ``|o| <= T``; products that
    underflow float32 add ``K 2^-149``."""
    wa, wb = (np.abs(np.asarray(x, dtype=np.float64)) for x in (a, b))
    k = wa.shape[-1]
    u_out = UNIT_ROUNDOFF[out]
    total = (wa @ wb) * (1 + gamma(2 * k, 2.0**-53))  # (T itself, computed in float64)
    return np.asarray(total * (gamma(k) * (1 + u_out) + 2 * u_out) + k * 2.0**-149)


def within(got: Any, want: Any, bound: np.ndarray) -> bool:
    """Whether every element of ``got`` is within ``bound`` of ``want`` (NaN where
    ``want`` is NaN)."""
    g, w = (np.asarray(x, dtype=np.float64) for x in (got, want))
    nan = np.isnan(w)
    if not np.array_equal(nan, np.isnan(g)):
        return False
    return bool(np.all(np.abs(g - w)[~nan] <= bound[~nan]))


__all__ = ["EXP_ULPS", "UNIT_ROUNDOFF", "attention_bound", "gamma", "matmul_bound", "within"]
