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

Default grid (``grid`` not given; ``group_size`` defaults to 1)
    * a body using ``tile_m``/``tile_n``/``tile_k`` (or ``block_m``/``block_n``): one
      group per ``(BM, BN)`` tile of the output — the result annotation, else the last
      tensor parameter the body writes, else the dims ``M``/``N`` — and per ``BK`` slice
      of ``K`` when ``tile_k`` is used: ``(ceil(M/BM), ceil(N/BN)[, ceil(K/BK)])``, only
      as many axes as the highest origin used;
    * a body using ``linear_id()``/``group_id()``: one tile per element of the first
      dimension of the first tensor parameter (after its batch dim): ``ceil(n / G)``
      groups of ``G = group_size`` tiles (saxpy: one tile per element);
    * otherwise one group (per batch index).
"""

from __future__ import annotations

import ast
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, DimBindingError
from tessera.frontend.kernel_call import function_source
from tessera.frontend.kernel_scope import (
    DEFAULT_TILE,
    ORIGINS,
    Param,
    ResultSpec,
    Spec,
    names_used,
)
from tessera.frontend.tensor import Tensor
from tessera.ir.tile import MemRefType
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
from tessera.numerics.dims import evaluate


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

    @classmethod
    def of(cls, fn: Any, name: str) -> KernelInfo:
        from tessera.frontend.jit import annotations_of

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
        body_names = set()
        for stmt in fdef.body:
            body_names |= names_used(stmt)
        return cls(name, inspect.signature(fn), annotations_of(fn), body_names, subs, written)


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
        if spec is not None or isinstance(value, (np.ndarray, Tensor)):
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
        elif isinstance(ann, (DType, Policy, PolicyClass)):
            t = TensorType((), ann)
            params.append(Param(name, "scalar", t))
            runtime.append(np.asarray(value).astype(storage_of(ann).np_dtype))
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
    tile = _tile(tile_shape, config)
    result, result_scalar = _result(info, env, batch_key, batch)
    grid_t = _grid(info, grid, group_size, tile, params, dims, result, batch_key)
    spec_ = Spec(info.name, tuple(params), tuple(sorted(dims.items())), tile,
                 tuple(sorted(config.items())), grid_t, int(group_size), max(batch, 1),
                 result, result_scalar)
    full_key = SpecKey((tuple(key), tuple(sorted(dims.items())), tile, spec_.config, grid_t,
                        int(group_size)))
    return Prepared(spec_, full_key, runtime, values, writeback)


def _tile(tile_shape: Any, config: dict[str, Any]) -> tuple[int, int, int]:
    out = list(DEFAULT_TILE)
    for k, names in enumerate((("BLOCK_M", "BM"), ("BLOCK_N", "BN"), ("BLOCK_K", "BK"))):
        for n in names:
            if n in config:
                out[k] = int(config[n])
    if tile_shape is not None:
        ts = (tile_shape,) if isinstance(tile_shape, int) else tuple(tile_shape)
        if not 1 <= len(ts) <= 3 or any(not isinstance(d, int) or d < 1 for d in ts):
            raise ArgumentError(f"tile_shape {tile_shape!r} should be 1 to 3 ints >= 1",
                                hint="tile_shape=(BM, BN, BK)")
        out[:len(ts)] = ts
    return out[0], out[1], out[2]


def _result(info: KernelInfo, env: DimEnv, batch_key: str | None, batch: int
            ) -> tuple[ResultSpec | None, Any]:
    ann = info.annotations.get("return")
    spec = _tensor_spec(ann)
    if isinstance(ann, (DType, Policy, PolicyClass)):
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


def _grid(info: KernelInfo, grid: Any, group_size: int, tile: tuple[int, int, int],
          params: list[Param], dims: dict[str, int], result: ResultSpec | None,
          batch_key: str | None) -> tuple[int, ...]:
    if not isinstance(group_size, int) or group_size < 1:
        raise ArgumentError(f"group_size must be an int >= 1, got {group_size!r}")
    if grid is not None:
        g = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
        if not 1 <= len(g) <= 3 or any(not isinstance(d, (int, np.integer)) or d < 1
                                       for d in g):
            raise ArgumentError(f"grid {grid!r} should be 1 to 3 ints >= 1",
                                hint="grid counts tile groups, like CUDA's grid of blocks")
        return tuple(int(d) for d in g)
    axes = [ORIGINS[n] for n in info.used if n in ORIGINS]
    if axes:
        rank = max(axes) + 1
        out_shape: tuple[int, ...] | None = None
        if result is not None:
            out_shape = result.shape[1:] if result.batched else result.shape
        else:
            tensors = {p.name: p for p in params if p.kind == "tensor"}
            for name in reversed(info.written):
                if name in tensors:
                    out_shape = tensors[name].type.shape  # type: ignore[union-attr]
                    break
        sizes = list(out_shape[:2]) if out_shape else []
        for k, sym in enumerate(("M", "N")):
            if len(sizes) <= k:
                sizes.append(dims.get(sym, 1))
        if rank == 3:
            if "K" not in dims:
                raise ArgumentError(f"kernel '{info.name}' uses tile_k but no dim 'K' is "
                                    "bound", hint="pass grid=(...) explicitly")
            sizes.append(dims["K"])
        return tuple(max(1, math.ceil(sizes[a] / tile[a])) for a in range(rank))
    if {"linear_id", "group_id"} & info.used:
        for p in params:
            if p.kind == "tensor" and p.type.shape:  # type: ignore[union-attr]
                n = p.type.shape[0]  # type: ignore[union-attr]
                return (max(1, math.ceil(n / group_size)),)
        raise ArgumentError(f"kernel '{info.name}' has no tensor to size its grid by",
                            hint="pass grid=...")
    return (1,)


__all__ = ["KernelInfo", "Prepared", "batch_of", "prepare"]
