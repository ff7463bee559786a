"""The long accumulator for f64 terms (a softmax's, an mse's): deposit exactly, round once.

A softmax's terms are ``exp_f64_specified(x - max)`` (:mod:`tessera.numerics.transcendental.exp64`):
+0, a NaN, or a binary64 value in ``[e^-104, 1]``. Such a value is ``M 2**(E - 1075)``
with a 53-bit ``M`` and ``E >= 872`` (e^-104 > 2**-151), so every term is a whole
number of quanta ``2**-203`` and below ``2**203`` of them. The accumulator of
:mod:`tessera.lower.exact.longacc` with :data:`SUM64_QUANTUM` = 203 and
:data:`SUM64_DIGITS` = 8 words holds the sum of up to ``2**30`` terms (bit 233; word 7
keeps the growth). A deposit adds three 32-bit pieces: the significand's low 32 bits
shifted by ``p mod 32`` (at most 63 bits: its low half to word ``p // 32``, its high
half to the next) and its high 21 bits shifted alike (its low half also to word
``p // 32 + 1``, its high half to the one after); each word gains less than ``2**33``
per deposit, so ``2**30`` deposits keep the words' headroom. The sum is then rounded
once to nearest even in binary64 (``round_words(..., nearest=True)``): for a row whose
maximum is finite it is at least 1 (the term ``e^0`` is exactly 1), inside the normal
range.

Attention over key blocks (:mod:`tessera.ir.transforms.to_tile.attention.keyblocks`) sums each
block's terms beside the row sum carried so far, three f64 values: binary64 roundings
of sums of terms and what they leave, each again a whole number of quanta, of either
sign, below 2**30 in magnitude, and possibly below 2**-151 — such a value's significand
has zeros in its low bits and is shifted right into position 0, exactly.

A mean squared error's terms (:mod:`tessera.lower.exact.msetable`) take the same
deposit with quanta 2**-294 (:data:`MSE_QUANTUM`) in :data:`MSE_DIGITS` words: they are
multiples of 2**-294 below 2**263, rounded once to the result format.

The accumulator is only correct for such values, so the lowering takes it only for the
exact sum of an f64 ``tile.exp`` whose operand is ``x - row_max(x)`` (the shape the
softmax kernel generator emits) and for the key blocks' sums
(:func:`tessera.lower.exact.reduce.expansion_terms`): any other exact f64 sum is refused.
"""

from __future__ import annotations

from tessera.ir.core import Value
from tessera.ir.dialects.target.ops import Reduce
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import NAN_BIT, NINF_BIT, PINF_BIT, SharedAcc

#: quanta of 2**-203: the ulp of binary64 values in [2**-151, 2**-150)
SUM64_QUANTUM = 203
#: words: terms up to 1 reach bit 203 (word 6); word 7 holds the growth of up to 2**30 terms
SUM64_DIGITS = 8
#: quanta of 2**-294 of a mean squared error's terms (:mod:`tessera.ir.transforms.to_tile.loss`)
MSE_QUANTUM = 294
#: words: terms below 2**263 reach bit 557 (word 17); 2**31 deposits grow it to bit 588,
#: inside word 17's signed 64 bits (bits 544 to 607)
MSE_DIGITS = 18


def deposit_f64(e: TargetEmitter, row: Value, acc: SharedAcc, x: Value,
                quantum: int = SUM64_QUANTUM) -> None:
    """Add the f64 register ``x`` (0, non-finite, or a whole number of quanta
    ``2**-quantum`` whose significand, placed at its quantum position, fits the
    accumulator) exactly to the accumulator at address ``row``; a non-finite ``x``
    deposits nothing and ORs its flag bit."""
    # the biased exponent of the least binade whose ulp is the quantum (2**-151 for
    # 2**-203): a whole number of quanta below it has zeros in its low bits
    least = 1075 - quantum
    u32, u64 = "u32", "u64"
    b = e.pack([x], u64)
    ex = e.cvt(e.bin("and", e.bin("shr", b, e.const(52, u32), u64), e.const(0x7FF, u64), u64),
               u32, u64)
    frac = e.bin("and", b, e.const((1 << 52) - 1, u64), u64)
    normal = e.setp("ne", ex, e.const(0, u32), u32)
    finite = e.setp("ne", ex, e.const(0x7FF, u32), u32)
    man = e.selp(e.bin("or", frac, e.const(1 << 52, u64), u64), frac, normal, u64)
    # below 2**-151 a whole number of quanta has zeros in its low bits: shifted right
    # exactly, into position 0 (a zero deposits nothing)
    inside = e.setp("ge", ex, e.const(least, u32), u32)
    short = e.selp(e.const(0, u32), e.bin("sub", e.const(least, u32), ex, u32),
                   inside, u32)
    man = e.bin("shr", man, e.bin("min", short, e.const(63, u32), u32), u64)
    man = e.selp(man, e.const(0, u64), finite, u64)
    # the quantum position; 0 for what deposits nothing, so no address leaves the row
    p = e.selp(e.bin("sub", ex, e.const(least, u32), u32), e.const(0, u32),
               e.bin("and", finite, inside, "pred"), u32)
    s = e.bin("and", p, e.const(31, u32), u32)
    mask = e.const(0xFFFFFFFF, u64)
    low = e.bin("shl", e.bin("and", man, mask, u64), s, u64)
    high = e.bin("shl", e.bin("shr", man, e.const(32, u32), u64), s, u64)
    w0 = e.bin("and", low, mask, u64)
    w1 = e.add(e.bin("shr", low, e.const(32, u32), u64), e.bin("and", high, mask, u64), u64)
    w2 = e.bin("shr", high, e.const(32, u32), u64)
    neg = e.setp("ne", e.bin("shr", b, e.const(63, u32), u64), e.const(0, u64), u64)
    zero = e.const(0, u64)
    w0, w1, w2 = (e.selp(e.bin("sub", zero, w, u64), w, neg, u64) for w in (w0, w1, w2))
    word = e.mul(e.bin("shr", p, e.const(5, u32), u32), e.const(8, u32), u32)
    addr = e.add(row, word, u32)
    add = Reduce("shared", "add", "u64")
    e.op(add, [addr, w0])
    e.op(add, [e.add(addr, e.const(8, u32), u32), w1])
    e.op(add, [e.add(addr, e.const(16, u32), u32), w2])
    inf = e.selp(e.const(NINF_BIT, u32), e.const(PINF_BIT, u32), neg, u32)
    special = e.selp(e.const(NAN_BIT, u32), inf,
                     e.setp("ne", frac, e.const(0, u64), u64), u32)
    flag = e.selp(e.const(0, u32), special, finite, u32)
    e.op(Reduce("shared", "or", "b32"), [e.add(row, e.const(8 * acc.digits, u32), u32),
                                          e.pack([flag], "b32")])


__all__ = ["MSE_DIGITS", "MSE_QUANTUM", "SUM64_DIGITS", "SUM64_QUANTUM", "deposit_f64"]
