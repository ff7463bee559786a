"""The arguments of a graph function: evaluating annotations, checking and converting
annotated arguments, and spreading bound arguments back into a call.

Split from :mod:`tessera.frontend.graph.jit`, which traces and runs the function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import DTypeError, TraceError
from tessera.frontend.graph.dist_arg import DistArg, DistValue
from tessera.frontend.graph.pytree import flatten, unflatten
from tessera.frontend.graph.tensor import Tensor, as_tensor
from tessera.frontend.graph.trace import Tracer
from tessera.numerics import DimEnv, DType, Policy, PolicyClass, TensorSpec, element, storage_of


def is_array(x: Any) -> bool:
    """Whether ``x`` is traced as a tensor (rather than a static constant)."""
    return isinstance(x, (np.ndarray, Tensor, Tracer, np.generic, DistValue)) and \
        not isinstance(x, str)


def annotations_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The function's annotations evaluated (string annotations too)."""
    try:
        return inspect.get_annotations(fn, eval_str=True)
    except Exception as err:
        raise TraceError(f"cannot evaluate the annotations of {fn.__name__}: {err}",
                         hint="annotations must name tessera types, e.g. ts.Tensor['N', ts.f32]",
                         loc=def_loc(fn)) from None


def def_loc(fn: Callable[..., Any]) -> Any:
    """Where ``fn`` is defined (its file and first line), for errors about its definition."""
    from tessera.errors import Loc

    code = getattr(fn, "__code__", None)
    return Loc(code.co_filename, code.co_firstlineno) if code else None


def spec_of(annotation: Any) -> TensorSpec | None:
    """A tensor annotation as a TensorSpec (an element alone means any shape)."""
    if isinstance(annotation, TensorSpec):
        return annotation
    if isinstance(annotation, (DType, Policy, PolicyClass)):
        return TensorSpec(None, annotation)  # type: ignore[arg-type]
    return None


def checked(spec: TensorSpec, value: Any, env: DimEnv, name: str) -> Any:
    """``value`` checked against ``spec`` (dims bound in ``env``) and converted to its
    element; values that are neither tensors nor numbers are left as they are.

    A complex number annotated with a real element is a DTypeError (the cast refuses
    it), never its real part."""
    if not is_array(value) and not isinstance(value, (int, float, complex)):
        return value
    x = value if isinstance(value, (Tracer, Tensor)) else as_tensor(value)
    if spec.dims is not None:
        spec.bind(tuple(x.shape), env, arg_name=name)
    if spec.element is not None and element(spec.element) != x.type.element:
        from tessera.frontend.graph.ops import cast

        if storage_of(x.type.element).kind == "complex" and \
                storage_of(spec.element).kind != "complex":
            raise DTypeError(f"argument {name!r} is complex ({x.type.element}) but annotated "
                             f"with the real element {spec.element}",
                             hint=f"pass real values, or take .real / abs() of {name!r} first")
        x = dist_args_in(cast(x, spec.element))
    return x


def spread(signature: inspect.Signature, arguments: dict[str, Any]
           ) -> tuple[list[Any], dict[str, Any]]:
    """Bound arguments back to ``(args, kwargs)``: ``*args`` spread out, keyword-only
    parameters and ``**kwargs`` by name (the inverse of ``Signature.bind``)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, value in arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return args, kwargs


def dist_args_in(tree: Any) -> Any:
    """``tree`` with every DistTensor leaf made a :class:`DistArg`."""
    leaves, treedef = flatten(tree)
    if not any(isinstance(x, DistValue) for x in leaves):
        return tree
    return unflatten(treedef, [DistArg(x) if isinstance(x, DistValue) else x for x in leaves])


def tensors_in(tree: Any) -> Any:
    """``tree`` with every array leaf made a Tensor (other leaves unchanged)."""
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [DistArg(x) if isinstance(x, DistValue) else as_tensor(x)
                               if is_array(x) and not isinstance(x, Tracer) else x
                               for x in leaves])


__all__ = ["annotations_of", "checked", "def_loc", "dist_args_in", "is_array", "spec_of",
           "spread", "tensors_in"]
