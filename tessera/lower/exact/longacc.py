"""A long fixed-point accumulator in PTX: deposit a float exactly, round the sum once.

The accumulator (Kulisch and Miranker, "The arithmetic of the digital computer", SIAM
Review 28, 1986; in GPU form ExBLAS, Collange, Defour, Graillat and Iakymchuk,
"Numerical reproducibility for the parallel reduction on multi- and many-core
architectures", Parallel Computing 49, 2015) is an integer count of a quantum
``2**-q``, held as ``digits`` signed 64-bit words of which word ``k`` weighs
``2**(32 k)`` quanta. A deposit adds a value's 32-bit pieces to two or three
neighbouring words; the words keep their carries (31 bits of headroom each), so the
sum of any number of deposits below ``2**31`` is exact in *any order* — threads
combine their accumulators by plain 64-bit integer addition (``red.shared.add.u64``,
``shfl``), and the bits never depend on the schedule. Carries are normalised once,
before the one rounding.

Rounding once mirrors :func:`tessera.numerics.reductions.accumulator.round_exact`:
the exact value is rounded to float64 *to odd* (its top 53 bits, the last one set when
anything below them is nonzero), then to the result format to nearest even — one
correct rounding for formats of at most 51 significand bits (Boldo and Melquiond,
"Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
odd", IEEE Trans. Computers 57, 2008). A narrow format (bf16, f16, fp8) goes through
f32 rounded to odd (``cvt.rz`` plus the sticky bit), which keeps at least two more bits
than the format everywhere, subnormals included (a nonzero fp8 sum is at least 2**-16
in magnitude, a mean of at most 2**31 terms at least 2**-47: f32 normals), then to
nearest even in the format (fp8 in integer arithmetic, saturating:
:func:`tessera.lower.arith.fp8.round_value`). An exact zero rounds to +0.
Non-finite terms are three flag bits (NaN, +inf, -inf) combined by OR: NaN if a NaN or
infinities of both signs occur, else the infinity (:mod:`tessera.numerics.reductions.exact`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessera.ir.core import Value
from tessera.ir.dialects.target.ops import Reduce
from tessera.lower.emit import TargetEmitter

#: the flag bits of non-finite terms
NAN_BIT, PINF_BIT, NINF_BIT = 1, 2, 4
#: words of an accumulator of f32 (or bf16, f16, fp8 held in f32 registers) terms: quanta of
#: 2**-149, terms below 2**128 reach word 8; word 9 holds the growth of sums of up to
#: 2**43 terms as whole 32-bit digits
SUM_DIGITS = 10
SUM_QUANTUM = 149


@dataclass(frozen=True)
class SharedAcc:
    """Accumulators in shared memory, one per row: ``digits`` u64 words and one flag
    word each, ``rows`` of them from the ``u32`` address ``base``."""

    base: Value
    rows: int
    digits: int

    @property
    def stride(self) -> int:
        """Bytes per row."""
        return 8 * (self.digits + 1)

    @property
    def size(self) -> int:
        return self.rows * self.stride

    def row(self, e: TargetEmitter, row: Value) -> Value:
        """The address of row ``row`` (``s32``)."""
        off = e.mul(row, e.const(self.stride, "s32"), "s32")
        return e.add(self.base, e.cvt(off, "u32", "s32"), "u32")


def zero_shared(e: TargetEmitter, base: Value, words: int, threads: int = 128) -> None:
    """Store 0 to ``words`` u64 words at ``base``, thread ``t`` writing words ``t``,
    ``t + threads``... (the caller's barrier publishes them)."""
    tid = e.sreg("tid.x")
    zero = e.const(0, "u64")
    off = e.mul(tid, e.const(8, "u32"), "u32")
    addr = e.add(base, off, "u32")
    for k in range(-(-words // threads)):
        if (k + 1) * threads <= words:
            e.st("shared", addr, zero, "u64", offset=8 * threads * k)
        else:
            ok = e.setp("lt", tid, e.const(words - k * threads, "u32"), "u32")
            e.if_(ok, lambda inner, k=k: inner.st("shared", addr, zero, "u64",
                                                  offset=8 * threads * k))


def _bits32(e: TargetEmitter, x: Value) -> Value:
    return e.pack([x], "u32")


def deposit_f32(e: TargetEmitter, row: Value, acc: SharedAcc, x: Value) -> None:
    """Add the f32 register ``x`` exactly to the accumulator at address ``row``: its
    24-bit significand shifted to its quantum position ``p`` (``x = M 2**(p - 149)``)
    lands in words ``p // 32`` and ``p // 32 + 1`` as two signed 32-bit pieces
    (``red.shared.add.u64``, two's complement); a non-finite ``x`` deposits nothing
    and ORs its flag bit."""
    u32 = "u32"
    b = _bits32(e, x)
    ex = e.bin("and", e.bin("shr", b, e.const(23, u32), u32), e.const(0xFF, u32), u32)
    frac = e.bin("and", b, e.const(0x7FFFFF, u32), u32)
    normal = e.setp("ne", ex, e.const(0, u32), u32)
    finite = e.setp("ne", ex, e.const(0xFF, u32), u32)
    man = e.selp(e.bin("or", frac, e.const(0x800000, u32), u32), frac, normal, u32)
    man = e.selp(man, e.const(0, u32), finite, u32)
    p = e.bin("sub", e.bin("max", ex, e.const(1, u32), u32), e.const(1, u32), u32)
    w = e.bin("shl", e.cvt(man, "u64", u32), e.bin("and", p, e.const(31, u32), u32), "u64")
    lo = e.bin("and", w, e.const(0xFFFFFFFF, "u64"), "u64")
    hi = e.bin("shr", w, e.const(32, u32), "u64")
    neg = e.setp("ne", e.bin("shr", b, e.const(31, u32), u32), e.const(0, u32), u32)
    zero = e.const(0, "u64")
    lo = e.selp(e.bin("sub", zero, lo, "u64"), lo, neg, "u64")
    hi = e.selp(e.bin("sub", zero, hi, "u64"), hi, neg, "u64")
    word = e.mul(e.bin("shr", p, e.const(5, u32), u32), e.const(8, u32), u32)
    addr = e.add(row, word, u32)
    add = Reduce("shared", "add", "u64")
    e.op(add, [addr, lo])
    e.op(add, [e.add(addr, e.const(8, u32), u32), hi])
    # NaN: 1, +inf: 2, -inf: 4, finite: 0
    inf = e.selp(e.const(NINF_BIT, u32), e.const(PINF_BIT, u32), neg, u32)
    special = e.selp(e.const(NAN_BIT, u32), inf,
                     e.setp("ne", frac, e.const(0, u32), u32), u32)
    flag = e.selp(e.const(0, u32), special, finite, u32)
    e.op(Reduce("shared", "or", "b32"), [e.add(row, e.const(8 * acc.digits, u32), u32),
                                          e.pack([flag], "b32")])


def _clz32(e: TargetEmitter, x: Value) -> Value:
    """Leading zeros of a nonzero ``u32`` (a binary search: shifts and selects)."""
    z = e.const(0, "u32")
    for s in (16, 8, 4, 2, 1):
        small = e.setp("lt", x, e.const(1 << (32 - s), "u32"), "u32")
        x = e.selp(e.bin("shl", x, e.const(s, "u32"), "u32"), x, small, "u32")
        z = e.selp(e.add(z, e.const(s, "u32"), "u32"), z, small, "u32")
    return z


def _normalise96(e: TargetEmitter, top: Value, low: Value) -> tuple[Value, Value, Value]:
    """``top * 2**32 + low`` (``top`` a u64 of at least 2**32, ``low`` below 2**32)
    shifted left by its ``z`` leading zeros: the top 64 bits (bit 63 set), the last
    32 bits, and ``z`` (u32)."""
    z = _clz32(e, e.cvt(e.bin("shr", top, e.const(32, "u32"), "u64"), "u32", "u64"))
    shifted = e.bin("shl", low, z, "u64")
    head = e.bin("or", e.bin("shl", top, z, "u64"),
                 e.bin("shr", shifted, e.const(32, "u32"), "u64"), "u64")
    rest = e.bin("and", shifted, e.const(0xFFFFFFFF, "u64"), "u64")
    return head, rest, z


def _pow2(e: TargetEmitter, k: Value) -> Value:
    """``2**k`` as f64 for an ``s32`` ``k`` in the normal range."""
    high = e.mul(e.add(k, e.const(1023, "s32"), "s32"), e.const(1 << 20, "s32"), "s32")
    return e.pack([e.const(0, "s32"), high], "f64")


Load = Callable[[TargetEmitter, int], Value]
Store = Callable[[TargetEmitter, int, Value], None]


def _carried(e: TargetEmitter, w: Value, carry: Value, last: bool) -> tuple[Value, Value]:
    """``w + carry`` split into its low 32 bits and the (arithmetic) carry out; the
    top word keeps everything."""
    w = e.add(w, carry, "s64")
    if last:
        return w, carry
    return (e.bin("and", w, e.const(0xFFFFFFFF, "s64"), "s64"),
            e.bin("shr", w, e.const(32, "u32"), "s64"))


def _scan(e: TargetEmitter, state: list[Value], k: Value, w: Value, neg: Value,
          last: bool) -> list[Value]:
    """One word of the second pass: negate and carry word ``k`` (``w``), then move the
    window of the top three nonzero-led words. ``state`` (and the result) is ``carry,
    t, hi, mid, lo, prev1, prev2, below, sticky``: the carry, the index of the top
    nonzero word, the window, the words ``k - 1`` and ``k - 2``, whether a word below
    ``k - 2`` is nonzero, and whether one below the window is."""
    s64, zero = "s64", e.const(0, "s64")
    carry, t, hi, mid, lo, prev1, prev2, below, sticky = state
    w = e.selp(e.bin("sub", zero, w, s64), w, neg, s64)
    w, carry = _carried(e, w, carry, last)
    nonzero = e.setp("ne", w, zero, s64)
    t = e.selp(k, t, nonzero, "s32")
    hi = e.selp(w, hi, nonzero, s64)
    mid = e.selp(prev1, mid, nonzero, s64)
    lo = e.selp(prev2, lo, nonzero, s64)
    sticky = e.selp(below, sticky, nonzero, "pred")
    # prev2 is 0 for k < 2, so this ORs in nothing until there is a word below k - 2
    below = e.bin("or", below, e.setp("ne", prev2, zero, s64), "pred")
    return [carry, t, hi, mid, lo, w, prev1, below, sticky]


def _scan_start(e: TargetEmitter) -> list[Value]:
    zero, no = e.const(0, "s64"), e.const(False, "pred")
    return [zero, e.const(-1, "s32"), zero, zero, zero, zero, zero, no, no]


def round_words(e: TargetEmitter, digits: int, load: Load, store: Store, flags: Value,
                quantum: int, divisor: int = 1, nearest: bool = False) -> Value:
    """The value ``sum(w[k] 2**(32 k)) 2**-quantum / divisor`` of the ``digits`` signed
    u64 words ``load(e, k)`` (carries not normalised) rounded to float64 to odd (to
    nearest even with ``nearest``, for values in float64's normal range), or the
    non-finite result the ``flags`` (u32) select; an exact zero is +0. ``divisor`` is
    at most 2**31.

    Two passes stream over the words, low to high, so that few registers are live
    (``store`` keeps the first pass's words, ``load`` reads them again): the first
    propagates the carries, which leaves the sign in the top word; the second negates
    a negative value (two's complement, carried again) and keeps a window of the top
    three nonzero-led words and whether any word below them is nonzero. The passes are
    unrolled here (any ``load`` and ``store``); :func:`round_words_at` loops over words
    in memory."""
    carry = e.const(0, "s64")
    for k in range(digits):
        w, carry = _carried(e, e.pack([load(e, k)], "s64"), carry, k == digits - 1)
        store(e, k, w)
    neg = e.setp("lt", w, e.const(0, "s64"), "s64")
    state = _scan_start(e)
    for k in range(digits):
        state = _scan(e, state, e.const(k, "s32"), e.pack([load(e, k)], "s64"), neg,
                      k == digits - 1)
    return _round_window(e, state, neg, flags, quantum, divisor, nearest)


def round_words_at(e: TargetEmitter, digits: int, space: str, addr: Value, flags: Value,
                   quantum: int, divisor: int = 1, nearest: bool = False) -> Value:
    """:func:`round_words` of the ``digits`` consecutive u64 words at ``addr`` (``u32``
    in shared memory, ``u64`` in global), each pass a ``ptx.for`` over the words but
    the top one: a few dozen instructions instead of a dozen per word."""
    elem = addr.type.elem  # type: ignore[attr-defined]
    step = e.const(8, elem)
    lo, hi, one = e.const(0, "s32"), e.const(digits - 1, "s32"), e.const(1, "s32")

    def load(em: TargetEmitter, at: Value, offset: int = 0) -> Value:
        return em.pack([em.ld(space, at, "u64", offset=offset)], "s64")

    def carries(em: TargetEmitter, _k: Value, at: Value, carry: Value) -> list[Value]:
        w, carry = _carried(em, load(em, at), carry, False)
        em.st(space, at, em.pack([w], "u64"), "u64")
        return [em.add(at, step, elem), carry]

    _, carry = e.for_(lo, hi, one, [addr, e.const(0, "s64")], carries)
    top = 8 * (digits - 1)
    w, _ = _carried(e, load(e, addr, top), carry, True)
    e.st(space, addr, e.pack([w], "u64"), "u64", offset=top)
    neg = e.setp("lt", w, e.const(0, "s64"), "s64")

    def scan(em: TargetEmitter, k: Value, at: Value, *state: Value) -> list[Value]:
        return [em.add(at, step, elem), *_scan(em, list(state), k, load(em, at), neg, False)]

    state = e.for_(lo, hi, one, [addr, *_scan_start(e)], scan)[1:]
    state = _scan(e, state, hi, load(e, addr, top), neg, True)
    return _round_window(e, state, neg, flags, quantum, divisor, nearest)


def _round_window(e: TargetEmitter, state: list[Value], neg: Value, flags: Value,
                  quantum: int, divisor: int, nearest: bool) -> Value:
    """The rounding of :func:`round_words` from the second pass's final ``state``
    (``neg``: whether the value is negative)."""
    u64, s32 = "u64", "s32"
    shift = e.const(32, "u32")
    _, t, hi, mid, lo, _, _, _, sticky = state
    hi, mid, lo = (e.pack([v], u64) for v in (hi, mid, lo))
    top = e.bin("or", e.bin("shl", hi, shift, u64), mid, u64)
    head, rest, z = _normalise96(e, e.bin("max", top, e.const(1 << 32, u64), u64), lo)
    # value = (head + rest 2**-32 + ...) 2**(32 t - 32 - z - quantum)
    expo = e.add(e.mul(t, e.const(32, s32), s32), e.const(-32 - quantum, s32), s32)
    expo = e.bin("sub", expo, e.cvt(z, s32, "u32"), s32)
    if divisor > 1:
        n = e.const(divisor, u64)
        q1 = e.bin("div", head, n, u64)
        r1 = e.bin("rem", head, n, u64)
        num0 = e.bin("or", e.bin("shl", r1, shift, u64), rest, u64)
        q0 = e.bin("div", num0, n, u64)
        r0 = e.bin("rem", num0, n, u64)
        sticky = e.bin("or", sticky, e.setp("ne", r0, e.const(0, u64), u64), "pred")
        head, rest, zq = _normalise96(e, q1, q0)
        expo = e.bin("sub", expo, e.cvt(zq, s32, "u32"), s32)
    sticky = e.bin("or", sticky, e.setp("ne", rest, e.const(0, u64), u64), "pred")
    if nearest:  # the round bit (bit 10), then RNE: m + 1 can reach 2**53, still exact
        one, nil = e.const(1, u64), e.const(0, u64)
        low10 = e.bin("and", head, e.const(0x3FF, u64), u64)
        sticky = e.bin("or", sticky, e.setp("ne", low10, nil, u64), "pred")
        half = e.setp("ne", e.bin("and", head, e.const(0x400, u64), u64), nil, u64)
        m = e.bin("shr", head, e.const(11, "u32"), u64)
        odd = e.setp("ne", e.bin("and", m, one, u64), nil, u64)
        up = e.bin("and", half, e.bin("or", sticky, odd, "pred"), "pred")
        m = e.add(m, e.selp(one, nil, up, u64), u64)
    else:
        low11 = e.bin("and", head, e.const(0x7FF, u64), u64)
        sticky = e.bin("or", sticky, e.setp("ne", low11, e.const(0, u64), u64), "pred")
        m = e.bin("shr", head, e.const(11, "u32"), u64)
        m = e.bin("or", m, e.selp(e.const(1, u64), e.const(0, u64), sticky, u64), u64)
    mag = e.mul(e.cvt(m, "f64", u64, "rn"), _pow2(e, e.add(expo, e.const(11, s32), s32)),
                "f64")
    value = e.selp(e.un("neg", mag, "f64"), mag, neg, "f64")
    value = e.selp(e.const(0.0, "f64"), value, e.setp("lt", t, e.const(0, s32), s32), "f64")
    return special(e, flags, value)


def special(e: TargetEmitter, flags: Value, value: Value) -> Value:
    """``value`` (f64), or the NaN / infinity the non-finite ``flags`` call for."""
    u32, f64 = "u32", "f64"
    has = e.setp("ne", e.bin("and", flags, e.const(NAN_BIT, u32), u32), e.const(0, u32), u32)
    both = e.setp("eq", e.bin("and", flags, e.const(PINF_BIT | NINF_BIT, u32), u32),
                  e.const(PINF_BIT | NINF_BIT, u32), u32)
    pinf = e.setp("ne", e.bin("and", flags, e.const(PINF_BIT, u32), u32), e.const(0, u32), u32)
    ninf = e.setp("ne", e.bin("and", flags, e.const(NINF_BIT, u32), u32), e.const(0, u32), u32)
    value = e.selp(e.const(float("inf"), f64), value, pinf, f64)
    value = e.selp(e.const(float("-inf"), f64), value, ninf, f64)
    return e.selp(e.const(float("nan"), f64), value, e.bin("or", has, both, "pred"), f64)


def to_format(e: TargetEmitter, odd: Value, element: object) -> Value:
    """The f64 ``odd`` (rounded to odd) rounded to nearest even to ``element``, in the
    f32 register a value of that format lives in."""
    from tessera.lower.rules.scalar import round_to
    from tessera.lower.values import storage_name

    if storage_name(element) == "float32":  # type: ignore[arg-type]
        return e.cvt(odd, "f32", "f64", "rn")
    # to odd on the f32 grid (subnormals included), then to the narrow format
    cut = e.cvt(odd, "f32", "f64", "rz")
    inexact = e.setp("neu", e.cvt(cut, "f64", "f32"), odd, "f64")
    bits = e.bin("or", e.pack([cut], "u32"),
                 e.selp(e.const(1, "u32"), e.const(0, "u32"), inexact, "u32"), "u32")
    finite = e.setp("num", odd, odd, "f64")  # a NaN stays the f32 default NaN
    narrow = e.selp(e.pack([bits], "f32"), e.cvt(odd, "f32", "f64", "rn"), finite, "f32")
    return round_to(e, narrow, element)


__all__ = ["NAN_BIT", "NINF_BIT", "PINF_BIT", "SUM_DIGITS", "SUM_QUANTUM", "SharedAcc",
           "deposit_f32", "round_words", "round_words_at", "special", "to_format", "zero_shared"]
