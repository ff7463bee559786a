"""The user-facing transformations: grad, value_and_grad, vjp, jvp.

Which arguments are differentiated (``argnums`` counts the call's arguments, ``*args``
elements included; the default rule skips data and static arguments) is decided in
:mod:`tessera.autodiff.binding`. So ``grad(train_step)(x, y, W)`` gives ``dW``,
``grad(loss)(x, W, b, y_true)`` gives ``(dW, db)``, and for ``def loss(x, W, mode,
eps=1e-5)`` the call ``grad(loss)(x, W, "train")`` gives ``dW`` alone. One gradient
comes back bare, several as a tuple in argument order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.autodiff.binding import Transformed, abstract, tensor_leaves
from tessera.autodiff.binding import default_wrt as default_wrt  # re-exported
from tessera.autodiff.transform import as_traced, inline, jvp_function, vjp_function
from tessera.errors import ArgumentError, GradError, user_api
from tessera.frontend.graph.jit import Compiled, run_compiled
from tessera.frontend.graph.pytree import TreeDef, flatten, unflatten
from tessera.frontend.graph.tensor import Tensor, as_tensor
from tessera.frontend.graph.trace import Trace, Tracer
from tessera.ir.core import Function, Module
from tessera.ir.passes import PassManager
from tessera.ir.types import TensorType
from tessera.numerics import loss_scale_of, storage_of


@user_api
def autodiff(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as differentiable. Optional: every tessera function is differentiable."""
    if not callable(fn):
        raise ArgumentError(f"@ts.autodiff marks a function, got {type(fn).__name__}")
    try:
        fn.__tessera_autodiff__ = True  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return fn


def _tensor_tree(compiled: Compiled) -> TreeDef:
    """The output structure with ``None`` where the function returned a static value."""
    count = iter(range(compiled.out_tree.num_leaves))

    def go(tree: TreeDef) -> TreeDef:
        if tree.kind == "leaf":
            return TreeDef("none") if next(count) in compiled.static_outputs else tree
        return TreeDef(tree.kind, tuple(go(c) for c in tree.children), tree.keys)

    return go(compiled.out_tree)


def _outputs(compiled: Compiled, tensors: Sequence[Any]) -> Any:
    """The function's outputs in the structure it returned them (static values kept)."""
    it = iter(tensors)
    return unflatten(compiled.out_tree, [
        compiled.static_outputs[k] if k in compiled.static_outputs else next(it)
        for k in range(compiled.out_tree.num_leaves)])


def _same_structure(a: TreeDef, b: TreeDef) -> bool:
    """Equal trees, counting lists and tuples as the same kind of sequence."""
    def norm(t: TreeDef) -> Any:
        kind = "sequence" if t.kind in ("list", "tuple") else t.kind
        return kind, t.keys, tuple(norm(c) for c in t.children)

    return norm(a) == norm(b)


class GradFunction(Transformed):
    """``grad(f)``: the gradient of a scalar function (and optionally its value)."""

    def __init__(self, fn: Callable[..., Any], argnums: Any, wrt: Any,
                 with_value: bool) -> None:
        super().__init__(fn, argnums, wrt)
        self.with_value = with_value

    @user_api
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments, slots, positions, bare = self.prepare(args, kwargs)
        groups = self.leaf_groups(arguments, slots, positions)
        wrt = [i for _, ids in groups for i in ids]
        inputs = tensor_leaves(arguments)
        for i in wrt:
            if storage_of(inputs[i].type.element).kind not in ("float", "complex"):
                raise GradError(f"grad with respect to a tensor of {inputs[i].type.element}: only "
                                "float and complex tensors have gradients",
                                hint="pass a float array, e.g. x.astype(np.float32)")
        key = (self.jit.key({k: abstract(v) for k, v in arguments.items()}), tuple(wrt)) \
            if self.cacheable else None
        gfn = self.cache.get(key) if self.cacheable else None
        if gfn is None:
            compiled = self.compiled(arguments)
            fn, captured = compiled.function, compiled.captured
            if len(fn.result_types) != 1 or fn.result_types[0].shape != ():  # type: ignore[attr-defined]
                shapes = ", ".join(str(t.shape) for t in fn.result_types)  # type: ignore[attr-defined]
                raise GradError(f"grad needs a function that returns one scalar; "
                                f"{self.jit.name} returns shape(s) {shapes}",
                                hint="reduce the output (ts.sum, ts.mean) or use ts.vjp")
            out_kind = storage_of(fn.result_types[0].element).kind  # type: ignore[attr-defined]
            if out_kind != "float":
                # As in JAX and PyTorch: the gradient of a complex (or integer) value is not
                # one well-defined thing, so ask for a real loss.
                raise GradError(f"grad needs a real floating-point result; {self.jit.name} "
                                f"returns {fn.result_types[0].element}",  # type: ignore[attr-defined]
                                hint="reduce a complex value to a real loss (ts.real, ts.abs) "
                                     "or use ts.vjp")
            gfn = _grad_function(fn, wrt)
            if self.cacheable and not captured:  # captured tracers belong to this call
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
    from tessera.frontend.graph import ops

    with Trace(f"{fn.name}_grad") as trace:
        args = [trace.param(a.type, a.hint) for a in fn.args]  # type: ignore[arg-type]
        out_t: TensorType = fn.result_types[0]  # type: ignore[assignment]
        seed = Tensor(np.asarray(scale if scale is not None else 1.0), out_t.element)
        outs = inline(vjp, [*args, Tracer(trace, ops.constant(seed))])
        value, grads = outs[0], outs[1:]
        if scale is not None:
            # Loss scaling: the backward pass ran on cotangents scaled by s; unscale once.
            grads = [ops.cast(ops.div(g, scale), g.type.element) for g in grads]
        # A loss or gradient that does not depend on the arguments is a concrete tensor.
        g_fn = trace.finish([as_traced(x) for x in (value, *grads)])
    return PassManager.from_names(["canonicalize", "cse", "dce"]).run(
        Module(g_fn.name, {g_fn.name: g_fn})).functions[g_fn.name]


def _call(fn: Function, inputs: list[Any]) -> list[Any]:
    """Run ``fn`` on tensors, or inline it when the inputs are traced."""
    if any(isinstance(x, Tracer) for x in inputs):
        return inline(fn, inputs)
    from tessera.frontend.graph.jit import Compiled

    out_tree = flatten([0] * len(fn.result_types))[1]
    return list(run_compiled(Compiled(Module(fn.name, {fn.name: fn}), fn, out_tree, {}),
                             inputs, "exact"))


@user_api
def grad(fn: Callable[..., Any], argnums: int | Sequence[int] | None = None,
         wrt: str | Sequence[str] | None = None) -> GradFunction:
    """The gradient of a scalar-valued function (reverse mode, as a Graph IR transform)."""
    if not callable(fn):
        raise ArgumentError(f"grad needs a function, got {type(fn).__name__}")
    return GradFunction(fn, argnums, wrt, with_value=False)


@user_api
def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] | None = None,
                   wrt: str | Sequence[str] | None = None) -> GradFunction:
    """Like ``grad`` but returns ``(value, gradient)``."""
    if not callable(fn):
        raise ArgumentError(f"value_and_grad needs a function, got {type(fn).__name__}")
    return GradFunction(fn, argnums, wrt, with_value=True)


@user_api
def vjp(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """``(out, pullback)``; ``pullback(ct)`` returns one cotangent per primal (a tuple)."""
    t = Transformed(fn, tuple(range(len(primals))), None)
    arguments, slots, positions, _ = t.prepare(primals, {})
    inputs = tensor_leaves(arguments)
    compiled = t.compiled(arguments)
    f, captured = compiled.function, compiled.captured
    wrt = list(range(len(inputs)))
    inputs += captured
    v = vjp_function(f, wrt)
    ct_tree = _tensor_tree(compiled)
    n_out = len(f.result_types)
    zero_cts = [Tensor(np.zeros(tuple(r.shape), storage_of(r.element).np_dtype), r.element)
                for r in f.result_types]  # type: ignore[attr-defined]
    out = _call(v, [*inputs, *zero_cts])[:n_out]
    groups = t.leaf_groups(arguments, slots, positions)

    @user_api
    def pullback(ct: Any) -> tuple[Any, ...]:
        cts, tree = flatten(ct)
        if len(cts) != n_out:
            raise ArgumentError(f"the pullback takes {n_out} cotangent(s), got {len(cts)}",
                                hint="pass a cotangent with the structure of the output")
        if n_out > 1 and not _same_structure(tree, ct_tree):
            # Leaves are matched in flattening order, so another structure (a dict with
            # other keys, a tuple for a dict) would pair cotangents with the wrong outputs.
            raise ArgumentError("the cotangent's structure differs from the output's",
                                hint="pass cotangents in the structure the function returned "
                                     "(the same dict keys, tuple or list)")
        cts = [c if isinstance(c, Tracer) else as_tensor(c, r.element)
               for c, r in zip(cts, f.result_types)]  # type: ignore[attr-defined]
        for k, (c, r) in enumerate(zip(cts, f.result_types)):
            if tuple(c.shape) != tuple(r.shape):  # type: ignore[attr-defined]
                raise ArgumentError(f"cotangent {k} has shape {tuple(c.shape)}, but output {k} "
                                    f"has shape {tuple(r.shape)}",  # type: ignore[attr-defined]
                                    hint="a cotangent has its output's shape")
        got = _call(v, [*inputs, *cts])[n_out:]
        res, k = [], 0
        for tree, ids in groups:
            res.append(unflatten(tree, got[k:k + len(ids)]))
            k += len(ids)
        return tuple(res)

    return _outputs(compiled, out), pullback


@user_api
def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
    """``(out, tangent_out)``: forward mode, the directional derivative along ``tangents``."""
    if not callable(fn):
        raise ArgumentError(f"jvp needs a function, got {type(fn).__name__}",
                            hint="call it as ts.jvp(f, (x,), (t,))")
    for what, seq in (("primals", primals), ("tangents", tangents)):
        if not isinstance(seq, (tuple, list)):
            raise ArgumentError(f"jvp's {what} must be a tuple or list, got "
                                f"{type(seq).__name__}", hint="call it as ts.jvp(f, (x,), (t,))")
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ArgumentError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
    t = Transformed(fn, tuple(range(len(primals))), None)
    arguments, _, _, _ = t.prepare(primals, {})
    inputs = tensor_leaves(arguments)
    primal_leaves = flatten(list(arguments.values()))[0]
    tangent_leaves = flatten(list(tangents))[0]
    if len(tangent_leaves) == len(primal_leaves):  # same structure: skip static leaves
        tangent_leaves = [t for p, t in zip(primal_leaves, tangent_leaves)
                          if isinstance(p, (Tensor, Tracer))]
    if len(tangent_leaves) != len(inputs):
        raise ArgumentError(f"jvp needs one tangent per primal tensor: {len(inputs)} primal "
                            f"tensor(s), {len(tangent_leaves)} tangent(s)")
    tans = []
    for k, (x, tangent) in enumerate(zip(inputs, tangent_leaves)):
        tan = tangent if isinstance(tangent, Tracer) else as_tensor(tangent, x.type.element)
        if tuple(tan.shape) != tuple(x.shape):
            raise ArgumentError(f"tangent {k} has shape {tuple(tan.shape)}, but its primal has "
                                f"shape {tuple(x.shape)}", hint="a tangent has its primal's shape")
        tans.append(tan)
    compiled = t.compiled(arguments)
    f, captured = compiled.function, compiled.captured
    j = jvp_function(f, list(range(len(inputs))))
    inputs += captured
    res = _call(j, [*inputs, *tans])
    n = len(f.result_types)
    out, tout = res[:n], res[n:]
    return _outputs(compiled, out), unflatten(_tensor_tree(compiled), tout)
