"""The interpreter rule of ``graph.kernel_call``: launch the kernel's Tile IR in the
tile simulator on copies of the operands.

The launch is the kernel's own (its grid, group size and batch), checked (every
sanitizer, exact numerics) in exact mode and the simulator's fast mode in fast mode.
Operands are copied first, so the graph's values are never written; one operand
passed for two parameters is one copy, one memory, as in a launch. ``out_shape=``
outputs start as zeros. The results are the listed parameters after the launch and
the returned tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.dialects.graph.kernel import RETURNED, graph_type
from tessera.numerics import storage_of

#: prepared kernels by region block and mode (the block is kept, so its id stays unique)
_PREPARED: dict[tuple[int, bool], tuple[Any, Any]] = {}
#: prepared kernels kept (the oldest is dropped past this)
KEEP = 256


def _prepared(op: graph_ir.KernelCall, block: Any, returned: Any, fast: bool) -> Any:
    from tessera.interp.tile import prepare

    key = (id(block), fast)
    hit = _PREPARED.get(key)
    if hit is None or hit[0] is not block:
        if len(_PREPARED) >= KEEP:
            del _PREPARED[next(iter(_PREPARED))]
        hit = _PREPARED[key] = (block, prepare(op.tile_function(block, returned), fast))
    return hit[1]


@rule(graph_ir.KernelCall)
def kernel_call(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Launch the kernel on copies of ``operands`` (see the module docstring)."""
    from tessera.interp.tile import LaunchGeometry, launch

    op = ap.op
    assert isinstance(op, graph_ir.KernelCall)
    if len(ap.regions) != 1:
        raise ap.fail("needs its kernel's region", hint="build it with call_kernel")
    block = ap.regions[0].block
    returned = ap.result_types[op.results.index(RETURNED)] if RETURNED in op.results \
        else None
    fast = ap.mode == "fast"
    compiled = _prepared(op, block, returned, fast)
    copies: dict[int, np.ndarray] = {}
    arrays: list[np.ndarray] = []
    given = iter(operands)
    for k, arg in enumerate(block.args):
        if k in op.fresh:
            t = graph_type(arg.type)
            assert t is not None
            arrays.append(np.zeros(tuple(t.shape), storage_of(t.element).np_dtype))
            continue
        a = next(given)
        if id(a) not in copies:
            copies[id(a)] = np.array(a, copy=True, order="C")
        arrays.append(copies[id(a)])
    output = None
    if returned is not None:
        output = np.zeros(tuple(returned.shape), storage_of(returned.element).np_dtype)
    launch(compiled, arrays, LaunchGeometry(op.batch, op.grid, op.group_size),
           checked=not fast, output=output,
           output_element=returned.element if returned is not None else None)
    return [output if p == RETURNED else arrays[p] for p in op.results]  # type: ignore[misc]
