"""Explain pages: the panels, their line links, error panels and the atomic write."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.errors import TesseraError
from tessera.explain import page as page_mod
from tessera.explain.collect import explain_graph, explain_kernel
from tessera.explain.command import explain_page, write_page
from tessera.frontend.kernel.backends.compile import compile_kernel
from tests.explain import subjects


def _linked(panel, src: int) -> list[str]:
    return [t for t, s in zip(panel.lines, panel.src) if s == src]


def test_kernel_panels_link_each_level_to_the_source_line() -> None:
    args = subjects.saxpy_arguments()
    ex = explain_kernel(subjects.saxpy, args)
    panels = {p.key: p for p in ex.panels}
    assert list(panels) == ["source", "tile", "target", "ptx"]
    line = subjects.line_of("# the linked line")
    assert "y[i] = alpha * x[i] + y[i]" in _linked(panels["source"], line)[0]
    assert any("tile.store" in t for t in _linked(panels["tile"], line))
    assert any("ptx.st" in t for t in _linked(panels["target"], line))
    ptx = _linked(panels["ptx"], line)
    assert any("st.global.f32" in t for t in ptx) and any("ld.global.f32" in t for t in ptx)
    # the PTX panel is the compiler's PTX, and its links are the renderer's line map
    compiled = compile_kernel(subjects.saxpy, **args)
    assert "\n".join(panels["ptx"].lines) == compiled.ptx.rstrip("\n")
    for number, loc in compiled.line_map.items():
        assert panels["ptx"].src[number - 1] == loc.line
    # the IR text has no loc(...) suffix left
    assert not any("loc(" in t for p in ex.panels for t in p.lines)


def test_graph_function_panels_and_the_lowering_error_panel() -> None:
    a = np.ones((4, 8), np.float32)
    ex = explain_graph(subjects.scaled_sum, {"a": a, "b": a})
    panels = {p.key: p for p in ex.panels}
    assert list(panels) == ["source", "graph", "schedule", "tile", "target", "ptx"]
    line = subjects.line_of("c = a * 2.0 + b")
    assert any("graph.mul" in t for t in _linked(panels["graph"], line))
    assert any("graph.add" in t for t in _linked(panels["schedule"], line))
    lowered = ts.jit(subjects.scaled_sum).lower(a, a)
    try:
        ptx = str(lowered.ptx())
    except TesseraError as err:  # the level is refused: its panel says why
        assert panels["ptx"].error is not None and str(err) in panels["ptx"].error
        assert panels["source"].error is None and panels["graph"].lines
    else:
        assert panels["ptx"].error is None
        assert all(line in ptx for line in panels["ptx"].lines if not line.startswith("//"))
    titles = [t for t, _ in ex.sections]
    assert "Graph IR dataflow" in titles and any(t.startswith("Schedule IR") for t in titles)


def test_page_is_self_contained_and_lines_carry_their_source_line() -> None:
    html = explain_page(subjects.saxpy, **subjects.saxpy_arguments())
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing loaded from a network
    assert "<script>" in html and "<style>" in html and "<svg" in html
    line = subjects.line_of("# the linked line")
    linked = re.findall(rf'<div class="ln" data-src="{line}">.*?<span class="tx">(.*?)</span>',
                        html)
    assert any("st.global.f32" in unescape(t) for t in linked)
    for key in ("source", "tile", "target", "ptx"):
        assert f'data-key="{key}"' in html


def test_write_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    out.write_text("old page")
    with pytest.raises(TesseraError):  # the launch's own argument check
        write_page(subjects.saxpy, out, x=np.zeros(8, np.float32))
    with pytest.raises(TypeError):
        page_mod.write(12345, out)  # type: ignore[arg-type]
    assert out.read_text() == "old page"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]
    page_mod.write("<html></html>", out)
    assert out.read_text() == "<html></html>"


def test_resources_are_ptxas_statistics_and_the_estimate() -> None:
    from tessera.backend.ptx.estimate import estimate_compiled, format_estimate

    args = subjects.saxpy_arguments()
    ex = explain_kernel(subjects.saxpy, args)
    html = dict(ex.sections)["Resources"]
    compiled = compile_kernel(subjects.saxpy, **args)
    try:
        stats = compiled.assemble().stats["saxpy"]
    except (TesseraError, OSError) as err:
        assert "ptxas statistics unavailable" in html and str(err)[:40] in unescape(html)
    else:
        assert f"<td>saxpy</td><td>{stats.registers}</td><td>{stats.smem}</td>" in html
    arrays = [v for v in args.values() if isinstance(v, np.ndarray)]
    want = format_estimate(estimate_compiled(compiled, arrays))
    assert want in unescape(html)
