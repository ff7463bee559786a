"""The conformance report links each failing case that launched a kernel to that
kernel's explain page, made for failing cases only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tessera import conformance
from tessera.conformance import report
from tessera.conformance.registry import Case
from tessera.explain.failures import watching_launches
from tests.explain import subjects


def _wrong_saxpy(ctx: Any) -> None:
    """saxpy checked against a wrong expectation."""
    args = subjects.saxpy_arguments(8, 4)
    ctx.launch(subjects.saxpy, args.pop("x"), args.pop("y"), args.pop("alpha"), **args)
    raise AssertionError("planted: saxpy expected to give zeros")


def _graph_fails(ctx: Any) -> None:
    """A failing case without kernels."""
    raise AssertionError("planted: no kernel here")


def _passes(ctx: Any) -> None:
    """A passing case that launches a kernel."""
    args = subjects.saxpy_arguments(8, 4)
    subjects.saxpy(**args)


CASES = [Case("explain.kernel-fails", "spec §1", _wrong_saxpy, backends=("tile",)),
         Case("explain.graph-fails", "spec §2", _graph_fails, backends=("tile",)),
         Case("explain.passes", "spec §3", _passes, backends=("tile",))]


def test_failing_kernel_cases_link_to_their_pages(tmp_path: Path) -> None:
    run = conformance.run(CASES, "tile")
    # (raised outside the package: errors, not failures; both get pages)
    assert [r.outcome for r in run.results] == ["error", "error", "passed"]
    out = tmp_path / "report.html"
    report.write_html(run, out)
    text = out.read_text()
    assert text.count('class="explain"') == 1
    assert 'href="report-explain/explain.kernel-fails.html"' in text
    page = (tmp_path / "report-explain" / "explain.kernel-fails.html").read_text()
    assert 'data-key="ptx"' in page and "Tile map" in page
    assert [p.name for p in (tmp_path / "report-explain").iterdir()] == \
        ["explain.kernel-fails.html"]


def test_passing_runs_make_no_pages(tmp_path: Path) -> None:
    run = conformance.run(CASES[2:], "tile")
    out = tmp_path / "report.html"
    report.write_html(run, out)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_watching_records_arguments_by_name_as_they_were() -> None:
    args = subjects.saxpy_arguments(8, 4)
    x, y = args["x"], args["y"]
    with watching_launches() as seen:
        subjects.saxpy(x, y, args["alpha"], grid=2, group_size=4)
    kernel, named = seen[-1]
    assert kernel is subjects.saxpy
    assert np.array_equal(named["y"], np.ones(8, np.float32))  # before the launch
    assert np.array_equal(y, 2.0 * x + 1.0) and named["grid"] == 2
