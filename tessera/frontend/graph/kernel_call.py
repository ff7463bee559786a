"""A ``@ts.kernel`` called inside a traced function: one ``graph.kernel_call``.

Inside ``@ts.jit`` (or ``grad``, ``vjp``, a ``custom_vjp`` rule) a tile kernel is not
launched: it is specialised on its arguments' shapes and formats, exactly as a launch
would specialise it (launch keywords ``grid``, ``group_size``, ``tile_shape`` and
``config`` included), and its Tile IR becomes the region of a ``graph.kernel_call``
instruction (:mod:`tessera.ir.dialects.graph.kernel`). The call is functional, like
``pallas_call``: the kernel runs on copies of its arguments and what it produces comes
back as new traced values:

* a kernel that returns a tile (``-> ts.Tensor["M", "N", ts.f32]``) gives that tile;
* a kernel that returns a parameter gives that parameter's contents after the launch;
* ``out_shape=ts.Tensor[M, N, ts.f32]`` (or a tensor to copy the shape and element
  of, or a list of them) appends fresh zero-filled output buffers as the kernel's last
  arguments and gives their contents after the launch (one bare, a list or tuple as a
  tuple);
* otherwise the call gives the new contents of every tensor argument the kernel writes
  (one bare, several as a tuple, in parameter order).

Tensor arguments must have the storage format of the parameter they are passed to
(cast them first); runtime scalars (``alpha: ts.f32``) may be Python numbers or rank-0
traced values; other arguments are specialisation constants, as in a launch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import ArgumentError, DTypeError, UnsupportedError
from tessera.frontend.graph import ops
from tessera.frontend.graph.dist_arg import DistValue
from tessera.frontend.graph.tensor import Tensor
from tessera.frontend.graph.trace import Tracer, current_trace
from tessera.ir.core import IRRegion, clone_block
from tessera.ir.dialects.graph.kernel import RETURNED, KernelCall, graph_type
from tessera.ir.types import TensorType
from tessera.numerics import TensorSpec, element, storage_of

#: the keywords of a launch that select the specialisation
LAUNCH_KEYWORDS = ("grid", "group_size", "tile_shape", "config")


def _placeholder(x: Tracer | Tensor) -> np.ndarray:
    """A zero array of ``x``'s shape and storage format (no memory: a broadcast view),
    standing in for ``x`` while the kernel is specialised."""
    dt = storage_of(x.type.element).np_dtype
    return np.broadcast_to(np.zeros((), dt), tuple(x.shape))


def _outputs(out_shape: Any) -> tuple[list[TensorType], bool]:
    """The types of the ``out_shape=`` buffers, and whether several were asked for."""
    several = isinstance(out_shape, (list, tuple))
    items = list(out_shape) if several else [out_shape]
    types = []
    for item in items:
        if isinstance(item, TensorSpec):
            dims = item.dims
            if dims is None or item.element is None or \
                    not all(isinstance(d, int) for d in dims):
                raise ArgumentError(f"out_shape {item} needs every dim as an int and an "
                                    "element", hint="write ts.Tensor[4, 8, ts.f32]")
            types.append(TensorType(tuple(dims), element(item.element)))
        elif isinstance(item, (Tracer, Tensor)):
            types.append(TensorType(tuple(item.shape), item.type.element))
        else:
            raise ArgumentError(f"out_shape takes ts.Tensor[dims..., element] (or a tensor "
                                f"to copy the shape and element of), got {item!r}",
                                hint="out_shape=ts.Tensor[4, 8, ts.f32]")
    return types, several


def call_kernel(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Record a call of the tile kernel ``kernel`` in the current trace (module doc)."""
    _check_unplaced(kernel.name)
    kwargs = dict(kwargs)
    out_types, several = _outputs(kwargs.pop("out_shape")) if "out_shape" in kwargs \
        else ([], False)
    launch_kw = {k: kwargs.pop(k) for k in LAUNCH_KEYWORDS if k in kwargs}
    by_id: dict[int, Tracer | Tensor] = {}

    def stand_in(value: Any) -> Any:
        if isinstance(value, DistValue):
            raise UnsupportedError(f"tile kernel '{kernel.name}' called on a distributed "
                                   "tensor inside a traced function",
                                   hint="call it on the local shards (ts.dist regions)")
        if isinstance(value, (Tracer, Tensor, np.ndarray)):
            x = value if isinstance(value, (Tracer, Tensor)) else ops.operand(value)
            held = _placeholder(x)
            by_id[id(held)] = x
            return held
        return value

    fresh_args = [np.zeros(tuple(t.shape), storage_of(t.element).np_dtype) for t in out_types]
    placeholders = [stand_in(a) for a in args] + fresh_args
    prep, module = kernel.specialise(tuple(placeholders),
                                     {**{k: stand_in(v) for k, v in kwargs.items()},
                                      **launch_kw})
    fn = module.functions[kernel.name]
    written, _ = kernel.written(prep.key, module)
    fresh_ids = {id(a) for a in fresh_args}
    operands: list[Tracer | Tensor] = []
    fresh: list[int] = []
    types: dict[int, TensorType] = {}
    runtime = [p for p in prep.spec.params if p.kind != "const"]
    for k, param in enumerate(runtime):
        value = prep.params[param.name]
        if id(value) in fresh_ids:
            fresh.append(k)
            types[k] = out_types[len(fresh) - 1]
            continue
        if param.kind == "scalar":
            held = by_id.get(id(value))
            x = held if held is not None else Tensor(prep.runtime[k], param.type.element)
        else:
            x = by_id[id(value)]
        want = param.type.element  # type: ignore[union-attr]
        if storage_of(x.type.element) != storage_of(want):
            raise DTypeError(f"tile kernel '{kernel.name}': argument '{param.name}' is "
                             f"{storage_of(x.type.element)}, the kernel takes "
                             f"{storage_of(want)}",
                             hint=f"cast it first: ts.cast({param.name}, "
                                  f"'{storage_of(want)}')")
        if param.kind == "scalar" and tuple(x.shape):
            raise ArgumentError(f"tile kernel '{kernel.name}': scalar '{param.name}' got a "
                                f"tensor of shape {tuple(x.shape)}",
                                hint="pass a number or a rank-0 tensor")
        operands.append(x)
        types[k] = TensorType(tuple(x.shape), x.type.element)
    _check_aliasing(kernel.name, runtime, operands, fresh, written)
    returned = _returned(kernel.name, fn)
    results = sorted((set(written) | set(fresh)) & {k for k, p in enumerate(runtime)
                                                    if p.kind == "tensor"})
    result_types = [types[k] for k in results]
    if isinstance(returned, TensorType):
        results.append(RETURNED)
        result_types.append(returned)
    op = KernelCall(kernel.name, tuple(fn.attrs["grid"]), int(fn.attrs["group_size"]),
                    int(fn.attrs.get("batch", 1)), tuple(fn.attrs.get("tile_shape", ())),
                    tuple(fn.attrs.get("config", ())), tuple(results), tuple(fresh),
                    bool(fn.attrs.get("result_batched", False)))
    body = clone_block(fn.body, {})
    outs = ops.bind(op, *operands, regions=[IRRegion([body])], result_types=result_types)
    got = dict(zip(results, outs))
    if RETURNED in got:
        return got[RETURNED]
    if isinstance(returned, int):  # a returned parameter: its contents after the launch
        if returned in got:
            return got[returned]
        return operands[returned - sum(1 for f in fresh if f < returned)]
    picked = [got[k] for k in fresh] if fresh else [got[k] for k in results]
    if not picked:
        return None
    return tuple(picked) if (several if fresh else len(picked) > 1) else picked[0]


def _check_unplaced(name: str) -> None:
    """Kernel calls run on one device: a function traced with placed (DistTensor)
    arguments cannot hold one."""
    trace = current_trace()
    for t in [trace, *trace.ancestors()] if trace is not None else []:
        if any(getattr(a.type, "sharding", None) is not None for a in t.block.args):
            raise UnsupportedError(f"tile kernel '{name}' called in a function traced with "
                                   "distributed (placed) arguments",
                                   hint="call the kernel in a function of local tensors")


def _returned(name: str, fn: Any) -> TensorType | int | None:
    """What the kernel returns: a tile's type, a parameter's index, or None."""
    term = fn.body.terminator
    if term is None or not term.operands:
        return None
    v = term.operands[0]
    if v in fn.args:
        return fn.args.index(v)
    if "result_shape" in fn.attrs:
        return TensorType(tuple(fn.attrs["result_shape"]), fn.attrs["result_element"])
    raise UnsupportedError(f"tile kernel '{name}' returns a scalar, which a graph function "
                           "cannot take from it yet",
                           hint="write the value into an output tensor (out_shape=...)")


def _check_aliasing(name: str, runtime: list[Any], operands: list[Any], fresh: list[int],
                    written: frozenset[int]) -> None:
    """One traced value passed for two parameters, one of them written: the launch on
    copies could not show one memory through both names, so it is refused."""
    params = [p for k, p in enumerate(runtime) if k not in fresh]
    index = [k for k in range(len(runtime)) if k not in fresh]
    for a, x in enumerate(operands):
        for b in range(a + 1, len(operands)):
            if operands[b] is x and (index[a] in written or index[b] in written) and \
                    graph_type(params[a].type) is not None:
                raise UnsupportedError(
                    f"tile kernel '{name}': one tensor is passed as '{params[a].name}' and "
                    f"'{params[b].name}', and the kernel writes one of them",
                    hint="pass a separate tensor for the parameter it writes")


__all__ = ["LAUNCH_KEYWORDS", "call_kernel"]
