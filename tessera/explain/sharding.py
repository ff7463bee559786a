"""Pictures of a DistTensor's sharding: which device holds which block.

``ts.visualize_sharding(t)`` prints the global array (its last two dims; one row for a
vector) as boxes, one per distinct block, each labelled with the devices that hold it,
as ``jax.debug.visualize_array_sharding`` does; drawn with box-drawing characters
(the package depends on no terminal library). :func:`sharding_html` is the same
picture in SVG, used by explain pages and by ``DistTensor._repr_html_``.
"""

from __future__ import annotations

import sys
from html import escape
from typing import Any, TextIO

from tessera.errors import ArgumentError, user_api

Box = tuple[int, int, int, int]  # row start, row stop, column start, column stop

_CHARS = {(0, 1, 0, 1): "┌", (1, 0, 0, 1): "┐", (0, 1, 1, 0): "└", (1, 0, 1, 0): "┘",
          (1, 1, 0, 0): "─", (0, 0, 1, 1): "│", (1, 1, 0, 1): "┬", (1, 1, 1, 0): "┴",
          (0, 1, 1, 1): "├", (1, 0, 1, 1): "┤", (1, 1, 1, 1): "┼", (1, 0, 0, 0): "─",
          (0, 1, 0, 0): "─", (0, 0, 1, 0): "│", (0, 0, 0, 1): "│"}


def _device_name(device: Any, index: int) -> str:
    return f"dev {device}" if isinstance(device, int) else str(device)


def blocks(t: Any) -> tuple[tuple[int, int], dict[Box, list[str]]]:
    """The drawn plane's (rows, columns) and, per distinct block of it, the devices
    holding it in device order."""
    from tessera.dist.core.tensor import DistTensor

    if not isinstance(t, DistTensor):
        raise ArgumentError(f"visualize_sharding takes a DistTensor, got {type(t).__name__}",
                            hint="build one with ts.dist.from_numpy(array, mesh, spec)")
    shape = t.shape
    rows, cols = (1, 1) if not shape else (1, shape[0]) if len(shape) == 1 else shape[-2:]
    out: dict[Box, list[str]] = {}
    for index, device in enumerate(t.mesh.devices):
        region = t.slices(device)
        if not region:
            box = (0, 1, 0, 1)
        elif len(region) == 1:
            box = (0, 1, region[0].start, region[0].stop)
        else:
            box = (region[-2].start, region[-2].stop, region[-1].start, region[-1].stop)
        out.setdefault(box, []).append(_device_name(device, index))
    return (rows, cols), out


def _notes(t: Any) -> list[str]:
    notes = []
    if t.ndim > 2 and any(t.sharded_dim(a) is not None and t.sharded_dim(a) < t.ndim - 2
                          for a in t.sharded_axes):
        notes.append("leading dims are sharded too: boxes show the last two dims only")
    if t.partial_axes:
        notes.append(f"partial over {', '.join(t.partial_axes)}: each device holds a summand")
    return notes


@user_api
def sharding_text(t: Any, width: int = 64) -> str:
    """The box-drawing picture of ``t``'s blocks (see the module docstring)."""
    (rows, cols), found = blocks(t)
    row_cuts = sorted({b[0] for b in found} | {b[1] for b in found})
    col_cuts = sorted({b[2] for b in found} | {b[3] for b in found})
    height = max(2, 3 * (len(row_cuts) - 1))
    width = max(width, 10 * (len(col_cuts) - 1))

    def x(c: int) -> int:
        return round(c * width / max(cols, 1))

    def y(r: int) -> int:
        return round(r * height / max(rows, 1))

    h: set[tuple[int, int]] = set()
    v: set[tuple[int, int]] = set()
    for r0, r1, c0, c1 in found:
        for xx in range(x(c0), x(c1)):
            h.update({(y(r0), xx), (y(r1), xx)})
        for yy in range(y(r0), y(r1)):
            v.update({(yy, x(c0)), (yy, x(c1))})
    canvas = [[" "] * (width + 1) for _ in range(height + 1)]
    for yy in range(height + 1):
        for xx in range(width + 1):
            key = (int((yy, xx - 1) in h), int((yy, xx) in h), int((yy - 1, xx) in v),
                   int((yy, xx) in v))
            canvas[yy][xx] = _CHARS.get(key, " ")
    for (r0, r1, c0, c1), devices in found.items():
        label = ", ".join(devices)
        room = x(c1) - x(c0) - 1
        if len(label) > room:
            label = label[:max(room - 1, 0)] + "…" if room > 1 else ""
        row = (y(r0) + y(r1)) // 2
        start = x(c0) + 1 + (room - len(label)) // 2
        canvas[row][start:start + len(label)] = list(label)
    lines = ["".join(r).rstrip() for r in canvas]
    head = f"{t.shape} {t.element} on mesh {dict(zip(t.mesh.axes, t.mesh.shape))}"
    return "\n".join([head, *lines, *_notes(t)]) + "\n"


@user_api
def visualize_sharding(t: Any, file: TextIO | None = None) -> None:
    """Print which device holds which block of the DistTensor ``t`` (the last two dims
    of the global array, one box per distinct block, labelled with its devices)."""
    if file is not None and not callable(getattr(file, "write", None)):
        raise ArgumentError(f"file must be a text stream, got {type(file).__name__}",
                            hint="pass file=sys.stderr, an open file, or nothing")
    print(sharding_text(t), end="", file=file or sys.stdout)


@user_api
def sharding_html(t: Any, side: int = 280) -> str:
    """The picture of :func:`sharding_text` as an inline SVG figure, its longer side
    ``side`` pixels (the array's proportions, within limits that keep labels legible)."""
    from tessera.explain.tiledraw import colour

    (rows, cols), found = blocks(t)
    longest = max(rows, cols, 1)
    width = max(160, round(side * cols / longest)) if t.ndim else 160
    height = max(48, round(side * rows / longest)) if t.ndim == 2 else 48
    parts = [f'<svg class="sharding" xmlns="http://www.w3.org/2000/svg" width="{width + 2}" '
             f'height="{height + 2}" viewBox="-1 -1 {width + 2} {height + 2}">']
    for k, ((r0, r1, c0, c1), devices) in enumerate(found.items()):
        x0, x1 = c0 * width / cols, c1 * width / cols
        y0, y1 = r0 * height / rows, r1 * height / rows
        parts.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                     f'height="{y1 - y0:.1f}" fill="{colour(k)}" stroke="#333"/>')
        lines = _wrap(devices, x1 - x0, y1 - y0)
        top = (y0 + y1) / 2 - 7 * (len(lines) - 1) + 4
        parts += [f'<text x="{(x0 + x1) / 2:.1f}" y="{top + 14 * i:.1f}" '
                  f'text-anchor="middle" font-family="monospace" font-size="12">'
                  f"{escape(line)}</text>" for i, line in enumerate(lines)]
    parts.append("</svg>")
    caption = escape(f"{t.shape} {t.element} on mesh {dict(zip(t.mesh.axes, t.mesh.shape))}")
    notes = "".join(f"<br>{escape(n)}" for n in _notes(t))
    return f'<figure class="sharding">{"".join(parts)}<figcaption>{caption}{notes}' \
           "</figcaption></figure>"


def _wrap(devices: list[str], width: float, height: float) -> list[str]:
    """The devices' label in lines that fit a box (12px monospace: ~7.3px a glyph,
    14px a line); what does not fit ends in an ellipsis."""
    room = max(3, int(width / 7.3) - 1)
    lines: list[str] = []
    for name in devices:
        if lines and len(lines[-1]) + 2 + len(name) <= room:
            lines[-1] += ", " + name
        else:
            lines.append(name[:room])
    most = max(1, int(height / 14) - 1)
    if len(lines) > most:
        lines = lines[:most]
        lines[-1] = lines[-1][:room - 1] + "…"
    return lines


def sections(arguments: dict[str, Any], fn: Any) -> list[tuple[str, str]]:
    """Explain-page sections: the sharding of each DistTensor argument and result."""
    from tessera.dist.core.tensor import DistTensor
    from tessera.errors import TesseraError
    from tessera.explain import timeline
    from tessera.mesh_sim.profile import profile

    found = [(f"argument {k}", v) for k, v in arguments.items() if isinstance(v, DistTensor)]
    if not found:
        return []
    with profile() as prof:  # the run that draws the results also records the timeline
        try:
            result = fn(**arguments)
        except TesseraError:
            result = None
    leaves = result if isinstance(result, (tuple, list)) else [result]
    found += [(f"result {k}", v) for k, v in enumerate(leaves) if isinstance(v, DistTensor)]
    html = "".join(f"<div><b>{escape(name)}</b>{sharding_html(t)}</div>" for name, t in found)
    name = getattr(fn, "name", None) or getattr(fn, "__name__", "program")
    return [("Sharding", f'<div class="tiles">{html}</div>'),
            ("Mesh timeline", timeline.section(prof, name))]


__all__ = ["blocks", "sections", "sharding_html", "sharding_text", "visualize_sharding"]
