"""``@ts.jit`` and ``@graph.module``: trace once per signature, run the Graph IR.

A call flattens its arguments; tensors (NumPy arrays, tessera tensors) become traced
parameters and everything else (Python numbers, strings, flags) is a static
specialisation constant. Annotations (``ts.Tensor["B", "D", bf16 @accum(f32)]``) are
checked at call time: dim symbols bind consistently across arguments and values are
converted to the declared element type. Called on traced values (inside another traced
function) the function is inlined.

DistTensor arguments (``ts.dist``) are traced with their placements; the
``shard-propagation`` pass places the function and the call runs on their mesh
(:mod:`tessera.mesh_sim.spmd`), returning DistTensors (docs/distributed.md).
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, DimBindingError, StageError, user_api
from tessera.frontend.graph.dist_arg import DistArg, one_mesh
from tessera.frontend.graph.jit_args import (
    annotations_of,
    checked,
    def_loc,
    dist_args_in,
    spec_of,
    spread,
    tensors_in,
)
from tessera.frontend.graph.pytree import TreeDef, flatten, unflatten
from tessera.frontend.graph.tensor import Tensor
from tessera.frontend.graph.trace import Trace, Tracer
from tessera.ir.core import Function, Module
from tessera.ir.passes import PassManager
from tessera.ir.types import TensorType
from tessera.numerics import DimEnv, storage_of

#: the Graph IR pipeline run after tracing (one flat list of pass names);
#: ``shard-propagation`` places functions traced with DistTensor arguments
GRAPH_PIPELINE = ["canonicalize", "cse", "dce", "shard-propagation"]
#: the stages of the IR stack, in order; later levels are added by their lowerings
STAGES = ("graph", "schedule", "tile", "target")


def _symbols(dim: Any) -> set[str]:
    if isinstance(dim, str):
        return {dim}
    return dim.symbols() if hasattr(dim, "symbols") else set()


@dataclass
class Compiled:
    """One specialisation: its module, function and output structure."""

    module: Module
    function: Function
    out_tree: TreeDef
    static_outputs: dict[int, Any]
    #: outer tracers this function closes over (extra trailing arguments)
    captured: list[Any] = field(default_factory=list)
    #: the generated tile kernels and host program (``backend="tile"``), made on first use
    tile_program: Any = None
    #: the same with mode="fast", whose kernels may reassociate, made on first use
    fast_tile_program: Any = None
    #: the per-device programs on a mesh (placed arguments), by mode, made on first use
    mesh_programs: dict[str, Any] = field(default_factory=dict)


class JitFunction:
    """A traced graph function (``@ts.jit``); call it like the Python function."""

    @user_api
    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 capture_graph: bool = False, mode: str = "exact",
                 backend: str = "interp") -> None:
        if not callable(fn):
            raise ArgumentError(f"a graph function needs a Python function, got "
                                f"{type(fn).__name__}", hint="decorate a def with @ts.jit")
        if name is not None and not isinstance(name, str):
            raise ArgumentError(f"the name of a graph function is a str, got {name!r}")
        if mode not in ("exact", "fast"):
            raise ArgumentError(f"unknown mode {mode!r}", hint="use mode='exact' (bitwise "
                                "deterministic) or mode='fast' (BLAS, non-bitwise)")
        functools.update_wrapper(self, fn)
        self.fn = fn
        # IR symbols are identifiers: "<lambda>" becomes "lambda".
        self.name = re.sub(r"[^\w$.]", "", name or fn.__name__) or "fn"
        self.mode = mode
        from tessera.frontend.graph.lowered import check_backend

        self.backend = check_backend(backend)
        # capture_graph records the launches of a call in a CUDA graph on the "cuda"
        # backend and replays it (graph_capture); elsewhere nothing launches on a GPU.
        self.capture_graph = bool(capture_graph)
        self.captures: dict[Any, Any] = {}
        if self.capture_graph and self.backend != "cuda":
            from tessera.frontend.graph.capture import warn_capture_ignored

            warn_capture_ignored(self.name, self.backend)
        self.signature = inspect.signature(fn)
        self.specs = {k: spec_of(v) for k, v in annotations_of(fn).items()}
        self.cache: dict[Any, Compiled] = {}
        self.last: Compiled | None = None

    # -- arguments
    def bind_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (``*args`` as a tuple, ``**kw`` a dict)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise ArgumentError(f"{self.name}(): {err}",
                                hint=f"the signature is {self.name}{self.signature}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def call(self, arguments: dict[str, Any]) -> Any:
        """Call the Python function with bound ``arguments`` spread back out by kind."""
        args, kwargs = spread(self.signature, arguments)
        return self.fn(*args, **kwargs)

    def check_annotations(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Bind dim symbols and convert annotated arguments to their declared element.

        DistTensor arguments become :class:`DistArg` tensors (distributed arguments)."""
        env = DimEnv()
        out = {k: dist_args_in(v) for k, v in arguments.items()}
        for name, value in list(out.items()):
            spec = self.specs.get(name)
            if spec is None:
                continue
            kind = self.signature.parameters[name].kind
            # The annotation of ``*args`` / ``**kwargs`` is that of each element.
            if kind is inspect.Parameter.VAR_POSITIONAL:
                out[name] = tuple(checked(spec, v, env, f"{name}[{k}]")
                                  for k, v in enumerate(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                out[name] = {k: checked(spec, v, env, k) for k, v in value.items()}
            else:
                out[name] = checked(spec, value, env, name)
        self._env = env
        return out

    # -- tracing
    def trace(self, arguments: dict[str, Any]) -> Compiled:
        leaves, tree = flatten(list(arguments.values()))
        names = _leaf_names(list(arguments), arguments)
        with Trace(self.name) as trace:
            # A DistTensor argument is traced with its placement; others unplaced.
            traced = [trace.param(x.type if isinstance(x, DistArg) else
                                  TensorType(x.shape, x.type.element), names[k])
                      if isinstance(x, (Tensor, Tracer)) else x for k, x in enumerate(leaves)]
            out = self.call(dict(zip(arguments, unflatten(tree, traced))))
            out = self._check_result(out)
            out_leaves, out_tree = flatten(out)
            static = {k: v for k, v in enumerate(out_leaves) if not isinstance(v, (Tracer,
                                                                                   Tensor))}
            from tessera.frontend.graph.ops import operand

            tensors = [o if isinstance(o, Tracer) else operand(o) for k, o in
                       enumerate(out_leaves) if k not in static]
            tracers = [o if isinstance(o, Tracer) else _lift(o) for o in tensors]
            fn = trace.finish(tracers)
        module = PassManager.from_names(GRAPH_PIPELINE).run(Module(self.name, {fn.name: fn}))
        return Compiled(module, module.functions[self.name], out_tree, static,
                        list(trace.captured))

    def _check_result(self, out: Any) -> Any:
        spec = self.specs.get("return")
        if spec is None or not isinstance(out, (Tracer, Tensor)):
            return out
        if spec.dims is not None:
            unbound = sorted({s for d in spec.dims if str(d) not in self._env
                              for s in _symbols(d)} - set(self._env))
            if unbound:
                raise DimBindingError(
                    f"the result annotation of {self.name} uses dim(s) {', '.join(unbound)} "
                    "that no argument binds", loc=def_loc(self.fn),
                    hint="name the dim in an argument's annotation, or write its size")
            spec.bind(tuple(out.shape), self._env, arg_name="the result")
        if spec.element is not None:
            from tessera.frontend.graph.ops import cast

            out = cast(out, spec.element)
        return out

    def key(self, arguments: dict[str, Any]) -> Any:
        leaves, tree = flatten(list(arguments.values()))
        parts = []
        for x in leaves:
            if isinstance(x, Tensor):
                parts.append(("T", tuple(x.shape), x.type.element, x.type.sharding))
            else:
                try:
                    hash(x)
                except TypeError:
                    raise ArgumentError(f"{self.name}(): argument {x!r} is neither a tensor "
                                        "nor a hashable constant") from None
                parts.append(("S", type(x).__name__, x))
        return tree, tuple(parts)

    def compile(self, *args: Any, **kwargs: Any) -> Compiled:
        """Trace (or fetch from the cache) the specialisation for these arguments."""
        arguments = self.check_annotations(self.bind_args(args, kwargs))
        arguments = {k: tensors_in(v) for k, v in arguments.items()}
        key = self.key(arguments)
        if key not in self.cache:
            self.cache[key] = self.trace(arguments)
        self.last = self.cache[key]
        self._arguments = arguments
        return self.last

    @user_api
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, _ = flatten((args, kwargs))
        if any(isinstance(x, Tracer) for x in leaves):
            arguments = self.check_annotations(self.bind_args(args, kwargs))
            return self._check_result(self.call(arguments))
        one_mesh(leaves)  # distributed arguments must share one mesh
        compiled = self.compile(*args, **kwargs)
        inputs = [x for x in flatten(list(self._arguments.values()))[0]
                  if isinstance(x, Tensor)]
        if self.backend != "interp":
            from tessera.frontend.graph.lowered import run_generated

            return run_generated(compiled, inputs, self.mode, self.backend)
        return run_compiled(compiled, inputs, self.mode)

    @user_api
    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """This function compiled for these arguments' signature down the stack: a
        :class:`~tessera.frontend.graph.lowered.CompiledProgram` (``.kernels``,
        ``.ir(stage)``, ``.run(*args, backend=...)``)."""
        from tessera.frontend.graph.lowered import CompiledProgram

        return CompiledProgram(self, self.compile(*args, **kwargs), self.backend)

    @user_api
    def inspect_ir(self, stage: str = "graph", *args: Any, **kwargs: Any) -> str:
        """The IR text of ``stage`` for these arguments (or the last call's)."""
        return inspect_stage(self, stage, args, kwargs)

    def graph_capture(self, compiled: Compiled) -> Any:
        """The CUDA graph of a specialisation's launches (``capture_graph=True`` on the
        ``"cuda"`` backend), made on first use: see :mod:`.capture`."""
        from tessera.frontend.graph.capture import graph_capture

        return graph_capture(self.captures, compiled)

    def __repr__(self) -> str:
        return f"<tessera.jit {self.name}>"


def run_compiled(compiled: Compiled, inputs: list[Tensor], mode: str) -> Any:
    """Run a compiled function on concrete tensors and rebuild the output structure."""
    from tessera.interp.graph import run_function

    if any(isinstance(t, DistArg) for t in inputs):
        # Distributed arguments: the placed function runs on their mesh and the
        # results come back as DistTensors.
        from tessera.mesh_sim.spmd.execute import run_distributed

        results: Any = iter(run_distributed(compiled.function, inputs, mode))
    else:
        arrays = run_function(compiled.function, [t.array for t in inputs], mode=mode)
        return rebuild_outputs(compiled, arrays)
    n = compiled.out_tree.num_leaves
    leaves = [compiled.static_outputs[k] if k in compiled.static_outputs else next(results)
              for k in range(n)]
    return unflatten(compiled.out_tree, leaves)


def rebuild_outputs(compiled: Compiled, arrays: list[Any]) -> Any:
    """The Python function's output structure from its graph function's result arrays
    (outputs that did not depend on the inputs come from the trace)."""
    results = iter(Tensor(a, t.element) for a, t in
                   zip(arrays, compiled.function.result_types))  # type: ignore[attr-defined]
    n = compiled.out_tree.num_leaves
    leaves = [compiled.static_outputs[k] if k in compiled.static_outputs else next(results)
              for k in range(n)]
    return unflatten(compiled.out_tree, leaves)


def _lift(x: Tensor) -> Tracer:
    from tessera.frontend.graph.ops import constant
    from tessera.frontend.graph.trace import current_trace

    trace = current_trace()
    assert trace is not None
    return Tracer(trace, constant(x))


def _leaf_names(names: list[str], arguments: dict[str, Any]) -> list[str]:
    out = []
    for name in names:
        leaves, _ = flatten(arguments[name])
        out += [name] if len(leaves) == 1 else [f"{name}{k}" for k in range(len(leaves))]
    return out


def inspect_stage(fn: JitFunction, stage: str, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> str:
    """The text of one IR stage of a graph function."""
    if not isinstance(stage, str) or stage not in STAGES:
        raise StageError(f"unknown IR stage {stage!r}", hint=f"stages: {', '.join(STAGES)} "
                         "(example arguments come after the stage)")
    from tessera.frontend.graph.lowered import DEFAULT_TARGET, stage_text

    # ``target=`` picks the PTX target of the "target" stage, as for kernels, unless
    # the function has a parameter of that name
    target = kwargs.pop("target", DEFAULT_TARGET) if "target" not in fn.signature.parameters \
        else DEFAULT_TARGET
    if args or kwargs:
        compiled = fn.compile(*args, **kwargs)
    elif fn.last is not None:
        compiled = fn.last
    else:
        compiled = fn.compile(*_symbolic_args(fn))
    return stage_text(compiled, stage, target, fn.mode)


def _symbolic_args(fn: JitFunction) -> list[Any]:
    """Example arguments from fully annotated parameters (for inspecting before a call)."""
    out = []
    for name in fn.signature.parameters:
        spec = fn.specs.get(name)
        if spec is None or spec.dims is None or spec.element is None or \
                not all(isinstance(d, int) for d in spec.dims):
            raise StageError(f"{fn.name} has not been called, and parameter {name!r} has no "
                             "static shape annotation to trace with",
                             hint="call the function once, or pass example arguments: "
                                  "inspect_ir('graph', *args)")

        out.append(np.zeros(tuple(spec.dims), storage_of(spec.element).np_dtype))
    return out


@user_api
def jit(fn: Callable[..., Any] | None = None, *, capture_graph: bool = False,
        mode: str = "exact", name: str | None = None, backend: str = "interp") -> Any:
    """Trace ``fn`` into Graph IR per signature and run it on ``backend``.

    ``mode="exact"`` (default) is bitwise deterministic; ``mode="fast"`` uses BLAS and is
    not. ``backend="interp"`` (default) runs the graph interpreter; ``"tile"`` the
    generated tile kernels in the tile simulator (docs/schedule.md). ``capture_graph``
    records a call's kernel launches in a CUDA graph and replays it on later calls on
    the ``"cuda"`` backend; on the others it warns once and changes nothing
    (:mod:`tessera.frontend.graph.capture`).
    """
    if fn is None:
        return lambda f: jit(f, capture_graph=capture_graph, mode=mode, name=name,
                             backend=backend)
    if isinstance(fn, JitFunction) and backend == fn.backend:
        return fn
    if isinstance(fn, JitFunction):  # the same Python function on another backend
        name, fn = name or fn.name, fn.fn
    if not callable(fn):
        raise ArgumentError(f"@jit needs a function, got {type(fn).__name__}")
    return JitFunction(fn, name=name, capture_graph=capture_graph, mode=mode,
                       backend=backend)


@user_api
def module(name: str) -> Callable[[Callable[..., Any]], JitFunction]:
    """``@graph.module("attention")``: a named graph function (Graph IR module ``@name``)."""
    if not isinstance(name, str):
        raise ArgumentError("graph.module takes the module's name: @graph.module(\"name\")")
    return lambda fn: JitFunction(fn, name=name)


@user_api
def inspect_ir(fn: Any, stage: str = "graph", *args: Any, **kwargs: Any) -> str:
    """``ts.inspect_ir(fn, "graph")``: the IR text of a stage of ``fn``."""
    if isinstance(fn, JitFunction):
        return inspect_stage(fn, stage, args, kwargs)
    if isinstance(fn, types.ModuleType):  # ``tessera`` itself has an ``inspect_ir``
        raise ArgumentError(f"inspect_ir needs a function, got the module {fn.__name__}",
                            hint="name a @ts.jit or @ts.kernel function, or a plain def "
                                 "of tessera ops")
    if hasattr(fn, "inspect_ir"):
        return fn.inspect_ir(stage, *args, **kwargs)
    if callable(fn):
        return inspect_stage(JitFunction(fn), stage, args, kwargs)
    raise ArgumentError(f"inspect_ir needs a tessera function, got {type(fn).__name__} "
                        f"{fn!r:.60}", hint="name a @ts.jit or @ts.kernel function, or a "
                                            "plain def of tessera ops")


__all__ = ["GRAPH_PIPELINE", "STAGES", "DimBindingError", "JitFunction", "inspect_ir", "jit",
           "module"]
