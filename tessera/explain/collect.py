"""What an explain page shows, gathered from one function and its example arguments.

:func:`explain_kernel` compiles a ``@ts.kernel`` as ``tessera ptx`` does (Tile IR,
Target IR, PTX with its line map), runs it once in the tile simulator to draw its tile
map (and any sanitizer finding), and asks ptxas and the static estimate about it.
:func:`explain_graph` lowers a graph function as ``ts.jit(f).lower(...)`` does, through
Graph, Schedule, Tile and Target IR to PTX. Each level that cannot be produced (a
kernel the lowering refuses, an op with no PTX rule) becomes a panel with the error's
message; the levels before it are still shown.
"""

from __future__ import annotations

import inspect
import linecache
from dataclasses import dataclass, field
from html import escape
from typing import Any

import numpy as np

from tessera.errors import TesseraError
from tessera.explain.linkmap import Panel, error_panel, ir_panel, ptx_panel, source_panel
from tessera.ir.core import Function, Module
from tessera.ir.text.printer import print_function, print_module


@dataclass
class Explanation:
    """Everything one page shows: the linked panels and the drawn sections
    (``(title, html)`` pairs in page order)."""

    name: str
    kind: str
    file: str
    panels: list[Panel]
    sections: list[tuple[str, str]] = field(default_factory=list)


def python_source(fn: Any) -> tuple[str, int, list[str]]:
    """(file, first line, lines) of a function's source, read through ``linecache`` so
    that a function defined in a notebook cell (whose "file" exists only there) works."""
    fn = inspect.unwrap(fn)  # a decorator's wrapper (functools.wraps) names the function
    code = fn.__code__
    file = code.co_filename
    lines = linecache.getlines(file, fn.__globals__)
    if not lines:
        try:
            block, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            return file, code.co_firstlineno, ["# (source not available)"]
        return file, first, block
    first = code.co_firstlineno
    block = inspect.getblock(lines[first - 1:])
    return file, first, list(block)


def _guard(key: str, title: str, make: Any) -> Panel:
    try:
        return make()
    except (TesseraError, NotImplementedError, ValueError, TypeError) as err:
        return error_panel(key, title, err)


def explain_kernel(kernel: Any, arguments: dict[str, Any], target: str = "sm_90a"
                   ) -> Explanation:
    """The page of a ``@ts.kernel`` launched with ``arguments`` (its parameters by name
    and launch keywords such as ``grid``)."""
    from tessera.explain import stats, tiledraw
    from tessera.frontend.kernel.backends.compile import gpu_mode, lower_and_render

    fn = kernel.fn
    file, first, lines = python_source(fn)
    panels = [source_panel(file, first, lines)]
    _, module = kernel.specialise((), dict(arguments))
    tile: Function = module.functions[kernel.name]
    panels.append(ir_panel("tile", "Tile IR", print_function(tile, locs=True), file))
    try:
        lowered, ptx, line_map, _ = lower_and_render(tile, target, gpu_mode(kernel, None))
    except (TesseraError, NotImplementedError) as err:
        panels += [error_panel("target", f"Target IR ({target})", err),
                   error_panel("ptx", "PTX", err)]
        compiled = None
    else:
        from tessera.frontend.kernel.backends.compile import CompiledKernel

        panels.append(ir_panel("target", f"Target IR ({target})",
                               print_function(lowered, locs=True), file))
        panels.append(ptx_panel([(kernel.name, ptx, line_map)], file))
        compiled = CompiledKernel(kernel.name, target, tile, lowered, ptx, line_map, {})
    out = Explanation(kernel.name, "kernel", file, panels)
    out.sections.append(("Tile map", tiledraw.section(kernel, arguments, tile)))
    arrays = [v for v in arguments.values() if isinstance(v, np.ndarray)]
    out.sections.append(("Resources", stats.section([compiled] if compiled else [], arrays)))
    return out


def explain_graph(fn: Any, arguments: dict[str, Any], target: str = "sm_90a") -> Explanation:
    """The page of a graph function (plain or ``@ts.jit``) called with ``arguments``."""
    from tessera.explain import graphsvg, sharding, stats, tiledraw
    from tessera.frontend.graph.jit import JitFunction, jit
    from tessera.ir.transforms.schedule import schedule_module

    jitted = fn if isinstance(fn, JitFunction) else jit(fn)
    file, first, lines = python_source(jitted.fn)
    panels = [source_panel(file, first, lines)]
    lowered = jitted.lower(**arguments)
    module: Module = lowered.compiled.module
    out = Explanation(jitted.name, "graph function", file, panels)
    panels.append(ir_panel("graph", "Graph IR", print_module(module, locs=True), file))
    graph_fn = module.functions[next(iter(module.functions))]
    out.sections.append(("Graph IR dataflow", graphsvg.svg(graph_fn, file)))
    try:
        scheduled = schedule_module(module)
    except TesseraError as err:
        panels.append(error_panel("schedule", "Schedule IR", err))
    else:
        panels.append(ir_panel("schedule", "Schedule IR", print_module(scheduled, locs=True),
                               file))
        sched_fn = scheduled.functions[next(iter(scheduled.functions))]
        out.sections.append(("Schedule IR: kernels and their fused ops",
                             graphsvg.svg(sched_fn, file)))
    panels.append(_guard("tile", "Tile IR", lambda: ir_panel(
        "tile", "Tile IR", print_module(lowered.tile.module, locs=True) + "\n"
        + lowered.tile.host_text(), file)))
    try:
        maps = tiledraw.program_section(lowered.tile, list(arguments.values()))
    except (TesseraError, NotImplementedError) as err:
        why = err.message if isinstance(err, TesseraError) else str(err)
        maps = f'<p class="muted">{escape(why)}</p>'
    out.sections.append(("Tile maps of the generated kernels", maps))
    kernels = []
    try:
        program = lowered.target(target)
    except (TesseraError, NotImplementedError) as err:
        panels += [error_panel("target", f"Target IR ({target})", err),
                   error_panel("ptx", "PTX", err)]
    else:
        kernels = [k.compiled for k in program.kernels]
        text = print_module(Module(program.tile.name, {k.name: k.kernel for k in kernels}),
                            locs=True)
        panels.append(ir_panel("target", f"Target IR ({target})", text, file))
        panels.append(ptx_panel([(k.name, k.ptx, k.line_map) for k in kernels], file))
    shards = sharding.sections(arguments, jitted)
    out.sections += shards
    arrays = [v for v in arguments.values() if isinstance(v, np.ndarray)]
    out.sections.append(("Resources", stats.section(kernels, arrays)))
    return out


def explain(obj: Any, arguments: dict[str, Any], target: str = "sm_90a") -> Explanation:
    """The page of a kernel or a graph function (see :func:`is_explainable`)."""
    from tessera.frontend.kernel import Kernel

    if isinstance(obj, Kernel):
        return explain_kernel(obj, arguments, target)
    return explain_graph(obj, arguments, target)


__all__ = ["Explanation", "explain", "explain_graph", "explain_kernel", "python_source"]
