"""The Graph IR ops a generated tile kernel computes, each as Tile IR that gives the
graph interpreter's bits, and the refusal of every other op.

A rule takes the emitter (:class:`tessera.ir.transforms.to_tile.kernel.Emitter`), the
graph instruction and its operands' tiles, and returns the result tile. Why each rule
gives the graph interpreter's bits (which rounds the exact or float64 result once):

* ``+ - * /`` and ``sqrt`` of f32 are correctly rounded in both; bf16 and f16 compute
  in f32 and round again, which is innocuous for these five operations (24 >= 2p + 2
  significand bits, Figueroa 1995), so both are correctly rounded;
* ``pow`` of formats of up to 32 bits is correctly rounded to f32 in both
  (``numerics.transcendental.exact``), of f64 NumPy's float64 one in both; ``log``,
  ``tanh`` and ``erf`` are the specified binary64 ones (``numerics.transcendental.log64``,
  ``tanh64``, ``erf64``) rounded once in both; ``gelu`` is the graph's
  binary64 algorithm (``numerics.transcendental.gelu64``) performed op for op on f64
  tiles, then rounded once: the tanh form with the specified binary64 exp, the erf
  form with the specified erfc (``tile.erfc``), so both reach PTX;
* ``exp`` of f32 is correctly rounded in both (``numerics.transcendental.exp``); bf16
  and f16 round that f32 value again in both (the graph defines their ``exp`` so), which
  was checked on every bf16 and f16 input (tests/ir/transforms/to_tile/);
* ``maximum``, ``minimum``, comparisons, ``where``, ``relu`` and ``neg`` select or flip
  signs: nothing is rounded;
* a NaN a graph op computes is the default quiet NaN (``interp.graph.elementwise``),
  while the tile level passes NaN payloads on, so each such op's result is followed by
  ``where(x != x, nan, x)``;
* integer ``+ - *`` (and ``neg``, ``abs``) saturate in Graph IR and wrap at the tile
  level: formats of up to 32 bits are computed in int64, where they cannot overflow,
  and cast back, which saturates as the graph does; int64 is refused;
* a transpose of the last two axes moves data only.

Reductions and softmax are in :mod:`tessera.ir.transforms.to_tile.reduce`, matmuls in
:mod:`tessera.ir.transforms.to_tile.matmul`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.types import TensorType
from tessera.numerics import Policy, convert, dtype, storage_of
from tessera.numerics.transcendental import gelu64

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

Rule = Callable[["Emitter", Instr, list[Value]], Value]

#: graph op class -> rule
RULES: dict[type, Rule] = {}

INT64 = dtype("int64")
F64 = dtype("f64")


class TileGenerationError(UnsupportedError):
    """A graph op (or a use of one) that the Schedule → Tile generation cannot yet
    implement with the graph interpreter's bits; the function still runs with
    ``backend="interp"``."""

    kind = "unsupported"


def refuse(instr: Instr, why: str, hint: str | None = None) -> TileGenerationError:
    """The error for ``instr``, at the user's line that made it."""
    return TileGenerationError(
        f"{instr.op.name} cannot be generated as a tile kernel yet: {why}", loc=instr.loc,
        hint=hint or "run the function with backend='interp' (the graph interpreter)")


def rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register a rule for the graph op ``classes``."""
    def register(fn: Rule) -> Rule:
        for cls in classes:
            RULES[cls] = fn
        return fn
    return register


_rule = rule


def _type(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _kind(instr: Instr, k: int = 0) -> str:
    t = instr.results[k].type if k >= 0 else instr.operands[0].type
    assert isinstance(t, TensorType)
    return storage_of(t.element).kind


def check_element(instr: Instr) -> None:
    """Refuse stochastic rounding and complex values, which the tile level lacks."""
    for v in [*instr.operands, *instr.results]:
        e = _type(v).element
        if isinstance(e, Policy) and e.stochastic_round:
            raise refuse(instr, f"stochastic rounding ({e}) draws its random bits by the "
                         "position of each element in the whole graph program")
        if storage_of(e).kind == "complex":
            raise refuse(instr, "the tile level has no complex values")


def settle(em: Emitter, instr: Instr, x: Value) -> Value:
    """``x`` with every NaN the default quiet NaN, as the graph interpreter gives it."""
    t = _type(x)
    if storage_of(t.element).kind != "float":
        return x
    nan = em.full(t, float("nan"))
    (isnan,) = em.create(tc.Ne(), [x, x], instr)
    (out,) = em.create(tc.Where(), [isnan, nan, x], instr)
    return out


_FLOAT_ARITH = {graph_ops.Add: tc.Add, graph_ops.Sub: tc.Sub, graph_ops.Mul: tc.Mul,
                graph_ops.Div: tc.Div, graph_ops.Pow: tc.Pow}
_INT_ARITH = {graph_ops.Add: tc.Add, graph_ops.Sub: tc.Sub, graph_ops.Mul: tc.Mul}


def in_int64(em: Emitter, instr: Instr, args: list[Value],
             body: Callable[[list[Value]], Value]) -> Value:
    """An integer op computed in int64 and cast back (saturating, as Graph IR does)."""
    fmt = storage_of(_type(instr.operands[0]).element)
    if fmt.bits > 32:
        raise refuse(instr, f"{fmt} results would wrap at the tile level, where Graph IR "
                     "saturates them", hint="use a format of at most 32 bits, or "
                     "backend='interp'")
    wide = [em.create(tc.Cast(INT64), [a], instr)[0] for a in args]
    (out,) = em.create(tc.Cast(_type(instr.results[0]).element), [body(wide)], instr)
    return out


@_rule(*_FLOAT_ARITH)
def _arith(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    kind = _kind(instr)
    if kind == "float":
        (out,) = em.create(_FLOAT_ARITH[type(instr.op)](), args, instr)
        return settle(em, instr, out)
    if kind == "int" and type(instr.op) in _INT_ARITH:
        op = _INT_ARITH[type(instr.op)]
        return in_int64(em, instr, args, lambda w: em.create(op(), w, instr)[0])
    raise refuse(instr, f"{kind} {instr.op.name.split('.')[1]} differs between Graph IR "
                 "and the tile level")


@_rule(graph_ops.Maximum, graph_ops.Minimum)
def _extremum(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    op = tc.Maximum if isinstance(instr.op, graph_ops.Maximum) else tc.Minimum
    (out,) = em.create(op(), args, instr)
    return settle(em, instr, out)


_COMPARE = {graph_ops.Gt: tc.Gt, graph_ops.Ge: tc.Ge, graph_ops.Lt: tc.Lt,
            graph_ops.Le: tc.Le, graph_ops.Eq: tc.Eq, graph_ops.Ne: tc.Ne}


@_rule(*_COMPARE)
def _compare(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    return em.create(_COMPARE[type(instr.op)](), args, instr)[0]


@_rule(graph_ops.Where)
def _where(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    return em.create(tc.Where(), args, instr)[0]


@_rule(graph_ops.Cast)
def _cast(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    return em.create(tc.Cast(instr.op.to), args, instr)[0]  # type: ignore[attr-defined]


@_rule(graph_ops.Neg, graph_ops.Abs)
def _sign(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    op = tc.Neg if isinstance(instr.op, graph_ops.Neg) else tc.Abs
    kind = _kind(instr)
    if kind == "int":
        return in_int64(em, instr, args, lambda w: em.create(op(), w, instr)[0])
    (out,) = em.create(op(), args, instr)
    # neg moves a NaN with its sign flipped in both; abs computes a new one
    return out if op is tc.Neg else settle(em, instr, out)


@rule(graph_ops.Exp, graph_ops.Log, graph_ops.Sqrt, graph_ops.Tanh, graph_ops.Erf)
def _math(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    fmt = storage_of(_type(instr.results[0]).element)
    if fmt.kind != "float":
        raise refuse(instr, f"{instr.op.name} of {fmt} values")
    if isinstance(instr.op, graph_ops.Exp) and fmt.name not in ("f32", "bf16", "f16"):
        raise refuse(instr, f"the tile level's exp of {fmt} rounds the correctly rounded "
                     "f32 exp again, which was not checked against the graph's rounding "
                     "on every input", hint="compute exp in f32 (cast before and after), "
                     "or run with backend='interp'")
    op = {graph_ops.Exp: tc.Exp, graph_ops.Log: tc.Log, graph_ops.Sqrt: tc.Sqrt,
          graph_ops.Tanh: tc.Tanh, graph_ops.Erf: tc.Erf}[type(instr.op)]
    (out,) = em.create(op(), args, instr)
    return settle(em, instr, out)


@rule(graph_ops.Gelu)
def _gelu(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    """The tanh form as the specified binary64 algorithm of
    :mod:`tessera.numerics.transcendental.gelu64`, step for step on f64 tiles
    (``x / (1 + exp(K (x + A x x x)))``, nudged where ``|x| < 2^-54``), then one
    rounding; the erf form likewise with the specified erfc: ``c = erfc(|x| R)``,
    ``x > 0 ? x (1 - 0.5 c) : (0.5 x) c``, nudged where ``c == 1``."""
    (x,) = args
    t = _type(x)
    if storage_of(t.element).kind != "float":
        raise refuse(instr, f"gelu of {t.element} values")
    (w,) = em.create(tc.Cast(F64), [x], instr)
    wt = _type(w)

    def op(cls: type, *operands: Value) -> Value:
        return em.create(cls(), list(operands), instr)[0]

    if instr.op.approximate:  # type: ignore[attr-defined]
        cube = op(tc.Mul, op(tc.Mul, w, w), w)
        inner = op(tc.Add, w, op(tc.Mul, em.full(wt, gelu64.CUBIC), cube))
        e = op(tc.Exp, op(tc.Mul, em.full(wt, gelu64.K), inner))
        d = op(tc.Add, em.full(wt, 1.0), e)
        out = op(tc.Div, w, d)
        # step 6: |x| < 2^-54 keeps the exact value's side of x / 2
        tiny = op(tc.And, op(tc.Eq, d, em.full(wt, 2.0)), op(tc.Ne, out, em.full(wt, 0.0)))
        nudged = op(tc.Add, out, op(tc.Mul, op(tc.Abs, out), em.full(wt, gelu64.NUDGE)))
        out = op(tc.Where, tiny, nudged, out)
    else:
        half, zero = em.full(wt, 0.5), em.full(wt, 0.0)
        c = op(tc.Erfc, op(tc.Mul, op(tc.Abs, w), em.full(wt, gelu64.R)))
        above = op(tc.Mul, w, op(tc.Sub, em.full(wt, 1.0), op(tc.Mul, half, c)))
        out = op(tc.Where, op(tc.Gt, w, zero), above, op(tc.Mul, op(tc.Mul, half, w), c))
        # step 4: |x| < 2^-53.7 keeps the exact value's side of x / 2
        tiny = op(tc.And, op(tc.Eq, c, em.full(wt, 1.0)), op(tc.Ne, out, zero))
        nudged = op(tc.Add, out, op(tc.Mul, op(tc.Abs, out), em.full(wt, gelu64.NUDGE)))
        out = op(tc.Where, tiny, nudged, out)
    (out,) = em.create(tc.Cast(t.element), [out], instr)
    return settle(em, instr, out)


@rule(graph_ops.Relu)
def _relu(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    (x,) = args
    t = _type(x)
    zero = em.full(t, 0)
    if storage_of(t.element).kind != "float":
        return em.create(tc.Maximum(), [x, zero], instr)[0]
    # x where x > 0 or x is NaN, else +0 (relu(-0.0) is +0.0): a selection
    (pos,) = em.create(tc.Gt(), [x, zero], instr)
    (nan,) = em.create(tc.Ne(), [x, x], instr)
    (keep,) = em.create(tc.Or(), [pos, nan], instr)
    return em.create(tc.Where(), [keep, x, zero], instr)[0]


def _splat(instr: Instr) -> float | int | bool:
    """The one stored value of a constant (every element rounded as the graph does)."""
    t = _type(instr.results[0])
    stored = np.asarray(convert(instr.op.value.array, t.element))  # type: ignore[attr-defined]
    flat = stored.reshape(-1)
    if flat.size and not (flat == flat[0]).all() and not np.isnan(flat.astype(float)).all():
        raise refuse(instr, "a constant tensor of several values has no tile-level form",
                     hint="pass the tensor as an argument, or run with backend='interp'")
    return flat[0].item() if flat.size else 0


@_rule(graph_ops.Constant)
def _constant(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    return em.full(em.tile_type(instr.results[0]), _splat(instr))


@_rule(graph_ops.Broadcast)
def _broadcast(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    (x,) = args
    src, out = _type(x), em.tile_type(instr.results[0])
    owner = instr.operands[0].owner
    if x is instr.operands[0] and isinstance(owner, Instr):  # a folded scalar constant
        return em.full(out, _splat(owner))
    if src.shape == out.shape:
        return x
    lead = out.rank - src.rank
    op = tc.Broadcast(tuple(out.shape), tuple(range(lead, out.rank)))
    return em.create(op, [x], instr)[0]


@rule(graph_ops.Transpose)
def _transpose(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    perm = tuple(instr.op.perm)  # type: ignore[attr-defined]
    rank = len(perm)
    if rank < 2 or perm != (*range(rank - 2), rank - 1, rank - 2):
        raise refuse(instr, f"the permutation {list(perm)} is not a swap of the last two "
                     "axes (the tile level's transpose)")
    return em.create(tc.Transpose(), args, instr)[0]


def folded(instr: Instr, users: list[Instr]) -> bool:
    """True for a scalar constant that only broadcasts read: they fill their tiles
    with its value, so it needs no instruction of its own."""
    return isinstance(instr.op, graph_ops.Constant) and _type(instr.results[0]).rank == 0 \
        and bool(users) and all(isinstance(u.op, graph_ops.Broadcast) for u in users)


def emit(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    """The tile of ``instr``'s result, or the error that names the op and its line."""
    rule = RULES.get(type(instr.op))
    if rule is None:
        raise refuse(instr, _why_not(instr))
    if len(instr.results) != 1:
        raise refuse(instr, "it has several results")
    check_element(instr)
    return rule(em, instr, args)


def _why_not(instr: Instr) -> str:
    return "no tile-level rule gives the graph interpreter's bits for it"


__all__ = ["RULES", "TileGenerationError", "check_element", "emit", "folded", "in_int64",
           "refuse", "rule", "settle"]
