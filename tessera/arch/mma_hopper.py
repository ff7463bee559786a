"""How Hopper's tensor cores actually accumulate one ``mma.sync`` / ``wgmma`` step.

The golden convention (:mod:`tessera.arch.mma`) sums an instruction's products exactly
and rounds once; that is the meaning of a kernel. The hardware does something cheaper,
described for earlier GPUs by Fasi, Higham, Mikaitis and Pranesh ("Numerical behavior
of NVIDIA tensor cores", PeerJ Computer Science, 2021): it aligns every term to the
largest one and drops the bits that fall off. Measured on an H200 (1.6 million outputs
of bf16 ``mma.sync.m16n8k16`` and ``wgmma.m64nNk16`` steps, K of 16 to 128, operands
spread over 48 binades and with large cancelling terms; every output reproduced bit
for bit), one step of K = 16 bf16 products and the f32 accumulator C computes:

1. each nonzero product's exponent as the sum of its operands' exponents
   (``floor(log2 |a|) + floor(log2 |b|)``; the product's significand is in [1, 4)), and
   C's own exponent; ``E`` is the largest of them;
2. each product and C truncated toward zero to a multiple of ``2**(E - 25)``;
3. the truncated terms summed exactly, and the sum rounded toward zero to f32.

So every step may lose up to about ``17 * 2**-25`` of its largest term and rounds
toward zero, where the golden convention loses nothing and rounds to nearest. ``f16``
steps take the same rule (cross-checked on the H200 through GEMMs, attention chains
and ``wmma``). ``e4m3`` steps (K = 32 products; 390,000 outputs of ``wgmma`` with K of
32 to 256 reproduced bit for bit) keep far fewer bits: the terms are truncated 13 bits
below the largest exponent, and the exact sum is then truncated toward zero to 14
significant bits (13 below its own exponent). An operand below the format's normal
range counts with the format's smallest exponent, as its encoding has it (the fp8
measurements include such operands). ``tf32`` steps (K = 8 products) follow the bf16
rule: 16,384 outputs of an H100's ``wgmma.m64nNk8`` chains over K = 128 reproduced bit
for bit, where the golden convention gives 5 % of them. ``e5m2`` does not follow the
e4m3 rule (the probe's e5m2 GEMMs on an H100 matched it in 0.07 to 64 % of outputs)
and keeps the golden convention (:data:`MODELLED`), as do steps with an infinite or
NaN operand.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tessera.arch.mma import FORMATS, _format, decode_elements
from tessera.arch.mma import mma as golden

#: the input formats whose steps follow the measured rule
MODELLED = frozenset({"bf16", "f16", "e4m3", "tf32"})
#: the formats whose ``mma.sync``/``wmma`` steps follow it: the e4m3 and tf32 rules were
#: measured through ``wgmma``, and e4m3 ``mma.sync`` (sm_89 code run on an H100) keeps
#: more bits
MODELLED_MMA_SYNC = frozenset({"bf16", "f16"})
#: bits kept below the largest term's exponent, per input format
ALIGN_BITS = {"bf16": 25, "f16": 25, "e4m3": 13, "tf32": 25}
#: significand bits the sum keeps below its own exponent before it is written as f32
#: (f32's own 23 where the sum is simply rounded toward zero to f32)
SUM_BITS = {"bf16": 23, "f16": 23, "e4m3": 13, "tf32": 23}
#: smallest normal exponent of each modelled format, and of the f32 accumulator
_EMIN = {"bf16": -126, "f16": -14, "e4m3": -6, "tf32": -126, "f32": -126}


def _exponent(x: np.ndarray, fmt: str) -> np.ndarray:
    """The exponent field's value of finite nonzero ``x`` (``floor(log2 |x|)``, at least
    the format's smallest normal exponent), a very low value for zeros."""
    e = np.maximum(np.frexp(x)[1] - 1, _EMIN[fmt])
    return np.where(x == 0, -(1 << 20), e)


def _round_toward_zero_f32(x: np.ndarray) -> np.ndarray:
    """``x`` rounded toward zero to f32 (as float64); beyond f32's range, infinity."""
    f = x.astype(np.float32)
    over = np.isfinite(f) & (np.abs(f.astype(np.float64)) > np.abs(x))
    f[over] = np.nextafter(f[over], np.float32(0))
    return f.astype(np.float64)


def modelled(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: str) -> bool:
    """Whether the measured rule covers this step: a modelled format, finite operands
    and accumulator."""
    if _format(fmt) not in MODELLED:
        return False
    return bool(np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all())


def mma_truncating(av: np.ndarray, bv: np.ndarray, c: np.ndarray,
                   fmt: str = "bf16") -> np.ndarray:
    """One step by the measured rule on float64 values of format ``fmt``: A (..., M, K),
    B (..., K, N), C (..., M, N) broadcastable; returns D (float64 holding f32 values)."""
    c = np.asarray(c, np.float64)
    prods = av[..., :, None, :] * np.swapaxes(bv, -1, -2)[..., None, :, :]  # (..., M, N, K)
    ea, eb = _exponent(av, _format(fmt)), _exponent(bv, _format(fmt))
    pe = np.where(prods == 0, -(1 << 20),
                  ea[..., :, None, :] + np.swapaxes(eb, -1, -2)[..., None, :, :])
    # all-zero terms have no exponent; any positive quantum keeps them (and their signs)
    top = np.maximum(np.maximum(pe.max(axis=-1), _exponent(c, "f32")), -1000)
    key = _format(fmt)
    quantum = np.ldexp(1.0, top - ALIGN_BITS[key])
    terms = np.trunc(prods / quantum[..., None]) * quantum[..., None]
    total = terms.sum(axis=-1) + np.trunc(c / quantum) * quantum  # exact: < 2**31 quanta
    if SUM_BITS[key] < 23:  # the sum's own width, below f32's
        unit = np.ldexp(1.0, np.maximum(np.frexp(total)[1] - 1, -1000) - SUM_BITS[key])
        total = np.trunc(total / unit) * unit
    return _round_toward_zero_f32(total)


def mma(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: str,
        fmt_b: str | None = None) -> np.ndarray:
    """``D = C + A @ B`` for one instruction as Hopper's tensor cores compute it, on
    bit patterns or format arrays (:func:`tessera.arch.mma.mma`'s arguments); steps
    the rule does not cover take the golden convention."""
    fa, fb = _format(fmt), _format(fmt_b or fmt)
    av, bv = decode_elements(a, fa), decode_elements(b, fb)
    cw = np.asarray(c, np.float64)
    if fa != fb or not modelled(av, bv, cw, fa) or av.shape[-1] != FORMATS[fa][2]:
        return golden(a, b, c, fa, fb)
    return mma_truncating(av, bv, cw, fa)


def covers(steps: Iterable[tuple[bool, str, str]]) -> bool:
    """Whether the measured rule gives the hardware's bits for every tensor-core step
    ``(is_wgmma, A format, B format)`` of a kernel (False for a kernel with none)."""
    steps = list(steps)
    return bool(steps) and all(
        a == b and a in (MODELLED if wgmma else MODELLED_MMA_SYNC) for wgmma, a, b in steps)


__all__ = ["ALIGN_BITS", "MODELLED", "MODELLED_MMA_SYNC", "SUM_BITS", "covers", "mma",
           "mma_truncating", "modelled"]
