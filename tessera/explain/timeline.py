"""The mesh timeline of a sharded function on its explain page.

The function runs once under :func:`tessera.mesh_sim.profile.profile`, which records
every kernel, collective and transfer of every device on the cost model's clock. The
page draws those events as an SVG (a row per device, a lane per stream: compute above,
communication below; hover a slice for its name and duration) and links the same
record as a Chrome/Perfetto trace-event file, embedded in the page as a download
(open it at ui.perfetto.dev or chrome://tracing), so the page stays self-contained.
"""

from __future__ import annotations

import base64
import json
from html import escape
from typing import Any

#: at most this many devices are drawn (the trace file has them all)
MAX_DEVICES = 16
WIDTH, LANE, LEFT = 860, 9, 64
COLOURS = {"compute": "#5b8def", "comm": "#e8a33d"}


def timeline_svg(events: list[Any]) -> str:
    """The events (``TraceEvent``: device, stream, start, dur, name, kind) as an SVG."""
    if not events:
        return '<p class="muted">the run recorded no event</p>'
    t0 = min(e.start for e in events)
    span = max(max(e.start + e.dur for e in events) - t0, 1e-9)
    devices = sorted({e.device for e in events})
    shown = devices[:MAX_DEVICES]
    row = {d: i for i, d in enumerate(shown)}
    height = len(shown) * (2 * LANE + 6) + 24
    parts = [f'<svg class="timeline" width="{WIDTH + LEFT + 8}" height="{height}" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="monospace" font-size="10">']
    for d, i in row.items():
        y = i * (2 * LANE + 6) + 4
        parts.append(f'<text x="2" y="{y + LANE + 4}">dev {d}</text>')
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{y + 2 * LANE + 2}" '
                     f'y2="{y + 2 * LANE + 2}" stroke="#eee"/>')
    for e in events:
        if e.device not in row:
            continue
        lane = 0 if e.stream == "compute" else 1
        x = LEFT + (e.start - t0) / span * WIDTH
        w = max(e.dur / span * WIDTH, 1.0)
        y = row[e.device] * (2 * LANE + 6) + 4 + lane * LANE
        colour = COLOURS.get(e.stream, "#999")
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{LANE - 1}" '
                     f'fill="{colour}" stroke="#fff" stroke-width="0.6">'
                     f'<title>{escape(e.name)} ({escape(e.kind)}): '
                     f'{e.dur:.2f} us at {e.start - t0:.2f} us</title></rect>')
    y = height - 6
    parts.append(f'<text x="{LEFT}" y="{y}">0 us</text>'
                 f'<text x="{LEFT + WIDTH - 80}" y="{y}">{span:.2f} us</text></svg>')
    more = f" (the first {MAX_DEVICES} of {len(devices)} devices)" \
        if len(devices) > MAX_DEVICES else ""
    legend = ('<p class="muted">compute <span style="color:#5b8def">&#9632;</span>, '
              f'communication <span style="color:#e8a33d">&#9632;</span>{more}</p>')
    return legend + "".join(parts)


def trace_link(trace: dict[str, Any], name: str) -> str:
    """A download link to the trace-event JSON, embedded as a data URL."""
    data = base64.b64encode(json.dumps(trace).encode()).decode()
    return (f'<p><a download="{escape(name)}.trace.json" '
            f'href="data:application/json;base64,{data}">Download the Perfetto trace</a> '
            '(open it at ui.perfetto.dev or chrome://tracing)</p>')


def section(prof: Any, name: str) -> str:
    """HTML of a profile's timeline and its trace link."""
    return trace_link(prof.trace(), name) + timeline_svg(prof.events)


__all__ = ["MAX_DEVICES", "section", "timeline_svg", "trace_link"]
