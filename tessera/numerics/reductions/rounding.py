"""Correctly rounded reductions: the basis of bitwise determinism.

A reduction returns its *exact* value rounded once to the target format, so its bits
cannot depend on summation order, blocking, BLAS or thread count. Three levels:

1. float64 arithmetic (BLAS, ``np.sum``) with a rigorous error bound. Rounding is
   monotone, so when both ends of ``[approx - bound, approx + bound]`` round to the same
   value, that value is the correctly rounded result (``decide``/``round_verified``).
   For matmul, where the exponent range proves every float64 partial sum exact (narrow
   inputs: bf16, fp8, ...), the float64 result is the exact value and is rounded
   directly, ties included.
2. For the few undecided elements, a double-double sum of exact float64 terms with a
   far smaller bound (``exact.refine_sum``); for what that leaves open (exact ties,
   mostly), the same sum with a proof that it is exact, rounded exactly by
   ``round_double_double``.
3. Exact Fraction arithmetic (``exact.exact_sum``/``exact_dot``) for what is left:
   non-finite values, overflowing float64 intermediates, and exponent ranges too wide
   for the proof (about 100 bits).

An exact zero rounds to +0 (as from an accumulator that starts at +0); a nonzero value
that rounds to zero keeps its sign. ``matmul_rounded`` lives in :mod:`.matmul`,
``sum_rounded`` in :mod:`.sums`; both are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from tessera.errors import DTypeError, PolicyError
from tessera.numerics.formats.convert import cast_exact, real_f64
from tessera.numerics.formats.dtypes import DType

U = 2.0**-53  # unit roundoff of float64
TINY = 2.0**-1074  # smallest subnormal float64


def gamma(n: int) -> float:
    """An upper bound on gamma_n = n*u / (1 - n*u), the recursive summation constant,
    inflated so that the float64 bound built from it stays an upper bound."""
    if n * U >= 2.0**-10:
        raise DTypeError(f"a reduction over {n} terms is too long for a float64 error bound",
                         hint="split the reduction into chunks of fewer than 2**43 terms")
    g = n * U / (1 - n * U)
    # Norms, sums of |x| and the products that form a bound are themselves rounded;
    # their relative error is below 4(n + 8)u, which this factor covers with room.
    return g * (1 + 8 * (n + 8) * U)


def target(to: Any) -> DType:
    """The storage format a reduction rounds to (stochastic rounding is refused)."""
    from tessera.numerics.policy.modifiers import Policy, storage_of

    if isinstance(to, Policy) and to.stochastic_round:
        raise PolicyError(
            f"correctly rounded reductions round to nearest, not as {to}",
            hint="reduce to the accumulator format, then convert() with the policy",
        )
    return storage_of(to)


def round_fraction(q: Fraction | int | float, to: Any) -> Any:
    """The exact value ``q`` rounded once (RNE) to ``to``, with ``convert``'s saturation.

    Returns a NumPy scalar of the storage type. Exact zero gives +0; a negative value
    that rounds to zero gives -0.
    """
    fmt_to = target(to)
    if isinstance(q, (complex, np.complexfloating)) and not isinstance(q, (int, float)):
        raise DTypeError(f"cannot round the complex value {q!r} to {fmt_to}",
                         hint="take its real or imaginary part first")
    try:
        q = Fraction(q)
    except (TypeError, ValueError, OverflowError) as err:
        raise DTypeError(f"round_fraction needs a finite real number, got {q!r}: {err}",
                         hint="pass an int, float or Fraction") from None
    if fmt_to.kind == "int":
        info = np.iinfo(fmt_to.np_dtype)
        return fmt_to.np_dtype.type(min(max(round(q), info.min), info.max))
    if fmt_to.kind != "float" or fmt_to.name == "e8m0":
        raise DTypeError(f"round_fraction cannot round to {fmt_to}",
                         hint="round to a real float or int format")
    fmt = fmt_to.format
    if q == 0:
        return cast_exact(np.array(0.0), fmt_to)[()]
    mag = abs(q)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if mag < Fraction(2) ** e:  # now 2**e <= mag < 2**(e+1)
        e -= 1
    quantum = Fraction(2) ** (max(e, fmt.emin) - fmt.nmant)
    value = round(mag / quantum) * quantum  # Fraction rounding is half to even
    if value > fmt.max:
        value = Fraction(fmt.max) if fmt.saturating else None
    magnitude = math.inf if value is None else float(value)
    # (the sign by comparison: q itself may be past float64's range)
    return cast_exact(np.array(-magnitude if q < 0 else magnitude), fmt_to)[()]


def _bits(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iub":
        return x
    return x.view(f"u{x.dtype.itemsize}")


def decide(approx: np.ndarray, bound: np.ndarray, to: DType, *, widen: bool = True,
           finite: bool = False, offset: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """The interval test of :func:`round_verified`, without the exact fallback.

    Returns the rounded values (correct wherever decided) and the flat indices of the
    undecided finite elements. ``finite=True`` promises that ``approx`` and ``bound``
    are finite, which saves a pass.
    """
    if to.name == "f64":
        return _decide_f64(approx, bound, offset)
    with np.errstate(over="ignore", invalid="ignore"):
        if offset is not None:
            approx = approx + offset
            widen = True  # covers this addition's rounding too
        if widen:
            bound = np.where(bound > 0, bound * (1 + 2.0**-50) + np.abs(approx) * 2.0**-51,
                             bound)
        lo = approx - bound
        hi = approx + bound
    out = cast_exact(lo, to)
    undecided = _bits(out) != _bits(cast_exact(hi, to))
    if not finite and not np.isfinite(hi).all():
        ok = np.isfinite(approx)
        undecided |= np.isnan(hi) & ok  # a NaN bound decides nothing
        undecided &= ok
        if not ok.all():
            out[~ok] = cast_exact(approx[~ok], to)
    return out, np.flatnonzero(undecided)


def _decide_f64(approx: np.ndarray, bound: np.ndarray, offset: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The test for a float64 target, whose conversion is the identity.

    The exact value lies in ``approx + offset +- bound``; it rounds to ``approx`` when
    that range stays strictly inside the halfway points to ``approx``'s neighbours.
    """
    off = np.zeros_like(approx) if offset is None else offset
    with np.errstate(over="ignore", invalid="ignore"):
        up = np.nextafter(approx, np.inf) - approx  # exact: neighbours' distances
        down = approx - np.nextafter(approx, -np.inf)
        high = off + bound
        high += np.abs(high) * 2.0**-50  # rounded outwards, to stay a bound
        low = off - bound
        low -= np.abs(low) * 2.0**-50
        ok = (high < up / 2) & (low > -down / 2)
    out = np.where(approx == 0, 0.0, approx)  # an exact zero is +0
    finite = np.isfinite(approx)
    return out, np.flatnonzero(finite & ~ok)


def round_verified(approx: np.ndarray, bound: np.ndarray, to: Any,
                   exact: Callable[[np.ndarray], Any], *, widen: bool = True,
                   offset: np.ndarray | None = None) -> np.ndarray:
    """Round values known to within ``bound`` of ``approx`` correctly to ``to``.

    ``approx`` is a float64 approximation with ``|approx - exact| <= bound`` (or
    ``|approx + offset - exact| <= bound`` when a float64 ``offset`` is given: a
    double-double approximation). Where the whole interval rounds to the same value,
    that value is the result (rounding is monotone). Elsewhere, for finite ``approx``,
    ``exact(flat_indices)`` must return the correctly rounded values at those positions
    (in the target storage, or as float64 values that hold them exactly). Non-finite
    ``approx`` values are converted as they are.

    The ends ``approx -+ bound`` are themselves rounded; ``widen`` enlarges a nonzero
    bound by ``2**-51 * |approx|`` so that cannot matter. A caller whose bound already
    covers ``u * (|approx| + bound)`` passes ``widen=False`` and saves two passes.
    A zero bound means ``approx`` is exact and is rounded directly.
    """
    fmt_to = target(to)
    approx = real_f64(approx, fmt_to)  # a complex approximation is refused, not cut
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), approx.shape)
    out, todo = decide(approx, bound, fmt_to, widen=widen, offset=offset)
    if todo.size:
        vals = np.asarray(exact(todo))
        if vals.dtype != fmt_to.np_dtype:
            vals = cast_exact(vals.astype(np.float64), fmt_to)
        out.flat[todo] = vals
    return out


def round_double_double(hi: np.ndarray, lo: np.ndarray, to: Any) -> np.ndarray:
    """The exact value ``hi + lo`` rounded once (RNE) to ``to``, with ``convert``'s rules.

    ``hi`` must be ``hi + lo`` rounded to float64 (as TwoSum and ``exact.refine_sum``
    leave it), both finite. The pair is first rounded to float64 *to odd*: ``hi`` when
    ``lo`` is zero or ``hi``'s last bit is odd, else ``hi``'s neighbour toward ``lo``
    (``hi + lo`` lies strictly between the two, so one of them is its round-to-odd).
    Rounding that to nearest in any format of at most 51 significand bits equals
    rounding ``hi + lo`` directly, as in ``convert.round_to_odd_f32``. A float64 target
    is ``hi`` itself. An exact zero gives +0; a nonzero value keeps its sign.
    """
    fmt_to = target(to)
    hi = np.asarray(hi, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    if fmt_to.name == "f64":
        return np.where(hi == 0, 0.0, hi)
    bits = hi.view(np.uint64).copy()
    move = (lo != 0) & ((bits & np.uint64(1)) == 0) & (hi != 0)
    away = np.signbit(hi) == np.signbit(lo)  # toward lo is away from zero
    bits[move & away] += np.uint64(1)
    bits[move & ~away] -= np.uint64(1)
    odd = np.where(hi == 0, lo + 0.0, bits.view(np.float64))  # hi == 0 means lo == 0
    if fmt_to.kind == "int":
        # Rounding to an integer needs two bits below the units place: |value| < 2**50.
        big = np.abs(hi) >= 2.0**50
        out = cast_exact(np.where(big, 0.0, odd), fmt_to)
        for i in np.flatnonzero(big).tolist():
            out.flat[i] = round_fraction(Fraction(float(hi.flat[i])) +
                                         Fraction(float(lo.flat[i])), fmt_to)
        return out
    return cast_exact(odd, fmt_to)


def sum_rounded(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool, to: Any,
                divisor: int = 1) -> np.ndarray:
    """The exact sum of ``x`` along ``axis``, divided by ``divisor``, rounded once
    (see :func:`tessera.numerics.reductions.sums.sum_rounded`)."""
    from tessera.numerics.reductions.sums import sum_rounded as _sum

    return _sum(x, axis, keepdims, to, divisor)


def matmul_rounded(a: Any, b: Any, to: Any) -> np.ndarray:
    """The exact matrix product ``a @ b`` rounded once to ``to``
    (see :func:`tessera.numerics.reductions.matmul.product.matmul_rounded`)."""
    from tessera.numerics.reductions.matmul.product import matmul_rounded as _matmul

    return _matmul(a, b, to)


__all__ = ["decide", "gamma", "matmul_rounded", "round_double_double", "round_fraction",
           "round_verified", "sum_rounded"]
