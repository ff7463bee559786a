"""The notebook (``_repr_html_``) form of IR, compiled programs and DistTensors.

Jupyter shows an object's ``_repr_html_`` when it has one. IR modules and functions
show their text in a monospace box, a lowered graph function (``ts.jit(f).lower(...)``)
its stages in collapsible boxes with the Schedule IR drawn as its kernels, a DistTensor
its sharding picture. Each fragment carries its own inline style (a notebook page has
none of the explain page's style sheet).

Kernels defined in a cell compile like any other: their source is read through
``linecache``, where IPython and ipykernel register every cell under its code's file
name (``<ipython-input-N-...>`` or a temporary ``.../ipykernel_*/N.py``).
"""

from __future__ import annotations

from html import escape
from typing import Any

BOX = ("font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; "
       "font-size: 12px; line-height: 1.45; background: #f6f8fa; color: #1f2328; "
       "border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 10px; "
       "max-height: 28em; overflow: auto; white-space: pre; margin: 4px 0")


def text_box(text: str, title: str = "") -> str:
    """A monospace box of ``text`` under an optional bold title."""
    head = f'<div style="font-weight:600;margin-top:6px">{escape(title)}</div>' if title else ""
    return f'{head}<pre class="tessera-ir" style="{BOX}">{escape(text)}</pre>'


def ir_html(ir: Any) -> str:
    """``_repr_html_`` of an IR ``Module`` or ``Function``."""
    return text_box(str(ir))


def _stage(program: Any, stage: str) -> str:
    from tessera.errors import TesseraError

    try:
        return program.ir(stage)
    except (TesseraError, NotImplementedError) as err:
        return f"({stage} IR not available: {err})"


def program_html(program: Any) -> str:
    """``_repr_html_`` of a ``CompiledProgram``: each stage in a collapsible box (the
    Graph IR open) and the Schedule IR's kernels drawn."""
    from tessera.errors import TesseraError
    from tessera.explain import graphsvg
    from tessera.ir.transforms.schedule import schedule_module

    parts = [f"<div><b>{escape(program.fn.name)}</b> (lowered)"]
    for stage in ("graph", "schedule", "tile", "target"):
        is_open = " open" if stage == "graph" else ""
        parts.append(f"<details{is_open}><summary>{stage} IR</summary>"
                     f"{text_box(_stage(program, stage))}</details>")
    try:
        scheduled = schedule_module(program.compiled.module)
        fn = scheduled.functions[next(iter(scheduled.functions))]
        drawing = graphsvg.svg(fn, "")
        parts.append(f"<details><summary>schedule drawing</summary>{_svg_style()}"
                     f"<div class='tessera-drawing'>{drawing}</div></details>")
    except TesseraError:
        pass
    parts.append("</div>")
    return "".join(parts)


def _svg_style() -> str:
    return ("<style>.tessera-drawing svg text{font:12px monospace;text-anchor:middle}"
            ".tessera-drawing .node rect{fill:#eef4ff;stroke:#4f6fa8}"
            ".tessera-drawing .edge{fill:none;stroke:#6b7280}"
            ".tessera-drawing .kernel rect{fill:#f5f0ff;stroke:#8b6fd1;"
            "stroke-dasharray:4 3}.tessera-drawing .kernel text{text-anchor:start}</style>")


def dist_html(t: Any) -> str:
    """``_repr_html_`` of a DistTensor: its repr and its sharding picture."""
    from tessera.explain.sharding import sharding_html

    return f"<div><code>{escape(repr(t))}</code>{sharding_html(t)}</div>"


__all__ = ["BOX", "dist_html", "ir_html", "program_html", "text_box"]
