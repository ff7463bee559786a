"""Bit comparisons shared by the lowered-program tests: a compiled program's results
under ``backend="target"`` (the Target IR interpreter running the generated PTX-level
kernels) against the graph interpreter's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import tessera as ts


def bits(out: Any) -> list[bytes]:
    """Each result's dtype and bytes (a tuple of results or one), so that equal bits in
    another dtype do not compare equal."""
    leaves = out if isinstance(out, tuple) else (out,)
    return [np.asarray(t.array).dtype.str.encode() + np.asarray(t.array).tobytes()
            for t in leaves]


#: the two targets every lowered program is checked on
TARGETS = ("sm_80", "sm_90a")


def same_on_target(fn: Callable[..., Any], args: Sequence[Any],
                   targets: str | Sequence[str] = TARGETS) -> None:
    """``fn`` compiled once gives the graph interpreter's bits on every target."""
    lowered = ts.jit(fn).lower(*args)
    want = bits(lowered.run(*args))
    for target in [targets] if isinstance(targets, str) else targets:
        assert bits(lowered.run(*args, backend="target", target=target)) == want, target


def assembles_clean(kernel: Any) -> Any:
    """Assemble a generated kernel with ptxas: no spill, no stack frame, no advisory.
    Returns the assembled kernel for further checks."""
    assembled = kernel.assemble()
    stats = assembled.stats[kernel.name]
    assert stats.spill_stores == stats.spill_loads == stats.stack_frame == 0, kernel.name
    assert "warning" not in assembled.log.lower(), assembled.log
    return assembled


def multiplies(kernel: Any) -> bool:
    """Whether a lowered kernel's Tile IR has a ``tile.mma`` (split-K's combine, which
    adds the slices' partial sums, has none)."""
    from tessera.ir.core import walk
    from tessera.ir.dialects.tile.compute import Mma

    return any(isinstance(i.op, Mma) for i in walk(kernel.compiled.tile.body))
