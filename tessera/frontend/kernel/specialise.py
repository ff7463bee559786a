"""From a kernel call's arguments to one specialisation: dims, batch, grid, tile shape.

Parameters
    A parameter annotated ``ts.Tensor[...]`` (or passed a NumPy array) is a tensor in
    global memory; arrays whose dtype is not the annotated format's storage are
    converted (and converted back after the launch if the kernel writes them).
    Annotated with a dtype (``alpha: ts.f32``) it is a runtime scalar. Anything else
    (``is_causal: bool = True``, ints, strings) is a specialisation constant.

Batch dimension
    A tensor's leading dim is a *batch* dim when the body never names its symbols,
    every subscript of the tensor has fewer indices than its rank, and the tensor has
    rank 3 or more or the dim is an expression (flash attention's ``"B*H"``:
    ``Q[q:q+BM]``). The rank condition keeps ``src[row]`` of a matrix a row. Tensors
    with the same leading dim share it. The launch runs the whole grid once per batch
    index and the body sees the tensors without it.

Tile shape and grid
    :mod:`tessera.frontend.kernel.grid`.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, DimBindingError
from tessera.frontend.graph.tensor import Tensor
from tessera.frontend.kernel.args import check_size, scalar_value
from tessera.frontend.kernel.compiler.call import function_source
from tessera.frontend.kernel.compiler.scope import (
    Param,
    ResultSpec,
    Spec,
    names_used,
)
from tessera.frontend.kernel.config import check_config
from tessera.frontend.kernel.grid import grid_of, tile_of
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.types import TensorType
from tessera.numerics import (
    DimEnv,
    DType,
    Policy,
    PolicyClass,
    TensorSpec,
    convert,
    element,
    from_numpy_dtype,
    storage_of,
)
from tessera.numerics.policy.dims import evaluate

#: annotations that make a parameter a runtime scalar (converted, not specialised on)
_RUNTIME = (DType, Policy, PolicyClass)


def _symbols(dim: Any) -> set[str]:
    if isinstance(dim, str):
        return {dim}
    return set(dim.symbols()) if hasattr(dim, "symbols") else set()


@dataclass
class KernelInfo:
    """What the compiler needs to know about a kernel's source, found once."""

    name: str
    signature: inspect.Signature
    annotations: dict[str, Any]
    used: set[str]
    subscripts: dict[str, list[int | None]]
    written: list[str]
    #: the attribute names the body and its inlined helpers read (``ctx.WIDTH``): the
    #: configuration keys that reach it (:mod:`tessera.frontend.kernel.config`)
    reads: frozenset[str] = frozenset()
    #: the parameter names in order, and those annotated with a format (runtime scalars)
    param_names: tuple[str, ...] = field(init=False)
    runtime_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.param_names = tuple(self.signature.parameters)
        self.runtime_names = frozenset(name for name, ann in self.annotations.items()
                                       if isinstance(ann, _RUNTIME))

    @classmethod
    def of(cls, fn: Any, name: str) -> KernelInfo:
        from tessera.frontend.graph.jit import annotations_of

        fdef = function_source(fn)[0]
        subs: dict[str, list[int | None]] = {}
        written: list[str] = []
        for node in ast.walk(fdef):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                ell = any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)
                subs.setdefault(node.value.id, []).append(None if ell else len(items))
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            for t in targets:
                base = t.value if isinstance(t, ast.Subscript) else t
                if isinstance(base, ast.Name) and (isinstance(t, ast.Subscript) or
                                                   isinstance(node, ast.AugAssign)):
                    written.append(base.id)
        # a helper's names count as the body's: ``tile_k`` used in a helper sizes the
        # default grid as it does in the kernel's own body
        defs = [fdef, *_helper_defs(fn, fdef, set())]
        body_names = set().union(*(names_used(s) for d in defs for s in d.body))
        reads = frozenset(n.attr for d in defs for n in ast.walk(d)
                          if isinstance(n, ast.Attribute))
        return cls(name, inspect.signature(fn), annotations_of(fn), body_names, subs, written,
                   reads)


def _helper_defs(fn: Any, fdef: ast.FunctionDef, seen: set[Any]) -> list[ast.FunctionDef]:
    """The sources of the plain Python functions ``fn``'s body calls, which the
    compiler inlines, and of the functions they call, each once."""
    from tessera.frontend.kernel.compiler.call import is_inlined, scope_of

    scope, out = scope_of(fn), []
    for node in ast.walk(fdef):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        helper = scope.get(node.func.id)
        if not is_inlined(helper) or helper in seen:  # each once: recursion ends
            continue
        seen.add(helper)
        hdef = function_source(helper)[0]
        out += [hdef, *_helper_defs(helper, hdef, seen)]
    return out


class SpecKey(tuple):  # type: ignore[type-arg]
    """A specialisation key (a nested tuple) that computes its hash once: every launch
    looks its module and program up by it."""

    def __new__(cls, items: Any) -> SpecKey:
        key = super().__new__(cls, items)
        key._hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self._hash


@dataclass
class Prepared:
    """One call, specialised: the spec, its cache key and the runtime arguments."""

    spec: Spec
    key: Any
    runtime: list[Any]
    params: dict[str, Any]
    writeback: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def _tensor_spec(ann: Any) -> TensorSpec | None:
    return ann if isinstance(ann, TensorSpec) else None


def _as_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.array
    if isinstance(value, np.ndarray):
        return value
    raise ArgumentError(f"kernel argument '{name}' should be an array, got "
                        f"{type(value).__name__}",
                        hint="pass a NumPy array (it is written in place)")


def batch_of(info: KernelInfo, params: dict[str, Any]) -> tuple[str | None, int]:
    """The batch dim's text and which parameters carry it (see the module doc)."""
    found: set[str] = set()
    for name, ann in info.annotations.items():
        spec = _tensor_spec(ann)
        if name == "return" or spec is None or spec.dims is None or spec.rank < 2:
            continue
        d0 = spec.dims[0]
        if isinstance(d0, int) or _symbols(d0) & info.used or str(d0) in info.used:
            continue
        if spec.rank < 3 and isinstance(d0, str):
            continue
        subs = info.subscripts.get(name, [])
        if subs and all(n is not None and n < spec.rank for n in subs):
            found.add(str(d0))
    if len(found) > 1:
        raise ArgumentError(f"kernel '{info.name}' would have two batch dims: "
                            f"{', '.join(sorted(found))}",
                            hint="name one of them in the body, or merge them into one dim")
    return (found.pop(), 0) if found else (None, 0)


def prepare(info: KernelInfo, args: tuple[Any, ...], kwargs: dict[str, Any], *,
            grid: Any, group_size: int, tile_shape: Any, config: dict[str, Any]) -> Prepared:
    """Bind a call's arguments and build its specialisation."""
    try:
        bound = info.signature.bind(*args, **kwargs)
    except TypeError as err:
        raise ArgumentError(f"{info.name}(): {err}") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    batch_key, _ = batch_of(info, values)
    env = DimEnv()
    params: list[Param] = []
    runtime: list[Any] = []
    key: list[Any] = []
    writeback: list[tuple[np.ndarray, np.ndarray]] = []
    batch = 0
    for name, value in values.items():
        ann = info.annotations.get(name)
        spec = _tensor_spec(ann)
        if spec is not None or (isinstance(value, (np.ndarray, Tensor)) and
                                not isinstance(ann, _RUNTIME)):
            arr = _as_array(value, name)
            if spec is not None and spec.dims is not None:
                spec.bind(tuple(arr.shape), env, arg_name=name)
            elem = spec.element if spec is not None and spec.element is not None else \
                from_numpy_dtype(arr.dtype)
            sd = storage_of(elem).np_dtype
            if arr.dtype != sd:
                conv = np.ascontiguousarray(convert(arr, elem))
                writeback.append((arr, conv))
                arr = conv
            batched = bool(batch_key and spec is not None and spec.dims and
                           str(spec.dims[0]) == batch_key)
            if batched:
                if batch and arr.shape[0] != batch:
                    raise DimBindingError(f"batch dim '{batch_key}' is {batch} and "
                                          f"{arr.shape[0]} (argument '{name}')")
                batch = arr.shape[0]
            shape = arr.shape[1:] if batched else arr.shape
            t = MemRefType("global", tuple(shape), elem, arr.shape[0] if batched else 0)
            params.append(Param(name, "tensor", t))
            runtime.append(arr)
            key.append(("T", str(t)))
        elif isinstance(ann, _RUNTIME):
            t = TensorType((), ann)
            params.append(Param(name, "scalar", t))
            runtime.append(scalar_value(name, value, ann))
            key.append(("S", str(t)))
        else:
            try:
                hash(value)
            except TypeError:
                raise ArgumentError(f"kernel argument '{name}' = {value!r} is neither an "
                                    "array nor a hashable constant") from None
            params.append(Param(name, "const", None, value))
            key.append(("C", type(value).__name__, value))
    dims = {k: int(v) for k, v in env.items() if isinstance(k, str)}
    if config:
        config = check_config(info.name, info.reads, config)
    tile = tile_of(tile_shape, config)
    result, result_scalar = _result(info, env, batch_key, batch)
    grid_t = grid_of(info, grid, group_size, tile, params, dims, result)
    check_size(info.name, grid_t, int(group_size), max(batch, 1))
    spec_ = Spec(info.name, tuple(params), tuple(sorted(dims.items())), tile,
                 tuple(sorted(config.items())), grid_t, int(group_size), max(batch, 1),
                 result, result_scalar)
    full_key = SpecKey((tuple(key), tuple(sorted(dims.items())), tile, spec_.config, grid_t,
                        int(group_size)))
    return Prepared(spec_, full_key, runtime, values, writeback)


def _result(info: KernelInfo, env: DimEnv, batch_key: str | None, batch: int
            ) -> tuple[ResultSpec | None, Any]:
    ann = info.annotations.get("return")
    spec = _tensor_spec(ann)
    if isinstance(ann, _RUNTIME):
        return None, ann
    if spec is None or spec.dims is None:
        return None, None
    shape = []
    for d in spec.dims:
        v = evaluate(d, env)
        if v is None:
            return None, None  # returning a parameter: its dims need not be bound
        shape.append(int(v))
    batched = bool(batch_key and str(spec.dims[0]) == batch_key)
    elem = spec.element if spec.element is not None else element("f32")
    return ResultSpec(tuple(shape), elem, batched), None


__all__ = ["KernelInfo", "Prepared", "batch_of", "prepare"]
