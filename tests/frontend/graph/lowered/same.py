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


def one_nan(a: np.ndarray) -> np.ndarray:
    """``a`` with every NaN made the same NaN (payload and sign dropped)."""
    try:
        nan = np.isnan(a)
    except TypeError:  # not a float format
        return a
    if not nan.any():
        return a
    out = a.copy()
    out[nan] = np.nan
    return out


def level_bits(out: Any) -> list[bytes]:
    """:func:`bits` with every NaN the same: between the graph interpreter (NumPy's NaN
    bits) and the Target IR interpreter or a GPU (the canonical NaN of the PTX
    instruction's format) a NaN matches a NaN; every other bit must be equal."""
    leaves = out if isinstance(out, tuple) else (out,)
    return [np.asarray(t.array).dtype.str.encode() + one_nan(np.asarray(t.array)).tobytes()
            for t in leaves]


#: the two targets every lowered program is checked on
TARGETS = ("sm_80", "sm_90a")


def same_on_target(fn: Callable[..., Any], args: Sequence[Any],
                   targets: str | Sequence[str] = TARGETS) -> None:
    """``fn`` compiled once gives the graph interpreter's bits on every target (a NaN
    matching a NaN: :func:`level_bits`)."""
    lowered = ts.jit(fn).lower(*args)
    want = level_bits(lowered.run(*args))
    for target in [targets] if isinstance(targets, str) else targets:
        assert level_bits(lowered.run(*args, backend="target", target=target)) == want, target


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
