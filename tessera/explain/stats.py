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


def _stats_rows(kernels: Sequence[Any]) -> tuple[list[list[str]], str]:
    """ptxas's numbers per kernel, or no rows and the reason."""
    rows = []
    for k in kernels:
        try:
            s = k.assemble().stats[k.name]
        except (TesseraError, OSError) as err:
            return [], f"ptxas statistics unavailable: {err}"
        rows.append([k.name, str(s.registers), str(s.smem), str(s.spill_stores),
                     str(s.spill_loads), str(s.stack_frame)])
    return rows, ""


def _estimate(kernel: Any, arrays: Sequence[Any]) -> str:
    from tessera.backend.ptx.estimate import estimate_compiled, format_estimate

    try:
        return format_estimate(estimate_compiled(kernel, arrays))
    except (TesseraError, ValueError, KeyError, NotImplementedError) as err:
        return f"no estimate: {type(err).__name__}: {err}"


def section(kernels: Sequence[Any], arrays: Sequence[Any]) -> str:
    """HTML of the statistics table and each kernel's estimate (``kernels`` are
    ``CompiledKernel``s; none when the kernel did not lower)."""
    if not kernels:
        return '<p class="muted">No PTX: the kernel did not lower (see the PTX panel).</p>'
    rows, why = _stats_rows(kernels)
    parts = []
    if rows:
        head = "".join(f"<th>{escape(c)}</th>" for c in _COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>"
                       for r in rows)
        parts.append(f'<table class="stats"><tr>{head}</tr>{body}</table>')
    else:
        parts.append(f'<p class="muted">{escape(why)}</p>')
    for k in kernels:
        parts.append(f'<pre class="estimate">{escape(_estimate(k, arrays))}</pre>')
    return "\n".join(parts)


__all__ = ["section"]
