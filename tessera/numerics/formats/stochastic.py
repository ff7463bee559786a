"""Stochastic rounding driven by a counter-based Philox-4x32-10 generator.

Philox (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) maps a
128-bit counter and a 64-bit key to 128 random bits with ten rounds of multiply,
xor and key bumps. Being counter-based, the random bits for element ``i`` depend only
on ``(seed, i + counter_offset)``: results are reproducible and independent of how
the work is split or ordered.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import DTypeError
from tessera.numerics.formats.dtypes import DType, dtype
from tessera.numerics.policy.modifiers import check_seed

_MASK = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # key bumps (golden ratio, sqrt(3) - 1)
_ROUNDS = 10


def philox4x32(counter: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox-4x32-10 of each 128-bit counter (last axis: 4 uint32 words) under ``key``.

    Returns an array of the same shape, uint32. Products are formed in uint64 so the
    high and low halves of each 32x32-bit multiplication are exact.
    """
    ctr = np.asarray(counter, dtype=np.uint64)
    if ctr.shape[-1:] != (4,):
        raise DTypeError(f"a Philox counter has 4 words, got shape {ctr.shape}",
                         hint="pass an array whose last axis has length 4")
    c0, c1, c2, c3 = (ctr[..., i] for i in range(4))
    k0, k1 = key[0] & _MASK, key[1] & _MASK
    m0, m1, mask = np.uint64(_M0), np.uint64(_M1), np.uint64(_MASK)
    shift = np.uint64(32)
    for r in range(_ROUNDS):
        if r:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
        p0 = m0 * c0
        p1 = m1 * c2
        c0, c1, c2, c3 = (
            (p1 >> shift) ^ c1 ^ np.uint64(k0),
            p1 & mask,
            (p0 >> shift) ^ c3 ^ np.uint64(k1),
            p0 & mask,
        )
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def philox_uint32(seed: int, counters: np.ndarray) -> np.ndarray:
    """Random words for each counter: shape ``counters.shape + (4,)``, uint32.

    The 64-bit counter value fills the first two counter words (low word first); the
    64-bit seed is the key. Element ``i`` of an array uses counter ``i + offset``.
    """
    seed = check_seed(seed)  # masking a wider seed would alias another seed's stream
    cnt = np.asarray(counters).astype(np.uint64)
    words = np.zeros((*cnt.shape, 4), dtype=np.uint64)
    words[..., 0] = cnt & np.uint64(_MASK)
    words[..., 1] = cnt >> np.uint64(32)
    return philox4x32(words, (seed & _MASK, (seed >> 32) & _MASK))


def _neighbours(x: np.ndarray, to: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower neighbour, spacing and the fraction of the way to the upper neighbour.

    The grid is the format's with an unbounded exponent, so values beyond the largest
    finite number get neighbours too; saturation or overflow is applied afterwards.
    """
    if to.kind == "int":
        ulp = np.ones_like(x)
    else:
        fmt = to.format
        _, exp = np.frexp(np.abs(x))
        ulp = np.ldexp(1.0, np.maximum(exp.astype(np.int64) - 1, fmt.emin) - fmt.nmant)
    # All three are exact: scaling by a power of two, and x - lo keeps only bits of x.
    lo = np.floor(x / ulp) * ulp
    return lo, ulp, (x - lo) / ulp


def stochastic_round_array(x64: np.ndarray, to: Any, *, seed: int,
                           counter_offset: int = 0) -> np.ndarray:
    """Round each value to one of its two neighbours in ``to``, stochastically.

    The upper neighbour is chosen with probability (x - lo) / (hi - lo), so
    E[result] = x: exactly whenever that fraction is a multiple of 2**-64 (always the
    case when the input has at most 64 bits below the target's spacing, e.g. f32 to
    bf16 or fp8 for normal values), otherwise to within 2**-64 of a spacing. Values
    already representable never move. The random bits for element ``i`` (C order)
    are Philox(seed, i + counter_offset), so the same seed and offset give the same
    bits. Out of range values follow ``convert``: fp8/fp6/fp4 saturate to +-max, formats
    with infinities overflow to inf when rounded past the largest finite value.
    """
    from tessera.numerics.formats.convert import cast_exact, real_f64

    seed = check_seed(seed)  # a 2**64 seed must not wrap around to another seed's bits
    if not isinstance(counter_offset, (int, np.integer)) or counter_offset < 0:
        raise DTypeError(f"counter_offset must be an int >= 0, got {counter_offset!r}")
    fmt_to = dtype(to)
    if fmt_to.kind not in ("float", "int") or fmt_to.name == "e8m0":
        raise DTypeError(f"stochastic rounding to {fmt_to} is not supported",
                         hint="stochastic rounding targets real float and int formats "
                              "(not e8m0 scales, bool or complex)")
    x = real_f64(x64, fmt_to)  # complex input is refused, not cut to its real part
    if fmt_to.name == "f64":
        return x.copy()
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    lo, ulp, frac = _neighbours(xf, fmt_to)
    counters = np.arange(x.size, dtype=np.uint64).reshape(x.shape) + np.uint64(counter_offset)
    words = philox_uint32(seed, counters).astype(np.float64)
    # Compare a 64-bit uniform integer (r0, r1) with frac * 2**64, one 32-bit digit at
    # a time so that every step is exact in float64.
    t = frac * 2.0**32
    h = np.floor(t)
    t2 = (t - h) * 2.0**32
    low = np.floor(t2)
    r0, r1 = words[..., 0], words[..., 1]
    up = (r0 < h) | ((r0 == h) & ((r1 < low) | ((r1 == low) & (t2 > low))))
    out = np.where(up, lo + ulp, lo)
    out = np.where(out == 0, np.copysign(0.0, xf), out)  # -tiny rounds to -0
    out = np.where(finite, out, x)
    return cast_exact(out, fmt_to)
