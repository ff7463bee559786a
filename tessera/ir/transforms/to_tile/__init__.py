"""Schedule IR to Tile IR: each ``schedule.kernel`` becomes a ``tile.kernel`` function
(the IR a hand-written ``@ts.kernel`` compiles to) and the scheduled function a host
program of launches over global buffers (:mod:`.program`).

It is an IR-to-IR translation, so it lives with the IR's transforms (it reads Graph,
Schedule and Tile IR and nothing above them); running the result is the tile
simulator's business (:mod:`tessera.interp.tile.program`). Kernels are built by
:mod:`.kernel`, their ops by the rules of :mod:`.ops` (elementwise), :mod:`.reduce`
(sums, means, extrema, softmax: the exact ``tile.reduce``) and :mod:`.matmul` (K loops
of ``tile.mma``, exact where float64 sums would not be), which refuse, naming the op
and the user's line, every op whose tile-level form would not give the graph
interpreter's bits (docs/schedule.md, "Schedule → Tile"). A ``graph.kernel_call`` keeps
its hand-written kernel's own Tile IR (:mod:`.call`).
"""

from __future__ import annotations

from tessera.ir.core import Function, Module, Value
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.to_tile import loss as _loss_rules  # noqa: F401 (registers)
from tessera.ir.transforms.to_tile import reduce as _reduce_rules  # noqa: F401 (registers)
from tessera.ir.transforms.to_tile.call import add_kernel_call, kernel_call_of
from tessera.ir.transforms.to_tile.kernel import build_kernel
from tessera.ir.transforms.to_tile.ops import TileGenerationError
from tessera.ir.transforms.to_tile.program import Launch, TileProgram
from tessera.ir.transforms.to_tile.splitk import build_slices, partials_type
from tessera.ir.types import TensorType


def schedule_to_tile(fn: Function, mode: str = "exact") -> TileProgram:
    """The tile kernels and host program of the scheduled function ``fn``; with
    ``mode="fast"`` a kernel may reassociate (attention's online softmax)."""
    schedule_ops.check_function(fn)
    program = TileProgram(fn.name, Module(fn.name))
    names: dict[Value, str] = {}
    for k, arg in enumerate(fn.args):
        name = _fresh(arg.hint or f"arg{k}", program.buffers)
        names[arg] = name
        program.inputs.append(name)
        assert isinstance(arg.type, TensorType)
        program.buffers[name] = arg.type
    for instr in schedule_ops.kernels(fn):
        label = instr.op.label  # type: ignore[attr-defined]
        outs = []
        for k, r in enumerate(instr.results):
            outs.append(_fresh(f"{label}_{k}", program.buffers))
            names[r] = outs[-1]
            assert isinstance(r.type, TensorType)
            program.buffers[outs[-1]] = r.type
        params = [names[v] for v in instr.operands]
        call = kernel_call_of(instr)
        if call is not None:  # a hand-written kernel: its own Tile IR, launched as it is
            add_kernel_call(program, instr, call, f"{fn.name}_{label}", params, outs)
            continue
        partials = None
        if instr.op.reduction == "split_k":  # type: ignore[attr-defined]
            partials = (_fresh(f"{label}_partials", program.buffers), partials_type(instr))
            program.buffers[partials[0]] = partials[1]
            kernel, grid = build_slices(instr, f"{fn.name}_{label}_slices", params,
                                        partials[0])
            program.module.add(kernel)
            program.launches.append(Launch(kernel.name, grid, (*params, partials[0])))
        kernel, grid = build_kernel(instr, f"{fn.name}_{label}", params, outs, mode, partials)
        program.module.add(kernel)
        program.launches.append(Launch(kernel.name, grid, (
            *params, *([partials[0]] if partials else []), *outs)))
    term = fn.body.terminator
    assert term is not None
    program.results = [names[v] for v in term.operands]
    return program


def lower_module(module: Module, name: str | None = None) -> TileProgram:
    """The tile program of ``module``'s function ``name`` (its first by default),
    scheduled first when it is still a graph function."""
    from tessera.ir.transforms.schedule import schedule_module

    fn = module.functions[name or next(iter(module.functions))]
    if fn.kind != schedule_ops.FUNC:
        fn = schedule_module(Module(module.name, {fn.name: fn})).functions[fn.name]
    return schedule_to_tile(fn)


def _fresh(name: str, taken: dict[str, TensorType]) -> str:
    if name not in taken:
        return name
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


__all__ = ["Launch", "TileGenerationError", "TileProgram", "lower_module", "schedule_to_tile"]
