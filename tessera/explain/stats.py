"""The resources section of an explain page: ptxas statistics and the static estimate.

The statistics are ptxas ``-v``'s (registers, spills, shared memory), as
``tessera ptx --stats`` prints them; without ptxas the section says so. The estimate is
:mod:`tessera.backend.ptx.estimate`'s model of one launch on an H100 SXM
(``tessera ptx --estimate``), which needs no GPU and no ptxas.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from tessera.errors import TesseraError

_COLUMNS = ("kernel", "registers", "shared bytes", "spill stores", "spill loads",
            "stack frame")


def _stats(kernels: Sequence[Any]) -> tuple[list[Any], str]:
    """ptxas's statistics per kernel (one assembly each), or Nones and the reason."""
    found = []
    for k in kernels:
        try:
            found.append(k.assemble().stats[k.name])
        except (TesseraError, OSError) as err:
            return [None] * len(kernels), f"ptxas statistics unavailable: {err}"
    return found, ""


def _estimate(kernel: Any, registers: int | None, arrays: Sequence[Any]) -> str:
    from tessera.backend.ptx.estimate import H100_SXM, estimate, format_estimate

    unique = sum(getattr(a, "nbytes", 0) for a in arrays) or None
    try:
        return format_estimate(estimate(kernel.kernel, H100_SXM, registers=registers,
                                        unique_bytes=unique))
    except (TesseraError, ValueError, KeyError, NotImplementedError) as err:
        return f"no estimate: {type(err).__name__}: {err}"


def section(kernels: Sequence[Any], arrays: Sequence[Any]) -> str:
    """HTML of the statistics table and each kernel's estimate (``kernels`` are
    ``CompiledKernel``s; none when the kernel did not lower)."""
    if not kernels:
        return '<p class="muted">No PTX to assemble (the PTX panel says why).</p>'
    stats, why = _stats(kernels)
    parts = []
    if why:
        parts.append(f'<p class="muted">{escape(why)}</p>')
    else:
        head = "".join(f"<th>{escape(c)}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in (
                k.name, s.registers, s.smem, s.spill_stores, s.spill_loads, s.stack_frame))
            + "</tr>" for k, s in zip(kernels, stats))
        parts.append(f'<table class="stats"><tr>{head}</tr>{body}</table>')
    for k, s in zip(kernels, stats):
        registers = int(s.registers) if s is not None else None
        parts.append(f'<pre class="estimate">{escape(_estimate(k, registers, arrays))}</pre>')
    return "\n".join(parts)


__all__ = ["section"]
