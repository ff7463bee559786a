"""The user-facing transformations: grad, value_and_grad, vjp, jvp.

Which arguments ``grad`` differentiates when neither ``argnums`` nor ``wrt`` is given
(documented in docs/autodiff.md): every argument except *data* arguments, whose names
are ``x``, ``X``, ``y``, ``Y``, ``input(s)``, ``target(s)``, ``label(s)``, ``batch`` or
end in ``_true`` / ``_target`` / ``_label``; if that leaves nothing, the first argument
(JAX's default). So ``grad(train_step)(x, y, W)`` gives ``dW`` and
``grad(loss)(x, W, b, y_true)`` gives ``(dW, db)``. One gradient comes back bare,
several as a tuple in argument order.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.autodiff.transform import inline, jvp_function, vjp_function
from tessera.errors import ArgumentError, GradError, user_api
from tessera.frontend.jit import JitFunction, run_compiled, tensors_in
from tessera.frontend.pytree import TreeDef, flatten, unflatten
from tessera.frontend.tensor import Tensor, as_tensor
from tessera.frontend.trace import Trace, Tracer
from tessera.ir.core import Function, Module
from tessera.ir.passes import PassManager
from tessera.ir.types import TensorType
from tessera.numerics import loss_scale_of, storage_of

_DATA_NAMES = re.compile(r"^(x|X|y|Y|inputs?|targets?|labels?|batch|.*_(true|target|label))$")


def default_wrt(names: Sequence[str]) -> list[int]:
    """The argument positions ``grad`` differentiates by default (see module docstring)."""
    params = [k for k, n in enumerate(names) if not _DATA_NAMES.match(n)]
    return params or [0]


def autodiff(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as differentiable. Optional: every tessera function is differentiable."""
    try:
        fn.__tessera_autodiff__ = True  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return fn


class _Transformed:
    """Shared machinery: bind arguments, trace the function, pick the wrt leaves."""

    def __init__(self, fn: Callable[..., Any], argnums: Any, wrt: Any) -> None:
        functools.update_wrapper(self, fn)
        self.jit = fn if isinstance(fn, JitFunction) else JitFunction(fn)
        self.argnums, self.wrt = argnums, wrt
        self.cache: dict[Any, Any] = {}

    def positions(self, names: list[str]) -> tuple[list[int], bool]:
        """The differentiated argument positions, and whether one comes back bare."""
        if self.argnums is not None and self.wrt is not None:
            raise ArgumentError("pass argnums or wrt, not both")
        if self.wrt is not None:
            wanted = [self.wrt] if isinstance(self.wrt, str) else list(self.wrt)
            for w in wanted:
                if w not in names:
                    raise ArgumentError(f"wrt={w!r} is not an argument of "
                                        f"{self.jit.name}({', '.join(names)})")
            return [names.index(w) for w in wanted], isinstance(self.wrt, str)
        if self.argnums is not None:
            nums = [self.argnums] if isinstance(self.argnums, int) else list(self.argnums)
            for k in nums:
                if not -len(names) <= k < len(names):
                    raise ArgumentError(f"argnums {k} is out of range for {len(names)} "
                                        "arguments")
            return [k % len(names) for k in nums], isinstance(self.argnums, int)
        pos = default_wrt(names)
        return pos, len(pos) == 1

    def prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        arguments = self.jit.check_annotations(self.jit.bind_args(args, kwargs))
        names = list(arguments)
        positions, bare = self.positions(names)
        for k in positions:  # differentiated Python numbers become f32 tensors
            leaves, tree = flatten(arguments[names[k]])
            arguments[names[k]] = unflatten(tree, [
                as_tensor(np.float32(v)) if isinstance(v, (int, float)) else v
                for v in leaves])
        arguments = {k: tensors_in(v) for k, v in arguments.items()}
        return arguments, names, positions, bare

    def leaf_groups(self, arguments: dict[str, Any], names: list[str],
                    positions: list[int]) -> list[tuple[TreeDef, list[int]]]:
        """For each differentiated argument, its structure and flat tensor indices."""
        groups, index = [], 0
        starts = {}
        for k, name in enumerate(names):
            leaves, tree = flatten(arguments[name])
            tensor_ids = []
            for leaf in leaves:
                if isinstance(leaf, (Tensor, Tracer)):
                    tensor_ids.append(index)
                    index += 1
                else:
                    tensor_ids.append(-1)
            starts[k] = (tree, tensor_ids)
        for k in positions:
            tree, ids = starts[k]
            if any(i < 0 for i in ids):
                raise GradError(f"argument {names[k]!r} is not a tensor, so it has no "
                                "gradient", hint="pass an array, or leave it out of argnums")
            groups.append((tree, ids))
        return groups

    def traced(self, arguments: dict[str, Any]) -> tuple[Function, list[Any]]:
        """The function traced on placeholders, and the outer tracers it closes over."""
        compiled = self.jit.trace({k: _abstract(v) for k, v in arguments.items()})
        return compiled.function, compiled.captured


def _abstract(x: Any) -> Any:
    """Replace tracers by placeholder tensors of their type, so tracing starts fresh."""
    leaves, tree = flatten(x)
    return unflatten(tree, [Tensor(np.zeros(tuple(v.shape), storage_of(v.type.element).np_dtype),
                                   v.type.element) if isinstance(v, Tracer) else v
                            for v in leaves])


def _tensor_leaves(arguments: dict[str, Any]) -> list[Any]:
    return [x for x in flatten(list(arguments.values()))[0] if isinstance(x, (Tensor, Tracer))]


class GradFunction(_Transformed):
    """``grad(f)``: the gradient of a scalar function (and optionally its value)."""

    def __init__(self, fn: Callable[..., Any], argnums: Any, wrt: Any,
                 with_value: bool) -> None:
        super().__init__(fn, argnums, wrt)
        self.with_value = with_value

    @user_api
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments, names, positions, bare = self.prepare(args, kwargs)
        groups = self.leaf_groups(arguments, names, positions)
        wrt = [i for _, ids in groups for i in ids]
        inputs = _tensor_leaves(arguments)
        key = (self.jit.key({k: _abstract(v) for k, v in arguments.items()}), tuple(wrt))
        gfn = self.cache.get(key)
        if gfn is None:
            fn, captured = self.traced(arguments)
            if len(fn.result_types) != 1 or fn.result_types[0].shape != ():  # type: ignore[attr-defined]
                shapes = ", ".join(str(t.shape) for t in fn.result_types)  # type: ignore[attr-defined]
                raise GradError(f"grad needs a function that returns one scalar; "
                                f"{self.jit.name} returns shape(s) {shapes}",
                                hint="reduce the output (ts.sum, ts.mean) or use ts.vjp")
            gfn = _grad_function(fn, wrt)
            if not captured:  # a closure over traced values is specific to this call
                self.cache[key] = gfn
            inputs += captured
        flat = _call(gfn, inputs)
        value, grads = flat[0], flat[1:]
        per_arg, k = [], 0
        for tree, ids in groups:
            per_arg.append(unflatten(tree, grads[k:k + len(ids)]))
            k += len(ids)
        result = per_arg[0] if bare else tuple(per_arg)
        return (value, result) if self.with_value else result


def _grad_function(fn: Function, wrt: list[int]) -> Function:
    """``args -> (value, grads...)`` with the loss-scale policy applied."""
    scale = loss_scale_of(fn.result_types[0].element)  # type: ignore[attr-defined]
    for i in wrt:
        s = loss_scale_of(fn.args[i].type.element)  # type: ignore[attr-defined]
        if s is not None and scale is not None and s != scale:
            raise GradError(f"arguments declare different loss scales ({scale} and {s})",
                            hint="use one @loss_scale(s) for one loss")
        scale = scale if scale is not None else s
    vjp = vjp_function(fn, wrt)
    from tessera.frontend import ops

    with Trace(f"{fn.name}_grad") as trace:
        args = [trace.param(a.type, a.hint) for a in fn.args]  # type: ignore[arg-type]
        out_t: TensorType = fn.result_types[0]  # type: ignore[assignment]
        seed = Tensor(np.asarray(scale if scale is not None else 1.0), out_t.element)
        outs = inline(vjp, [*args, Tracer(trace, ops.constant(seed))])
        value, grads = outs[0], outs[1:]
        if scale is not None:
            # Loss scaling: the backward pass ran on cotangents scaled by s; unscale once.
            grads = [ops.cast(ops.div(g, scale), g.type.element) for g in grads]
        g_fn = trace.finish([value, *grads])
    return PassManager.from_names(["canonicalize", "cse", "dce"]).run(
        Module(g_fn.name, {g_fn.name: g_fn})).functions[g_fn.name]


def _call(fn: Function, inputs: list[Any]) -> list[Any]:
    """Run ``fn`` on tensors, or inline it when the inputs are traced."""
    if any(isinstance(x, Tracer) for x in inputs):
        return inline(fn, inputs)
    from tessera.frontend.jit import Compiled

    out_tree = flatten([0] * len(fn.result_types))[1]
    return list(run_compiled(Compiled(Module(fn.name, {fn.name: fn}), fn, out_tree, {}),
                             inputs, "exact"))


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] | None = None,
         wrt: str | Sequence[str] | None = None) -> GradFunction:
    """The gradient of a scalar-valued function (reverse mode, as a Graph IR transform)."""
    if not callable(fn):
        raise ArgumentError(f"grad needs a function, got {type(fn).__name__}")
    return GradFunction(fn, argnums, wrt, with_value=False)


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] | None = None,
                   wrt: str | Sequence[str] | None = None) -> GradFunction:
    """Like ``grad`` but returns ``(value, gradient)``."""
    if not callable(fn):
        raise ArgumentError(f"value_and_grad needs a function, got {type(fn).__name__}")
    return GradFunction(fn, argnums, wrt, with_value=True)


@user_api
def vjp(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """``(out, pullback)``; ``pullback(ct)`` returns one cotangent per primal (a tuple)."""
    t = _Transformed(fn, tuple(range(len(primals))), None)
    arguments, names, positions, _ = t.prepare(primals, {})
    inputs = _tensor_leaves(arguments)
    f, captured = t.traced(arguments)
    wrt = list(range(len(inputs)))
    inputs += captured
    v = vjp_function(f, wrt)
    n_out = len(f.result_types)
    zero_cts = [Tensor(np.zeros(tuple(r.shape), storage_of(r.element).np_dtype), r.element)
                for r in f.result_types]  # type: ignore[attr-defined]
    out = _call(v, [*inputs, *zero_cts])[:n_out]
    groups = t.leaf_groups(arguments, names, positions)

    @user_api
    def pullback(ct: Any) -> tuple[Any, ...]:
        cts, _ = flatten(ct)
        if len(cts) != n_out:
            raise ArgumentError(f"the pullback takes {n_out} cotangent(s), got {len(cts)}")
        cts = [c if isinstance(c, Tracer) else as_tensor(c, r.element)
               for c, r in zip(cts, f.result_types)]  # type: ignore[attr-defined]
        got = _call(v, [*inputs, *cts])[n_out:]
        res, k = [], 0
        for tree, ids in groups:
            res.append(unflatten(tree, got[k:k + len(ids)]))
            k += len(ids)
        return tuple(res)

    return (out[0] if n_out == 1 else tuple(out)), pullback


@user_api
def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
    """``(out, tangent_out)``: forward mode, the directional derivative along ``tangents``."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ArgumentError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
    t = _Transformed(fn, tuple(range(len(primals))), None)
    arguments, _, _, _ = t.prepare(primals, {})
    inputs = _tensor_leaves(arguments)
    tans = []
    for x, tangent in zip(inputs, flatten(list(tangents))[0]):
        tans.append(tangent if isinstance(tangent, Tracer) else as_tensor(tangent,
                                                                          x.type.element))
    if len(tans) != len(inputs):
        raise ArgumentError("jvp needs one tangent per primal tensor")
    f, captured = t.traced(arguments)
    j = jvp_function(f, list(range(len(inputs))))
    inputs += captured
    res = _call(j, [*inputs, *tans])
    n = len(f.result_types)
    out, tout = res[:n], res[n:]
    return (out[0], tout[0]) if n == 1 else (tuple(out), tuple(tout))
