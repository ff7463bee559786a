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

from tessera.frontend.graph import ops as graph_ops
from tessera.ir.core import rule_decorator
from tessera.ir.dialects import graph as graph_ir
from tessera.numerics import storage_of

Rule = Callable[[Any, Sequence[Any], Sequence[Any], Sequence[Any], Sequence[bool]],
                Sequence[Any]]
VJP: dict[type, Rule] = {}


rule = rule_decorator(VJP, "VJP rule")


def unary(derivative: Callable[[Any, Any], Any]) -> Rule:
    """A rule for ``y = f(x)`` from ``f'`` given as ``derivative(x, y)``."""
    return lambda op, xs, ys, cts, needs: [cts[0] * graph_ops.conj(derivative(xs[0], ys[0]))]


def _is_complex(x: Any) -> bool:
    return storage_of(x.type.element).kind == "complex"


VJP[graph_ir.Neg] = lambda op, xs, ys, cts, needs: [-cts[0]]
VJP[graph_ir.Exp] = unary(lambda x, y: y)
VJP[graph_ir.Log] = unary(lambda x, y: 1.0 / x)
VJP[graph_ir.Tanh] = unary(lambda x, y: 1.0 - y * y)
VJP[graph_ir.Sqrt] = unary(lambda x, y: 0.5 / y)
VJP[graph_ir.Sin] = unary(lambda x, y: graph_ops.cos(x))
VJP[graph_ir.Cos] = unary(lambda x, y: -graph_ops.sin(x))
VJP[graph_ir.Erf] = unary(lambda x, y: (2.0 / math.sqrt(math.pi)) * graph_ops.exp(-(x * x)))
VJP[graph_ir.Relu] = lambda op, xs, ys, cts, needs: [graph_ops.where(xs[0] > 0, cts[0], 0.0)]
VJP[graph_ir.Sign] = VJP[graph_ir.Round] = lambda op, xs, ys, cts, needs: [None]
VJP[graph_ir.Conj] = lambda op, xs, ys, cts, needs: [graph_ops.conj(cts[0])]


@rule(graph_ir.Gelu)
def _gelu(op: graph_ir.Gelu, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    if op.approximate:
        c = math.sqrt(2.0 / math.pi)
        t = graph_ops.tanh(c * (x + 0.044715 * x ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)
    else:
        d = 0.5 * (1.0 + graph_ops.erf(x / math.sqrt(2.0))) + x * graph_ops.exp(
            -0.5 * x * x
        ) / math.sqrt(2.0 * math.pi)
    return [cts[0] * d]


@rule(graph_ir.Abs)
def _abs(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    x, y = xs[0], ys[0]
    if _is_complex(x):
        # d|z| pulls back to ct * z/|z| (zero where z == 0).
        safe = graph_ops.where(graph_ops.equal(y, 0.0), 1.0, y)
        return [
            graph_ops.cast(
                graph_ops.where(graph_ops.equal(y, 0.0), 0.0, cts[0] / safe), x.type.element
            )
            * x
        ]
    return [cts[0] * graph_ops.sign(x)]


@rule(graph_ir.Real)
def _real(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    return [graph_ops.cast(cts[0], xs[0].type.element) if _is_complex(xs[0]) else cts[0]]


@rule(graph_ir.Imag)
def _imag(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    if not _is_complex(xs[0]):
        return [None]
    return [graph_ops.cast(cts[0], xs[0].type.element) * 1j]


VJP[graph_ir.Add] = lambda op, xs, ys, cts, needs: [cts[0], cts[0]]
VJP[graph_ir.Sub] = lambda op, xs, ys, cts, needs: [cts[0], -cts[0]]
VJP[graph_ir.Mul] = lambda op, xs, ys, cts, needs: [
    cts[0] * graph_ops.conj(xs[1]) if needs[0] else None,
    cts[0] * graph_ops.conj(xs[0]) if needs[1] else None,
]


@rule(graph_ir.Div)
def _div(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    b = xs[1]
    return [cts[0] / graph_ops.conj(b) if needs[0] else None,
            -cts[0] * graph_ops.conj(ys[0] / b) if needs[1] else None]


@rule(graph_ir.Pow)
def _pow(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    # b * a**(b-1) rather than b * y / a: finite at a == 0 for b >= 1.
    da = cts[0] * graph_ops.conj(b * a ** (b - 1.0)) if needs[0] else None
    if not needs[1]:
        return [da, None]
    # d(a**b)/db = y * log(a); at a == 0 that is 0 * -inf, but 0**b is flat in b (b > 0),
    # so log(a) is taken at 1 there, as JAX does.
    safe = graph_ops.where(graph_ops.equal(a, 0.0), 1.0, a)
    return [da, cts[0] * graph_ops.conj(ys[0] * graph_ops.log(safe))]


def _select_rule(first_wins: Callable[[Any, Any], Any]) -> Rule:
    # Ties split the cotangent evenly, so the rule is symmetric and linear.
    def fn(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
        a, b = xs
        ct = cts[0]
        half = graph_ops.where(graph_ops.equal(a, b), 0.5 * ct, 0.0)
        return [graph_ops.where(first_wins(a, b), ct, half) if needs[0] else None,
                graph_ops.where(first_wins(b, a), ct, half) if needs[1] else None]
    return fn


VJP[graph_ir.Maximum] = _select_rule(lambda a, b: a > b)
VJP[graph_ir.Minimum] = _select_rule(lambda a, b: a < b)


@rule(graph_ir.Where)
def _where(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    c, ct = xs[0], cts[0]
    return [None, graph_ops.where(c, ct, 0.0) if needs[1] else None,
            graph_ops.where(c, 0.0, ct) if needs[2] else None]


@rule(graph_ir.Cast)
def _cast(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x, ct = xs[0], cts[0]
    if _is_complex(ct) and not _is_complex(x):
        ct = graph_ops.real(ct)
    return [graph_ops.cast(ct, x.type.element)]


def _swap(x: Any) -> Any:
    perm = list(range(x.ndim))
    perm[-2:] = perm[-1], perm[-2]
    return graph_ops.transpose(x, perm)


@rule(graph_ir.MatMul)
def _matmul(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
            needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    ct = cts[0]
    return [graph_ops.matmul(ct, _swap(graph_ops.conj(b))) if needs[0] else None,
            graph_ops.matmul(_swap(graph_ops.conj(a)), ct) if needs[1] else None]


def _expand(ct: Any, op: graph_ir.Reduce, x: Any) -> Any:
    """The reduction's cotangent reshaped with kept dims and broadcast to ``x``."""
    axes = op.reduced_axes(x.ndim)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return graph_ops.broadcast_to(graph_ops.reshape(ct, kept), tuple(x.shape))


VJP[graph_ir.Sum] = lambda op, xs, ys, cts, needs: [_expand(cts[0], op, xs[0])]


@rule(graph_ir.Mean)
def _mean(op: graph_ir.Mean, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    n = math.prod(int(x.shape[a]) for a in op.reduced_axes(x.ndim))
    return [_expand(cts[0], op, x) / float(n)]


@rule(graph_ir.Max, graph_ir.Min)
def _extremum(op: graph_ir.Reduce, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
              needs: Sequence[bool]) -> list[Any]:
    # Every element equal to the extremum shares the cotangent equally.
    x = xs[0]
    hit = graph_ops.equal(x, _expand(ys[0], op, x))
    count = _expand(graph_ops.sum(graph_ops.where(hit, 1.0, 0.0), axis=op.reduced_axes(x.ndim),
                          keepdims=op.keepdims), op, x)
    return [graph_ops.where(hit, _expand(cts[0], op, x) / count, 0.0)]


@rule(graph_ir.Softmax)
def _softmax(op: graph_ir.Softmax, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
             needs: Sequence[bool]) -> list[Any]:
    y, ct = ys[0], cts[0]
    return [y * (ct - graph_ops.sum(ct * y, axis=op.axis, keepdims=True))]


@rule(graph_ir.Mse)
def _mse(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    a, b = xs
    d = (a - b) * graph_ops.broadcast_to(cts[0] * (2.0 / max(a.size, 1)), tuple(a.shape))
    return [d if needs[0] else None, -d if needs[1] else None]


@rule(graph_ir.Transpose)
def _transpose(op: graph_ir.Transpose, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
               needs: Sequence[bool]) -> list[Any]:
    inverse = [0] * len(op.perm)
    for i, p in enumerate(op.perm):
        inverse[p] = i
    return [graph_ops.transpose(cts[0], inverse)]


VJP[graph_ir.Reshape] = lambda op, xs, ys, cts, needs: [
    graph_ops.reshape(cts[0], tuple(xs[0].shape))
]


@rule(graph_ir.Broadcast)
def _broadcast(op: graph_ir.Broadcast, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
               needs: Sequence[bool]) -> list[Any]:
    x = xs[0]
    lead = len(op.shape) - x.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(x.shape)
                                      if d == 1 and op.shape[lead + i] != 1)
    ct = graph_ops.sum(cts[0], axis=axes) if axes else cts[0]
    return [graph_ops.reshape(ct, tuple(x.shape))]


@rule(graph_ir.Fft)
def _fft(op: graph_ir.Fft, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
         needs: Sequence[bool]) -> list[Any]:
    n = float(xs[0].shape[op.axis])
    return [graph_ops.ifft(cts[0], axis=op.axis) * n]


@rule(graph_ir.Ifft)
def _ifft(op: graph_ir.Ifft, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
          needs: Sequence[bool]) -> list[Any]:
    n = float(xs[0].shape[op.axis])
    return [graph_ops.fft(cts[0], axis=op.axis) / n]


@rule(graph_ir.Slice)
def _slice(op: graph_ir.Slice, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    return [graph_ops.bind(graph_ir.Embed(tuple(xs[0].shape), op.starts, op.steps), cts[0])[0]]


@rule(graph_ir.Embed)
def _embed(op: graph_ir.Embed, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
           needs: Sequence[bool]) -> list[Any]:
    stops = tuple(lo + (n - 1) * st + 1 if n else lo
                  for lo, n, st in zip(op.starts, xs[0].shape, op.steps))
    return [graph_ops.bind(graph_ir.Slice(op.starts, stops, op.steps), cts[0])[0]]


# -------------------------------------------------------------------------- collectives
# Under @ts.jit a collective is the identity on the global value and changes only its
# placement, so its adjoint is the identity on the cotangent, placed back like the
# operand: all_gather <-> reduce_scatter, all_reduce <-> all_reduce, all_to_all <->
# all_to_all with the dims swapped, shard <-> all_gather, ppermute <-> the inverse
# permutation. A replicated cotangent is one contribution (docs/distributed.md), so a
# reduce_scatter or all_reduce of it sums nothing: distributed gradients equal the
# single-device gradients of the same program, never counted once per device.
def _gathered_dim(op: graph_ir.AllGather, x: Any) -> int | None:
    s = getattr(x.type, "sharding", None)
    if s is None:
        return op.dim
    dims = {s.dim_of(a) for a in graph_ir.axis_names(op.axis)} - {None}
    return dims.pop() if dims else None


@rule(graph_ir.AllGather)
def _all_gather(op: graph_ir.AllGather, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    dim = _gathered_dim(op, xs[0])
    if dim is None:  # nothing was gathered: one device, or a replicated operand
        return [cts[0]]
    return [graph_ops.bind(graph_ir.ReduceScatter(op.axis, dim), cts[0])[0]]


@rule(graph_ir.ReduceScatter, graph_ir.Shard)
def _scatter(op: Any, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
             needs: Sequence[bool]) -> list[Any]:
    return [graph_ops.bind(graph_ir.AllGather(op.axis), cts[0])[0]]


@rule(graph_ir.AllReduce)
def _all_reduce(op: graph_ir.AllReduce, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    # max, min and mean are the identity on the global value they accept (docs).
    return [graph_ops.bind(graph_ir.AllReduce(op.axis), cts[0])[0] if op.op == "sum" else cts[0]]


@rule(graph_ir.AllToAll)
def _all_to_all(op: graph_ir.AllToAll, xs: Sequence[Any], ys: Sequence[Any], cts: Sequence[Any],
                needs: Sequence[bool]) -> list[Any]:
    return [graph_ops.bind(graph_ir.AllToAll(op.axis, op.concat_dim, op.split_dim), cts[0])[0]]


VJP[graph_ir.MeshBroadcast] = lambda op, xs, ys, cts, needs: [cts[0]]
VJP[graph_ir.Ppermute] = lambda op, xs, ys, cts, needs: [
    graph_ops.bind(graph_ir.Ppermute(op.axis, tuple((d, s) for s, d in op.perm)), cts[0])[0]]


#: Graph IR ops the VJP table leaves out on purpose, and why: every other non-terminator
#: op has a rule (tests/test_rule_tables.py checks both). Forward mode transposes the VJP,
#: so this one table serves both modes.
NO_VJP_RULE: dict[type, str] = {
    **{cls: "its result is bool, which carries no cotangent"
       for cls in (graph_ir.Gt, graph_ir.Ge, graph_ir.Lt, graph_ir.Le, graph_ir.Eq, graph_ir.Ne)},
    graph_ir.Constant: "it has no operand to pull a cotangent back to",
    graph_ir.Custom: "each graph.custom is differentiated by its own rule (custom.CUSTOM_RULES, "
              "keyed by rule name)",
    graph_ir.KernelCall: "a hand-written tile kernel is opaque to autodiff: a custom_vjp "
                         "around the call gives its rule (transform names the kernel)",
}
