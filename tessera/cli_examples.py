"""Example arguments on the command line: which parameters still need one, and how to
pass them (``tessera ir`` and ``tessera ptx``).

A graph function's parameter whose annotation fixes its shape and element
(``Tensor[4, 8, bf16]``) gets zeros of that shape; any other parameter without a
default needs ``--arg NAME=SHAPE:FORMAT`` (an array) or ``--const NAME=VALUE`` (a
scalar or flag). A tile kernel's parameters are all needed: its ``Tensor[...]``
parameters are arrays, and those annotated with a bare format (``alpha: ts.f32``) are
runtime scalars.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, Loc
from tessera.frontend.graph.jit_args import annotations_of, spec_of
from tessera.numerics import DType, Policy, TensorSpec, storage_of

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _element_text(elem: Any) -> str:
    """An element as ``--arg`` spells it (no spaces: ``bf16@accum(f32)``)."""
    return getattr(elem, "text", None) or str(elem).replace(" ", "")


def _usage(name: str, annotation: Any, kernel: bool) -> str:
    """How to pass one parameter: its annotated type and the option that supplies it."""
    spec = spec_of(annotation)
    if kernel and isinstance(annotation, (DType, Policy)):
        return f"{name}: {annotation} (a scalar)  ->  --const {name}=VALUE"
    if spec is None:
        return f"{name} (no annotation)  ->  --arg {name}=SHAPE:FORMAT or --const {name}=VALUE"
    shape = "x".join(str(d) if isinstance(d, int) else f"<{d}>" for d in spec.dims or ()) \
        if spec.dims is not None else "SHAPE"
    elem = _element_text(spec.element) if spec.element is not None else "FORMAT"
    return f"{name}: {spec}  ->  --arg {name}={shape}:{elem}"


def _static_zeros(spec: TensorSpec | None) -> np.ndarray | None:
    """Zeros for an annotation that fixes shape and element, else None."""
    if spec is None or spec.dims is None or spec.element is None or \
            not all(isinstance(d, int) for d in spec.dims):
        return None
    return np.zeros(tuple(spec.dims), storage_of(spec.element).np_dtype)


def examples_needed(obj: Any, given: dict[str, Any], target: str, where: Loc
                    ) -> dict[str, Any]:
    """Zeros for the statically annotated parameters ``given`` lacks (graph functions);
    ArgumentError listing every other missing parameter, with its annotated type and
    the option that passes it, located at the function's definition."""
    from tessera.frontend.kernel import Kernel

    kernel = isinstance(obj, Kernel)
    fn = getattr(obj, "fn", obj)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}  # not a Python function: let the command report what it is
    annotations = annotations_of(fn) if inspect.isfunction(fn) else {}
    unknown = sorted(set(given) - set(params)) if not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()) else []
    if unknown:
        raise ArgumentError(f"{target.rpartition(':')[2]} has no parameter(s) "
                            f"{', '.join(unknown)}", loc=where,
                            hint=f"its parameters are {', '.join(params)}")
    filled: dict[str, Any] = {}
    missing = []
    for name, p in params.items():
        if name in given or p.kind in _VARIADIC or p.default is not inspect.Parameter.empty:
            continue
        zeros = None if kernel else _static_zeros(spec_of(annotations.get(name)))
        if zeros is not None:
            filled[name] = zeros
        else:
            missing.append(_usage(name, annotations.get(name), kernel))
    if missing:
        what = "kernel" if kernel else "function"
        lines = "\n    ".join(missing)
        raise ArgumentError(
            f"the {what} {target.rpartition(':')[2]} needs example arguments for "
            f"{len(missing)} parameter(s):\n    {lines}", loc=where,
            hint="pass each array as --arg NAME=SHAPE:FORMAT (zeros of that shape; write "
                 "each <dim> as a number, e.g. --arg x=1024:f32 or --arg A=128x64:bf16) "
                 "and each scalar or flag as --const NAME=VALUE (e.g. --const alpha=2.0)")
    return filled


__all__ = ["examples_needed"]
