"""Target IR for the specified math of Tile IR: f32 ``exp`` and the reduction trees.

Each emitter reproduces, instruction for instruction, what the tile interpreter computes
in checked mode, so the Target IR interpreter (and a GPU) gets the same bits:

* :func:`emit_exp_f32_specified` is :func:`tessera.numerics.transcendental.exp.exp_f32`
  op for op: binary64 ``mul.rn``/``sub.rn``/``add.rn`` (never contracted into ``fma``),
  ``cvt.rni.s32.f64``, 2^n assembled from its bit pattern with ``mul.lo.s32`` +
  ``mov.b64 {lo, hi}``, and a final ``cvt.rn.f32.f64``; NaN is tested with
  ``setp.nan`` and answered with the input quieted (``or.b32`` of the quiet bit), since
  PTX ``min``/``max`` would drop it. 39 binary64 instructions.
* :func:`emit_exp_f32`, what checked mode emits, has the same bits by another route:
  the table-driven algorithm of :mod:`tessera.numerics.transcendental.exp_table` (12
  binary64 instructions), whose rounding test proves its binary32 result correctly
  rounded, and so equal to the specified algorithm's, or else (about one input in 2^24,
  subnormal results, NaN) runs :func:`emit_exp_f32_specified` in a rare branch.
* :func:`emit_tree_sum_f64` / :func:`emit_shfl_sum_f64` are the float sum of
  :func:`tessera.numerics.reductions.treesum.tree_sum_f64`: adjacent pairs over a thread's
  contiguous chunk (padded with -0.0, the exact identity), then ``shfl.sync.bfly`` with
  offsets 1, 2, 4... over the lanes holding neighbouring chunks. A butterfly partner adds
  ``mine + other`` where the tree adds ``left + right``; IEEE addition commutes bitwise,
  so every lane of the group ends with the tree's sum.
* :func:`emit_tree_max_f32` / :func:`emit_shfl_max_f32`: the same shape with
  ``max.NaN.f32`` (PTX ISA sec. 9.7.3.11, sm_80+): NaN propagates, as ``np.max`` does.
  Max is exact, so the tree shape only matters for the sign of a zero maximum
  (``max`` takes -0.0 < +0.0) and for which NaN comes out.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.errors import IRVerifyError
from tessera.ir.core import Value
from tessera.ir.dialects.target import F32, RegType
from tessera.ir.dialects.target.ops import Shfl
from tessera.ir.dialects.target.tables import TableLoad
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental import exp as tr
from tessera.numerics.transcendental import exp_table as tang


def _check(v: Value, elem: str, what: str) -> None:
    if v.type != RegType(elem):
        raise IRVerifyError(f"{what} takes reg<{elem}> values, got {v.type}",
                            hint=f"convert to {elem} first (cvt)")


def emit_exp_f32(e: TargetEmitter, x: Value) -> Value:
    """e^x of an f32 register, correctly rounded: the bits of
    :func:`emit_exp_f32_specified`, by the table-driven fast path of
    :mod:`tessera.numerics.transcendental.exp_table` with the specified algorithm as
    its rare slow path. Returns the f32 result register."""
    _check(x, "f32", "emit_exp_f32")
    f32, f64 = "f32", "f64"
    hi, lo = e.const(tr.CLAMP_HI, f32), e.const(tr.CLAMP_LO, f32)
    xc = e.selp(x, hi, e.setp("lt", x, hi, f32), f32)  # a NaN becomes 89 (slow path)
    xc = e.selp(xc, lo, e.setp("gt", xc, lo, f32), f32)
    shift = e.const(tang.SHIFT32, f32)
    t = e.fma(xc, e.const(tang.inv_l32(), f32), shift, f32)  # N in the low bits
    n32 = e.bin("sub", t, shift, f32)  # N exactly
    n = e.bin("sub", e.pack([t], "s32"), e.const(tang.SHIFT32_BITS, "s32"), "s32")
    r1 = e.fma(n32, e.const(-tang.L1, f32), xc, f32)  # exact (exp_table.check_reduction)
    r = e.fma(e.cvt(n, f64, "s32", "rn"), e.const(-tang.l2(), f64), e.cvt(r1, f64, f32), f64)
    c = tang.coefficients()
    p = e.fma(r, e.const(c[0], f64), e.const(c[1], f64), f64)
    for coeff in c[2:]:
        p = e.fma(p, r, e.const(coeff, f64), f64)
    q = e.mul(p, r, f64)  # e^r - 1
    j = e.bin("and", e.pack([n], "u32"), e.const(tang.TABLE_SIZE - 1, "u32"), "u32")
    tj = e.one(TableLoad("tessera_exp2_7"), j)
    s = e.fma(tj, q, tj, f64)  # 2^(j/128) e^r
    low, high = e.unpack(s, "b32", 2)
    # 2^m, m = N >> 7 (floor): added to the exponent field (mul: shl wants b32)
    m = e.mul(e.bin("shr", n, e.const(tang.TABLE_BITS, "u32"), "s32"),
              e.const(1 << 20, "s32"), "s32")
    v = e.pack([low, e.add(e.pack([high], "s32"), m, "s32")], f64)
    fast = e.cvt(v, f32, f64, "rn")
    # the rounding test: the 29 bits binary32 drops, more than MARGIN ulps from 2^28
    dropped = e.bin("and", e.pack([low], "u32"), e.const((1 << 29) - 1, "u32"), "u32")
    margin = tang.MARGIN_ULPS
    dist = e.bin("sub", dropped, e.const((1 << 28) - margin, "u32"), "u32")
    hard = e.setp("le", dist, e.const(2 * margin, "u32"), "u32")
    small = e.bin("and", e.setp("lt", xc, e.const(tang.X_NORMAL, f32), f32),
                  e.setp("gt", xc, lo, f32), "pred")
    hard = e.bin("or", e.bin("or", hard, small, "pred"), e.setp("nan", x, x, f32), "pred")
    return e.if_(hard, lambda slow: [emit_exp_f32_specified(slow, x)], lambda _: [fast],
                 types=[F32], rare=True)[0]


def emit_reduce_and_approximate(e: TargetEmitter, xc: Value) -> tuple[Value, Value]:
    """Steps 3-5 of the specified ``exp`` on a clamped f64 register: ``n`` (s32) and the
    polynomial ``p ~ e^r`` of the Cody-Waite reduced ``r`` (f64), op for op as
    :func:`tessera.numerics.transcendental.exp.reduce_and_approximate`."""
    f64 = "f64"
    n = e.cvt(e.mul(xc, e.const(tr.LOG2E, f64), f64), "s32", f64, "rni")
    nd = e.cvt(n, f64, "s32", "rn")  # exact
    # Cody-Waite: n * LN2_HI and the first subtraction are exact
    r = e.bin("sub", xc, e.mul(nd, e.const(tr.LN2_HI, f64), f64), f64)
    r = e.bin("sub", r, e.mul(nd, e.const(tr.LN2_LO, f64), f64), f64)
    p = e.add(e.mul(r, e.const(tr.COEFFS[0], f64), f64), e.const(tr.COEFFS[1], f64), f64)
    for c in tr.COEFFS[2:]:  # Horner: mul then add, each rounded, never fused
        p = e.add(e.mul(p, r, f64), e.const(c, f64), f64)
    return n, p


def emit_exp_f32_specified(e: TargetEmitter, x: Value) -> Value:
    """e^x of an f32 register: the algorithm of :mod:`tessera.numerics.transcendental.exp`,
    op for op. Returns the f32 result register."""
    _check(x, "f32", "emit_exp_f32_specified")
    f64 = "f64"
    xd = e.cvt(x, f64, "f32")  # exact widening: no rounding modifier
    hi, lo = e.const(tr.CLAMP_HI, f64), e.const(tr.CLAMP_LO, f64)
    xc = e.selp(xd, hi, e.setp("lt", xd, hi, f64), f64)  # a NaN takes the clamp value
    xc = e.selp(xc, lo, e.setp("gt", xc, lo, f64), f64)
    n, p = emit_reduce_and_approximate(e, xc)
    # 2^n: high word (n + 1023) << 20 (as a multiply: shl wants b32), low word 0
    biased = e.add(n, e.const(1023, "s32"), "s32")
    high = e.mul(biased, e.const(1 << 20, "s32"), "s32")
    scale = e.pack([e.const(0, "s32"), high], f64)
    res = e.cvt(e.mul(p, scale, f64), "f32", f64, "rn")
    # NaN in, the same NaN quieted out (payload kept)
    bits = e.bin("or", e.pack([x], "b32"), e.const(tr.QUIET_BIT, "b32"), "b32")
    return e.selp(e.pack([bits], "f32"), res, e.setp("nan", x, x, "f32"), "f32")


def _tree(e: TargetEmitter, values: Sequence[Value], elem: str, pad: Value | None,
          combine: str, mode: str = "") -> Value:
    if not values:
        raise IRVerifyError("a reduction tree needs at least one value")
    for v in values:
        _check(v, elem, f"the {combine} tree")
    vals = list(values)
    while len(vals) > 1:
        if len(vals) % 2:  # padding once per level equals padding to a power of two
            vals.append(pad if pad is not None else vals[-1])
        vals = [e.bin(combine, vals[i], vals[i + 1], elem, mode)
                for i in range(0, len(vals), 2)]
    return vals[0]


def emit_tree_sum_f64(e: TargetEmitter, values: Sequence[Value]) -> Value:
    """The adjacent-pair tree sum of one thread's f64 registers (in element order),
    padded with -0.0 to a power of two: ``(v0 + v1) + (v2 + v3)``..."""
    return _tree(e, values, "f64", e.const(-0.0, "f64"), "add")


def emit_tree_max_f32(e: TargetEmitter, values: Sequence[Value]) -> Value:
    """The adjacent-pair ``max.NaN`` tree of one thread's f32 registers (an odd level
    repeats its last value: max(x, x) == x)."""
    return _tree(e, values, "f32", None, "max", "NaN")


def _offsets(offsets: Sequence[int]) -> list[int]:
    for off in offsets:
        if not 0 < off < 32 or off & (off - 1):
            raise IRVerifyError(f"butterfly offset {off} is not a power of two below 32")
    return list(offsets)


def emit_shfl_sum_f64(e: TargetEmitter, v: Value, offsets: Sequence[int]) -> Value:
    """Join the f64 partial sums of neighbouring lanes: for each offset (1, 2, 4...,
    ascending for the tree's order) exchange ``v`` with lane ``lane ^ offset``, as its
    two b32 halves, and add. Every lane of the warp must execute it (full mask).
    It continues the tile tree only when lane k holds chunk k of the row and every
    chunk has the same power-of-two length (a shorter chunk would be padded in the
    middle of the row, not at its end)."""
    _check(v, "f64", "emit_shfl_sum_f64")
    for off in _offsets(offsets):
        o = e.const(off, "u32")
        lo, hi = e.unpack(v, "b32", 2)
        other = e.pack([e.one(Shfl("bfly"), lo, o), e.one(Shfl("bfly"), hi, o)], "f64")
        v = e.add(v, other, "f64")
    return v


def emit_shfl_max_f32(e: TargetEmitter, v: Value, offsets: Sequence[int]) -> Value:
    """The ``max.NaN.f32`` butterfly over lanes ``lane ^ offset`` (see
    :func:`emit_shfl_sum_f64`)."""
    _check(v, "f32", "emit_shfl_max_f32")
    for off in _offsets(offsets):
        other = e.one(Shfl("bfly"), v, e.const(off, "u32"))
        v = e.bin("max", v, other, "f32", "NaN")
    return v


__all__ = ["emit_exp_f32", "emit_exp_f32_specified", "emit_reduce_and_approximate",
           "emit_shfl_max_f32", "emit_shfl_sum_f64",
           "emit_tree_max_f32", "emit_tree_sum_f64"]
