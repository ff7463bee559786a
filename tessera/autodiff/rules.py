"""VJP rules, keyed by Graph IR op class.

A rule takes ``(op, primals, outputs, cts, needs)`` and returns one cotangent per
operand (``None`` where ``needs`` is false or the operand is not differentiable). Rules
are linear in ``cts`` and written with ``ts.*`` operators, so they trace to Graph IR and
can be differentiated again.

Complex numbers follow the convention ``ct = dL/d(re) + i dL/d(im)`` for a real loss
``L``: the cotangent of a linear map ``A`` is ``A^H ct`` (so ``fft`` pulls back with
``n * ifft``), and a holomorphic ``f`` pulls back with ``ct * conj(f'(z))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tessera.frontend.graph import ops as o
from tessera.ir.core import rule_decorator
from tessera.ir.dialects import graph as g
from tessera.numerics import storage_of

Rule = Callable[[Any, Sequence[Any], Sequence[Any], Sequence[Any], Sequence[bool]],
                Sequence[Any]]
VJP: dict[type, Rule] = {}


rule = rule_decorator(VJP, "VJP rule")


def unary(derivative: Callable[[Any, Any], Any]) -> Rule:
    """A rule for ``y = f(x)`` from ``f'`` given as ``derivative(x, y)``."""
    return lambda op, xs, ys, cts, needs: [cts[0] * o.conj(derivative(xs[0], ys[0]))]


def _is_complex(x: Any) -> bool:
    return storage_of(x.type.element).kind == "complex"


VJP[g.Neg] = lambda op, xs, ys, cts, needs: [-cts[0]]
VJP[g.Exp] = unary(lambda x, y: y)
VJP[g.Log] = unary(lambda x, y: 1.0 / x)
VJP[g.Tanh] = unary(lambda x, y: 1.0 - y * y)
VJP[g.Sqrt] = unary(lambda x, y: 0.5 / y)
VJP[g.Sin] = unary(lambda x, y: o.cos(x))
VJP[g.Cos] = unary(lambda x, y: -o.sin(x))
VJP[g.Erf] = unary(lambda x, y: (2.0 / math.sqrt(math.pi)) * o.exp(-(x * x)))
VJP[g.Relu] = lambda op, xs, ys, cts, needs: [o.where(xs[0] > 0, cts[0], 0.0)]
VJP[g.Sign] = VJP[g.Round] = lambda op, xs, ys, cts, needs: [None]
VJP[g.Conj] = lambda op, xs, ys, cts, needs: [o.conj(cts[0])]


@rule(g.Gelu)
def _gelu(op: g.Gelu, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    if op.approximate:
        c = math.sqrt(2.0 / math.pi)
        t = o.tanh(c * (x + 0.044715 * x ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)
    else:
        d = 0.5 * (1.0 + o.erf(x / math.sqrt(2.0))) + x * o.exp(-0.5 * x * x) / math.sqrt(
            2.0 * math.pi)
    return [cts[0] * d]


@rule(g.Abs)
def _abs(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    x, y = xs[0], ys[0]
    if _is_complex(x):
        # d|z| pulls back to ct * z/|z| (zero where z == 0).
        safe = o.where(o.equal(y, 0.0), 1.0, y)
        return [o.cast(o.where(o.equal(y, 0.0), 0.0, cts[0] / safe), x.type.element) * x]
    return [cts[0] * o.sign(x)]


@rule(g.Real)
def _real(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    return [o.cast(cts[0], xs[0].type.element) if _is_complex(xs[0]) else cts[0]]


@rule(g.Imag)
def _imag(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    if not _is_complex(xs[0]):
        return [None]
    return [o.cast(cts[0], xs[0].type.element) * 1j]


VJP[g.Add] = lambda op, xs, ys, cts, needs: [cts[0], cts[0]]
VJP[g.Sub] = lambda op, xs, ys, cts, needs: [cts[0], -cts[0]]
VJP[g.Mul] = lambda op, xs, ys, cts, needs: [
    cts[0] * o.conj(xs[1]) if needs[0] else None, cts[0] * o.conj(xs[0]) if needs[1] else None]


@rule(g.Div)
def _div(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    b = xs[1]
    return [cts[0] / o.conj(b) if needs[0] else None,
            -cts[0] * o.conj(ys[0] / b) if needs[1] else None]


@rule(g.Pow)
def _pow(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    # b * a**(b-1) rather than b * y / a: finite at a == 0 for b >= 1.
    da = cts[0] * o.conj(b * a ** (b - 1.0)) if needs[0] else None
    if not needs[1]:
        return [da, None]
    # d(a**b)/db = y * log(a); at a == 0 that is 0 * -inf, but 0**b is flat in b (b > 0),
    # so log(a) is taken at 1 there, as JAX does.
    safe = o.where(o.equal(a, 0.0), 1.0, a)
    return [da, cts[0] * o.conj(ys[0] * o.log(safe))]


def _select_rule(first_wins: Callable[[Any, Any], Any]) -> Rule:
    # Ties split the cotangent evenly, so the rule is symmetric and linear.
    def fn(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
        a, b = xs
        ct = cts[0]
        half = o.where(o.equal(a, b), 0.5 * ct, 0.0)
        return [o.where(first_wins(a, b), ct, half) if needs[0] else None,
                o.where(first_wins(b, a), ct, half) if needs[1] else None]
    return fn


VJP[g.Maximum] = _select_rule(lambda a, b: a > b)
VJP[g.Minimum] = _select_rule(lambda a, b: a < b)


@rule(g.Where)
def _where(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    c, ct = xs[0], cts[0]
    return [None, o.where(c, ct, 0.0) if needs[1] else None,
            o.where(c, 0.0, ct) if needs[2] else None]


@rule(g.Cast)
def _cast(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x, ct = xs[0], cts[0]
    if _is_complex(ct) and not _is_complex(x):
        ct = o.real(ct)
    return [o.cast(ct, x.type.element)]


def _swap(x: Any) -> Any:
    perm = list(range(x.ndim))
    perm[-2:] = perm[-1], perm[-2]
    return o.transpose(x, perm)


@rule(g.MatMul)
def _matmul(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
            needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    ct = cts[0]
    return [o.matmul(ct, _swap(o.conj(b))) if needs[0] else None,
            o.matmul(_swap(o.conj(a)), ct) if needs[1] else None]


def _expand(ct: Any, op: g.Reduce, x: Any) -> Any:
    """The reduction's cotangent reshaped with kept dims and broadcast to ``x``."""
    axes = op.reduced_axes(x.ndim)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return o.broadcast_to(o.reshape(ct, kept), tuple(x.shape))


VJP[g.Sum] = lambda op, xs, ys, cts, needs: [_expand(cts[0], op, xs[0])]


@rule(g.Mean)
def _mean(op: g.Mean, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    n = math.prod(int(x.shape[a]) for a in op.reduced_axes(x.ndim))
    return [_expand(cts[0], op, x) / float(n)]


@rule(g.Max, g.Min)
def _extremum(op: g.Reduce, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
              needs: Sequence[bool]) -> list[Any]:
    # Every element equal to the extremum shares the cotangent equally.
    x = xs[0]
    hit = o.equal(x, _expand(ys[0], op, x))
    count = _expand(o.sum(o.where(hit, 1.0, 0.0), axis=op.reduced_axes(x.ndim),
                          keepdims=op.keepdims), op, x)
    return [o.where(hit, _expand(cts[0], op, x) / count, 0.0)]


@rule(g.Softmax)
def _softmax(op: g.Softmax, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
             needs: Sequence[bool]) -> list[Any]:
    y, ct = ys[0], cts[0]
    return [y * (ct - o.sum(ct * y, axis=op.axis, keepdims=True))]


@rule(g.Mse)
def _mse(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    d = (a - b) * o.broadcast_to(cts[0] * (2.0 / max(a.size, 1)), tuple(a.shape))
    return [d if needs[0] else None, -d if needs[1] else None]


@rule(g.Transpose)
def _transpose(op: g.Transpose, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
               needs: Sequence[bool]) -> list[Any]:
    inverse = [0] * len(op.perm)
    for i, p in enumerate(op.perm):
        inverse[p] = i
    return [o.transpose(cts[0], inverse)]


VJP[g.Reshape] = lambda op, xs, ys, cts, needs: [o.reshape(cts[0], tuple(xs[0].shape))]


@rule(g.Broadcast)
def _broadcast(op: g.Broadcast, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
               needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    lead = len(op.shape) - x.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(x.shape)
                                      if d == 1 and op.shape[lead + i] != 1)
    ct = o.sum(cts[0], axis=axes) if axes else cts[0]
    return [o.reshape(ct, tuple(x.shape))]


@rule(g.Fft)
def _fft(op: g.Fft, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    n = float(xs[0].shape[op.axis])
    return [o.ifft(cts[0], axis=op.axis) * n]


@rule(g.Ifft)
def _ifft(op: g.Ifft, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    n = float(xs[0].shape[op.axis])
    return [o.fft(cts[0], axis=op.axis) / n]


@rule(g.Slice)
def _slice(op: g.Slice, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    return [o.bind(g.Embed(tuple(xs[0].shape), op.starts, op.steps), cts[0])[0]]


@rule(g.Embed)
def _embed(op: g.Embed, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    stops = tuple(lo + (n - 1) * st + 1 if n else lo
                  for lo, n, st in zip(op.starts, xs[0].shape, op.steps))
    return [o.bind(g.Slice(op.starts, stops, op.steps), cts[0])[0]]


# -------------------------------------------------------------------------- collectives
# Under @ts.jit a collective is the identity on the global value and changes only its
# placement, so its adjoint is the identity on the cotangent, placed back like the
# operand: all_gather <-> reduce_scatter, all_reduce <-> all_reduce, all_to_all <->
# all_to_all with the dims swapped, shard <-> all_gather, ppermute <-> the inverse
# permutation. A replicated cotangent is one contribution (docs/distributed.md), so a
# reduce_scatter or all_reduce of it sums nothing: distributed gradients equal the
# single-device gradients of the same program, never counted once per device.
def _gathered_dim(op: g.AllGather, x: Any) -> int | None:
    s = getattr(x.type, "sharding", None)
    if s is None:
        return op.dim
    dims = {s.dim_of(a) for a in g.axis_names(op.axis)} - {None}
    return dims.pop() if dims else None


@rule(g.AllGather)
def _all_gather(op: g.AllGather, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    dim = _gathered_dim(op, xs[0])
    if dim is None:  # nothing was gathered: one device, or a replicated operand
        return [cts[0]]
    return [o.bind(g.ReduceScatter(op.axis, dim), cts[0])[0]]


@rule(g.ReduceScatter, g.Shard)
def _scatter(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
             needs: Sequence[bool]) -> list[Any]:
    return [o.bind(g.AllGather(op.axis), cts[0])[0]]


@rule(g.AllReduce)
def _all_reduce(op: g.AllReduce, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    # max, min and mean are the identity on the global value they accept (docs).
    return [o.bind(g.AllReduce(op.axis), cts[0])[0] if op.op == "sum" else cts[0]]


@rule(g.AllToAll)
def _all_to_all(op: g.AllToAll, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    return [o.bind(g.AllToAll(op.axis, op.concat_dim, op.split_dim), cts[0])[0]]


VJP[g.MeshBroadcast] = lambda op, xs, ys, cts, needs: [cts[0]]
VJP[g.Ppermute] = lambda op, xs, ys, cts, needs: [
    o.bind(g.Ppermute(op.axis, tuple((d, s) for s, d in op.perm)), cts[0])[0]]


#: Graph IR ops the VJP table leaves out on purpose, and why: every other non-terminator
#: op has a rule (tests/test_rule_tables.py checks both). Forward mode transposes the VJP,
#: so this one table serves both modes.
NO_VJP_RULE: dict[type, str] = {
    **{cls: "its result is bool, which carries no cotangent"
       for cls in (g.Gt, g.Ge, g.Lt, g.Le, g.Eq, g.Ne)},
    g.Constant: "it has no operand to pull a cotangent back to",
    g.Custom: "each graph.custom is differentiated by its own rule (custom.CUSTOM_RULES, "
              "keyed by rule name)",
}
