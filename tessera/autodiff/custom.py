"""``ts.custom_vjp`` and ``ts.custom_jvp``: functions with user-given derivative rules.

Called on traced values, such a function becomes one ``graph.custom`` instruction whose
region is the traced primal body (what the interpreter runs) and whose ``rule``
attribute names this object in ``CUSTOM_RULES`` (what autodiff asks for the rule).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from tessera.errors import ArgumentError, GradError, user_api
from tessera.frontend.graph import ops
from tessera.frontend.graph.trace import Trace, Tracer
from tessera.ir.core import Instr, IRRegion
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType

CUSTOM_RULES: dict[str, CustomFunction] = {}
_ids = itertools.count()


class CustomFunction:
    """A function whose derivative rule is given by the user."""

    kind = "vjp"

    @user_api
    def __init__(self, fn: Callable[..., Any]) -> None:
        _check_callable(fn, f"@ts.custom_{self.kind}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.rule_name = f"{fn.__name__}#{next(_ids)}"
        CUSTOM_RULES[self.rule_name] = self

    @user_api
    def __call__(self, *args: Any) -> Any:
        operands = [ops.operand(a) for a in args]
        if not any(isinstance(x, Tracer) for x in operands):
            return self.fn(*operands)
        with Trace(self.rule_name) as trace:
            params = [trace.param(TensorType(x.shape, x.type.element)) for x in operands]
            out = self.fn(*params)
            outs = list(out) if isinstance(out, tuple) else [out]
            body = trace.finish([o if isinstance(o, Tracer) else
                                 Tracer(trace, ops.constant(ops.operand(o))) for o in outs])
        # The region ends in a yield; captured outer values become extra operands.
        body.body.instrs[-1].op = graph_ir.Yield()
        op = graph_ir.Custom(self.rule_name, self.kind, len(trace.captured))
        results = ops.bind(op, *operands, *trace.captured, regions=[IRRegion([body.body])],
                           result_types=body.result_types)
        return tuple(results) if isinstance(out, tuple) else results[0]

    def missing(self) -> GradError:
        return GradError(f"{self.fn.__name__} is a custom_{self.kind} function with no rule",
                         hint=f"call {self.fn.__name__}.def{self.kind}(...) before "
                              "differentiating it")


class custom_vjp(CustomFunction):
    """A function with a custom reverse-mode rule: ``f.defvjp(fwd, bwd)``.

    ``fwd(*args) -> (out, saved)``; ``bwd(saved, ct) -> ct_args`` (one value or a tuple).
    """

    kind = "vjp"
    fwd: Callable[..., Any] | None = None
    bwd: Callable[..., Any] | None = None

    @user_api
    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> custom_vjp:
        """Give the rule: ``fwd(*args) -> (out, saved)``, ``bwd(saved, ct) -> cts``."""
        _check_callable(fwd, "defvjp's fwd")
        _check_callable(bwd, "defvjp's bwd")
        self.fwd, self.bwd = fwd, bwd
        return self


class custom_jvp(CustomFunction):
    """A function with a custom forward-mode rule: ``f.defjvp(rule)``.

    ``rule(primals, tangents) -> (out, tangent_out)``, linear in ``tangents``. Reverse
    mode uses its transpose.
    """

    kind = "jvp"
    jvp: Callable[..., Any] | None = None

    @user_api
    def defjvp(self, jvp: Callable[..., Any]) -> custom_jvp:
        """Give the rule: ``jvp(primals, tangents) -> (out, tangent_out)``."""
        _check_callable(jvp, "defjvp's rule")
        self.jvp = jvp
        return self


def _check_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise ArgumentError(f"{what} must be a function, got {type(fn).__name__}",
                            hint="pass a def or a lambda")


def custom_forward(instr: Instr, operands: Sequence[Any]) -> tuple[list[Any], Any]:
    """Forward replay of a custom call under differentiation: (outputs, saved state)."""
    from tessera.autodiff.transform import replay

    custom = CUSTOM_RULES[instr.op.rule]  # type: ignore[attr-defined]
    if isinstance(custom, custom_vjp):
        if custom.fwd is None:
            raise custom.missing()
        nargs = len(instr.operands) - instr.op.captures  # type: ignore[attr-defined]
        out, saved = custom.fwd(*operands[:nargs])
        outs = list(out) if isinstance(out, tuple) else [out]
        return [ops.operand(x) for x in outs], saved
    return replay(instr, operands), None


def custom_backward(instr: Instr, primals: Sequence[Any], saved: Any, cts: Sequence[Any],
                    needs: Sequence[bool]) -> list[Any]:
    """Cotangents of a custom call's operands from its rule."""
    from tessera.autodiff.transform import backprop

    custom = CUSTOM_RULES[instr.op.rule]  # type: ignore[attr-defined]
    nargs = len(instr.operands) - instr.op.captures  # type: ignore[attr-defined]
    if isinstance(custom, custom_vjp):
        assert custom.bwd is not None
        got = custom.bwd(saved, cts[0] if len(cts) == 1 else tuple(cts))
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(got) != nargs:
            raise GradError(f"the backward rule of {custom.fn.__name__} returned {len(got)} "
                            f"cotangents for {nargs} arguments", loc=instr.loc)
        return [ops.operand(c) if c is not None else None for c in got] + \
            [None] * (len(primals) - nargs)
    if custom.jvp is None:
        raise custom.missing()
    # Reverse mode of a custom_jvp: transpose the (linear) tangent map t -> jvp(x, t)[1].
    user = primals[:nargs]
    with Trace(f"{custom.rule_name}_tangent_map") as trace:
        ts_ = [trace.param(TensorType(p.shape, p.type.element)) for p in user]
        _, tan = custom.jvp(tuple(user), tuple(ts_))
        tans = list(tan) if isinstance(tan, tuple) else [tan]
        tangent_map = trace.finish([ops.operand(t) if not isinstance(t, Tracer) else t
                                    for t in tans])
    from tessera.autodiff.transform import zeros

    args = [zeros(p.type) for p in user] + list(trace.captured)
    _, got = backprop(tangent_map, args, cts, list(range(nargs)))
    return list(got) + [None] * (len(primals) - nargs)
