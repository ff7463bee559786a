"""Reverse mode as a Graph IR transformation, and forward mode built from it.

``backprop`` replays a function's instructions into the current trace, then walks them
backwards asking the VJP rule of each op (``rules.VJP``, keyed by op class) for the
cotangents of its operands. The rules are written with the ``ts.*`` operators, so the
backward pass is ordinary Graph IR: it prints, runs, and can be differentiated again
(second order is ``grad`` of a function that contains a backward pass).

Forward mode (``jvp``) uses the transpose trick: ``u -> vjp(f, x)(u)`` is linear in
``u``, and its own VJP applied to a tangent ``t`` is ``J t``. Every VJP rule is linear
in its cotangent and differentiable, so one rule table serves both modes, and a
``custom_jvp`` rule is transposed exactly once in each direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import GradError
from tessera.frontend.graph import ops
from tessera.frontend.graph.tensor import Tensor
from tessera.frontend.graph.trace import Trace, Tracer, current_trace
from tessera.ir.core import Function, Instr, IRRegion, Value, clone_block
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

Operand = Tracer | Tensor
DIFFERENTIABLE_KINDS = ("float", "complex")


def differentiable(t: Any) -> bool:
    """Whether values of type ``t`` carry cotangents (floats and complex numbers)."""
    return isinstance(t, TensorType) and storage_of(t.element).kind in DIFFERENTIABLE_KINDS


def zeros(t: TensorType) -> Operand:
    """A zero tensor of type ``t`` in the current trace (a scalar constant broadcast)."""
    zero = Tensor(np.zeros((), storage_of(t.element).np_dtype), t.element)
    trace = current_trace()
    scalar = Tracer(trace, ops.constant(zero)) if trace is not None else zero
    return ops.broadcast_to(scalar, tuple(t.shape))  # type: ignore[arg-type]


def replay(instr: Instr, operands: Sequence[Operand]) -> list[Operand]:
    """Emit a copy of ``instr`` on new operands (its regions cloned)."""
    regions = [IRRegion([clone_block(b, {}) for b in r.blocks]) for r in instr.regions]
    return ops.bind(instr.op, *operands, regions=regions,
                    result_types=[r.type for r in instr.results], loc=instr.loc)


def inline(fn: Function, args: Sequence[Operand]) -> list[Operand]:
    """Replay ``fn`` on ``args`` in the current trace and return its results."""
    env: dict[Value, Operand] = dict(zip(fn.args, args))
    for instr in fn.body.instrs:
        if instr.op.terminator:
            return [env[v] for v in instr.operands]
        env.update(zip(instr.results, replay(instr, [env[v] for v in instr.operands])))
    raise GradError(f"function @{fn.name} has no return")


def active_values(fn: Function, wrt: Sequence[Value]) -> set[Value]:
    """Values that depend differentiably on ``wrt`` (forward dependence analysis)."""
    active = {v for v in wrt if differentiable(v.type)}
    for instr in fn.body.instrs:
        if any(v in active for v in instr.operands):
            active.update(r for r in instr.results if differentiable(r.type))
    return active


def _accumulate(cts: dict[Value, Operand], value: Value, ct: Operand) -> None:
    ct = ops.cast(ct, value.type.element)  # type: ignore[attr-defined]
    if tuple(ct.shape) != tuple(value.type.shape):  # type: ignore[attr-defined]
        raise GradError(f"a VJP rule returned a cotangent of shape {tuple(ct.shape)} for a "
                        f"value of shape {value.type.shape}")  # type: ignore[attr-defined]
    cts[value] = ops.add(cts[value], ct) if value in cts else ct


def backprop(fn: Function, args: Sequence[Operand], out_cts: Sequence[Operand | None],
             wrt: Sequence[int]) -> tuple[list[Operand], list[Operand]]:
    """Replay ``fn`` on ``args`` and pull ``out_cts`` back to the arguments ``wrt``.

    Returns the primal outputs and one cotangent per index in ``wrt`` (zeros where an
    argument does not influence the outputs).
    """
    from tessera.autodiff.custom import custom_backward, custom_forward
    from tessera.autodiff.rules import VJP

    active = active_values(fn, [fn.args[i] for i in wrt])
    env: dict[Value, Operand] = dict(zip(fn.args, args))
    saved: dict[Instr, Any] = {}
    body = fn.body.instrs
    for instr in body[:-1]:
        operands = [env[v] for v in instr.operands]
        if isinstance(instr.op, graph_ir.Custom) and any(v in active for v in instr.operands):
            outs, saved[instr] = custom_forward(instr, operands)
        else:
            outs = replay(instr, operands)
        env.update(zip(instr.results, outs))
    ret = body[-1]
    outputs = [env[v] for v in ret.operands]

    cts: dict[Value, Operand] = {}
    for value, ct in zip(ret.operands, out_cts):
        if ct is not None and value in active:
            _accumulate(cts, value, ct)
    for instr in reversed(body[:-1]):
        if not any(r in cts for r in instr.results):
            continue
        needs = [v in active for v in instr.operands]
        if not any(needs):
            continue
        result_cts = [cts.get(r) if r in cts else zeros(r.type) for r in instr.results]
        primals = [env[v] for v in instr.operands]
        if isinstance(instr.op, graph_ir.Custom):
            in_cts = custom_backward(instr, primals, saved.get(instr), result_cts, needs)
        else:
            rule = VJP.get(type(instr.op))
            if rule is None:
                raise _no_rule(instr)
            outs = [env[r] for r in instr.results]
            in_cts = rule(instr.op, primals, outs, result_cts, needs)
        for value, ct, need in zip(instr.operands, in_cts, needs):
            if need and ct is not None:
                _accumulate(cts, value, ct)
    grads = [cts[fn.args[i]] if fn.args[i] in cts else zeros(fn.args[i].type) for i in wrt]
    return outputs, grads


def _no_rule(instr: Instr) -> GradError:
    """The error for an op without a VJP rule; a tile kernel's call names the kernel."""
    if isinstance(instr.op, graph_ir.KernelCall):
        name = instr.op.kernel
        return GradError(f"the tile kernel '{name}' has no differentiation rule: autodiff "
                         "cannot see through a hand-written kernel", loc=instr.loc,
                         hint="wrap the call in a ts.custom_vjp function and give it a "
                              "backward rule (a kernel or ts.* code): f.defvjp(fwd, bwd)")
    return GradError(f"{instr.op.name} has no differentiation rule", loc=instr.loc,
                     hint="wrap the computation in ts.custom_vjp to give one")


def vjp_function(fn: Function, wrt: Sequence[int], *, name: str | None = None) -> Function:
    """A function ``(args..., cts...) -> (outputs..., grads...)``: reverse mode as IR."""
    with Trace(name or f"{fn.name}_vjp") as trace:
        args = [trace.param(a.type, a.hint) for a in fn.args]  # type: ignore[arg-type]
        cts = [trace.param(t, f"ct{k}") for k, t in enumerate(fn.result_types)]  # type: ignore[arg-type]
        outputs, grads = backprop(fn, args, cts, wrt)
        return trace.finish([as_traced(x) for x in outputs + grads])


def jvp_function(fn: Function, wrt: Sequence[int], *, name: str | None = None) -> Function:
    """A function ``(args..., tangents...) -> (outputs..., tangent outputs...)``.

    Built as the VJP, with respect to the cotangent ``u``, of ``u -> vjp(fn)(args, u)``.
    """
    with Trace(f"{fn.name}_linear_transpose") as inner:
        args = [inner.param(a.type, a.hint) for a in fn.args]  # type: ignore[arg-type]
        us = [inner.param(t, f"u{k}") for k, t in enumerate(fn.result_types)]  # type: ignore[arg-type]
        _, grads = backprop(fn, args, us, wrt)
        pullback = inner.finish([as_traced(x) for x in grads])
    with Trace(name or f"{fn.name}_jvp") as trace:
        args = [trace.param(a.type, a.hint) for a in fn.args]  # type: ignore[arg-type]
        tangents = [trace.param(fn.args[i].type, f"t{k}")  # type: ignore[arg-type]
                    for k, i in enumerate(wrt)]
        outputs = inline(fn, args)
        u0 = [zeros(t) for t in fn.result_types]  # type: ignore[arg-type]
        n = len(fn.args)
        _, tangent_out = backprop(pullback, args + u0, tangents,
                                  list(range(n, n + len(u0))))
        return trace.finish([as_traced(x) for x in outputs + tangent_out])


def as_traced(x: Operand) -> Tracer:
    """``x`` as a tracer of the current trace (concrete values become constants)."""
    if isinstance(x, Tracer):
        return x
    trace = current_trace()
    assert trace is not None
    return Tracer(trace, ops.constant(x))
