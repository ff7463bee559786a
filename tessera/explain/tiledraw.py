"""The tile map drawn as SVG grids, and the sanitizer finding drawn on them.

One grid per tensor, direction and barrier phase (:mod:`tessera.explain.tilemap`):
a cell per element (or per block of elements when a side exceeds ``MAX_CELLS``),
coloured by the group that touched it; grey when several groups did, pale when none.
A tensor of more than two dimensions is drawn at index 0 of its leading ones. The
element a sanitizer finding names is outlined in red, on its tensor's grid or on a
grid of the shared buffer it names (its shape read from the ``tile.alloc_shared`` op
at the buffer's line).
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import numpy as np

from tessera.explain.tilemap import MAX_CELLS, SEVERAL, Recorder, record, record_program
from tessera.ir.core import Function, walk

_SHARED = re.compile(r"shared buffer allocated at .*:(\d+)$")


def colour(group: int) -> str:
    """A group's fill: hues spread by the golden angle, light enough for black text."""
    if group == SEVERAL:
        return "#9aa0a6"
    if group < 0:
        return "#f3f4f6"
    return f"hsl({(group * 137.508) % 360:.0f}, 62%, 72%)"


def _plane(owners: np.ndarray) -> tuple[np.ndarray, str]:
    """A 2-D view of a tensor's owners and a note on what was left out."""
    if owners.ndim == 0:
        return owners.reshape(1, 1), ""
    if owners.ndim == 1:
        n = owners.shape[0]
        width = min(n, 32)
        rows = -(-n // width)
        padded = np.full(rows * width, -1, owners.dtype)
        padded[:n] = owners
        note = f" (wrapped at {width} per row)" if rows > 1 else ""
        return padded.reshape(rows, width), note
    lead = owners.shape[:-2]
    note = f" (index [{', '.join('0' for _ in lead)}, :, :] shown)" if lead else ""
    return owners[(0,) * len(lead)], note


def _blocks(plane: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """Cells of at most MAX_CELLS per side: a block's one group, SEVERAL, or -1."""
    rows, cols = plane.shape
    br, bc = -(-rows // MAX_CELLS), -(-cols // MAX_CELLS)
    if br == 1 and bc == 1:
        return plane, (1, 1)
    out = np.full((-(-rows // br), -(-cols // bc)), -1, np.int64)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            block = plane[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            seen = np.unique(block[block != -1])
            out[i, j] = -1 if seen.size == 0 else int(seen[0]) if seen.size == 1 else SEVERAL
    return out, (br, bc)


def grid_svg(owners: np.ndarray, title: str, mark: tuple[int, ...] | None = None) -> str:
    """One tensor's grid; ``mark`` outlines that element (a sanitizer finding)."""
    plane, note = _plane(owners)
    cells, (br, bc) = _blocks(plane)
    rows, cols = cells.shape
    size = max(5, min(16, 480 // max(rows, cols)))
    w, h = cols * size, rows * size
    parts = [f'<svg class="grid" xmlns="http://www.w3.org/2000/svg" width="{w + 2}" '
             f'height="{h + 2}" viewBox="-1 -1 {w + 2} {h + 2}">']
    for i in range(rows):
        for j in range(cols):
            g = int(cells[i, j])
            label = "none" if g == -1 else "several groups" if g == SEVERAL else f"group {g}"
            parts.append(f'<rect x="{j * size}" y="{i * size}" width="{size}" '
                         f'height="{size}" fill="{colour(g)}" stroke="#fff" '
                         f'stroke-width="0.5"><title>{label}</title></rect>')
    if mark is not None and owners.ndim:
        flat = mark[-2:] if owners.ndim >= 2 else divmod(mark[0], plane.shape[1])
        i, j = int(flat[0]) // br, int(flat[1]) // bc
        if 0 <= i < rows and 0 <= j < cols:
            parts.append(f'<rect class="finding" x="{j * size}" y="{i * size}" '
                         f'width="{size}" height="{size}" fill="none" stroke="#d00" '
                         f'stroke-width="3"/>')
    parts.append("</svg>")
    blocks = f", {br}x{bc} elements per cell" if (br, bc) != (1, 1) else ""
    return (f'<figure class="tile">{"".join(parts)}<figcaption>{escape(title)}'
            f'{escape(note + blocks)}</figcaption></figure>')


def legend(groups: set[int]) -> str:
    """Swatches for the groups drawn (at most 16) and for several / none."""
    items = [(g, f"group {g}") for g in sorted(g for g in groups if g >= 0)[:16]]
    items += [(SEVERAL, "several groups"), (-1, "not touched")]
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{colour(g)}"></i>{escape(t)}</span>' for g, t in items
    ) + "</div>"


def _shared_shape(tile: Function, memory: str) -> tuple[int, ...] | None:
    m = _SHARED.search(memory)
    if m is None:
        return None
    for instr in walk(tile.body):
        if instr.op.name == "tile.alloc_shared" and instr.loc.line == int(m.group(1)):
            return tuple(instr.results[0].type.shape)
    return None


def _finding(err: Any, tile: Function) -> str:
    text = f'<div class="finding"><b>{escape(getattr(err, "kind", type(err).__name__))}</b>' \
           f"<pre>{escape(str(err))}</pre></div>"
    memory, index = getattr(err, "memory", None), getattr(err, "index", None)
    shape = _shared_shape(tile, memory) if memory and index is not None else None
    if shape is not None and len(index) == len(shape) and \
            all(0 <= i < n for i, n in zip(index, shape)):
        owners = np.full(shape, -1, np.int64)
        text += grid_svg(owners, f"{memory}: element [{', '.join(map(str, index))}]",
                         tuple(index))
    return text


def section(kernel: Any, arguments: dict[str, Any], tile: Function) -> str:
    """HTML of the tile map of one launch and its sanitizer finding, if any."""
    recorder, err = record(kernel, arguments)
    return _maps(recorder, err, tile)


def program_section(program: Any, args: list[Any]) -> str:
    """HTML of the tile maps of a generated program's kernels, one heading each, in
    launch order (a kernel launched twice shows its accesses of both launches)."""
    recorders, err = record_program(program, args)
    out = []
    for name, recorder in recorders.items():
        grids = [step.grid for step in program.launches if step.kernel == name]
        failed = err if err is not None and name == list(recorders)[-1] else None
        out.append(f"<h3>{escape(name)} <span class=\"muted\">grid "
                   f"{escape(str(grids[0]))}</span></h3>")
        out.append(_maps(recorder, failed, program.module.functions[name]))
    return "\n".join(out)


def _maps(recorder: Recorder, err: Any, tile: Function) -> str:
    """The grids of one recorded launch and the finding drawn on them."""
    groups: set[int] = set()
    figures = []
    for name, touches in recorder.tensors.items():
        for (direction, phase) in sorted(touches.maps):
            owners = touches.owners(direction, phase)
            groups.update(int(g) for g in np.unique(owners))
            phases = {p for d, p in touches.maps if d == direction}
            when = f", after {phase} barrier(s)" if len(phases) > 1 else ""
            mark = None
            if err is not None and getattr(err, "memory", None) == name:
                mark = getattr(err, "index", None)
            figures.append(grid_svg(owners, f"{name} {direction}{when}", mark))
    out = [f'<p class="muted">groups of {recorder.group_size} tile(s); a cell is coloured '
           "by the group that touched the element.</p>"]
    if err is not None:
        out.append(_finding(err, tile))
        if getattr(err, "memory", None) not in recorder.tensors and \
                getattr(err, "index", None) is not None and err.memory and \
                not _SHARED.search(err.memory):
            out.append(f'<p class="muted">element [{", ".join(map(str, err.index))}] lies '
                       f"outside {escape(err.memory)}.</p>")
    out.append(legend(groups))
    out.append('<div class="tiles">' + "".join(figures) + "</div>")
    return "\n".join(out)


__all__ = ["colour", "grid_svg", "legend", "program_section", "section"]
