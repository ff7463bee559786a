"""The runner, the two reports and the command line: outcomes are classified, a planted
failing case shows as failed with its message in both reports, the JUnit XML parses
with the schema CI tools read, the HTML names every case, ``-k`` selects, and an
unknown backend is a clear error."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tessera import conformance
from tessera.cli import main
from tessera.conformance import registry, report
from tessera.conformance.registry import KERNEL, Case, Skip
from tessera.errors import ArgumentError


def _fails(ctx: Any) -> None:
    """A planted failure."""
    assert 1 + 1 == 3, "planted: one plus one is not three"


def _raises(ctx: Any) -> None:
    """A planted error."""
    raise KeyError("planted key")


def _skips(ctx: Any) -> None:
    """A planted skip."""
    raise Skip("planted: not here")


def _passes(ctx: Any) -> None:
    """A planted pass <with markup & quotes">."""


PLANTED = [Case("planted.fails", "a spec §1", _fails, doc="fails"),
           Case("planted.raises", "a spec §2", _raises, doc="raises"),
           Case("planted.skips", "a spec §3", _skips, doc="skips"),
           Case("planted.passes", "a spec <§4>", _passes, doc="passes <b>"),
           Case("planted.kernel-only", "a spec §5", _passes, backends=KERNEL[2:], doc="k"),
           Case("planted.known", "a spec §6", _fails, xfail=(("interp", "planted bug"),),
                doc="known"),
           Case("planted.known-but-passes", "a spec §7", _passes,
                xfail=(("interp", "planted"),), doc="fixed")]


@pytest.fixture(scope="module")
def planted() -> conformance.Report:
    return conformance.run(PLANTED, "interp")


def test_outcomes(planted: conformance.Report) -> None:
    got = {r.case.id: r.outcome for r in planted.results}
    assert got == {"planted.fails": "failed", "planted.raises": "error",
                   "planted.skips": "skipped", "planted.passes": "passed",
                   "planted.kernel-only": "skipped", "planted.known": "skipped",
                   "planted.known-but-passes": "failed"}
    msg = {r.case.id: r.message for r in planted.results}
    # (pytest's assertion rewriting appends its explanation to the message)
    assert msg["planted.fails"].startswith("planted: one plus one is not three")
    assert msg["planted.raises"] == "KeyError: 'planted key'"
    assert "applies to backends target, cuda only" in msg["planted.kernel-only"]
    assert msg["planted.known"].startswith("known failure on interp: planted bug")
    assert "remove the entry" in msg["planted.known-but-passes"]
    assert not planted.ok
    assert planted.summary().startswith("1 passed, 2 failed, 1 errors, 3 skipped in ")


def test_an_internal_assertion_is_an_error_not_a_failure() -> None:
    import numpy as np

    def broken(ctx: Any) -> None:
        np.testing.assert_array_equal([1], [2])  # raised outside conformance code

    (result,) = conformance.run([Case("planted.internal", "s", broken, doc="d")]).results
    assert result.outcome == "error" and result.message.startswith("AssertionError")


def test_junit_is_well_formed(planted: conformance.Report, tmp_path: Path) -> None:
    path = tmp_path / "out.xml"
    report.write_junit(planted, path)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "tessera.conformance[interp]"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("7", "2", "1", "3")
    cases = {tc.get("name"): tc for tc in suite.findall("testcase")}
    assert set(cases) == {c.id for c in PLANTED}
    fail = cases["planted.fails"].find("failure")
    assert fail is not None
    assert fail.get("message", "").startswith("planted: one plus one is not three")
    assert "assert 1 + 1 == 3" in (fail.text or "")
    err = cases["planted.raises"].find("error")
    assert err is not None and err.get("type") == "KeyError"
    assert cases["planted.skips"].find("skipped").get("message") == "planted: not here"
    assert cases["planted.passes"].find("failure") is None
    assert cases["planted.passes"].get("classname") == "tessera.conformance.planted"
    spec = cases["planted.passes"].find("properties/property[@name='spec']")
    assert spec is not None and spec.get("value") == "a spec <§4>"
    assert float(cases["planted.fails"].get("time")) >= 0


def test_html_is_self_contained(planted: conformance.Report, tmp_path: Path) -> None:
    path = tmp_path / "out.html"
    report.write_html(planted, path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for c in PLANTED:
        assert f'id="{c.id}"' in text
    assert '<tr class="failed" id="planted.fails">' in text
    assert "planted: one plus one is not three" in text
    assert html.escape("a spec <§4>") in text and "passes <b>" not in text
    assert "http" not in text and "<script" not in text and "<link" not in text
    assert html.escape(planted.summary()) in text


def test_cli_writes_both_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_html, out_xml = tmp_path / "r.html", tmp_path / "r.xml"
    rc = main(["conformance", "-k", "numerics.ties or sanitizer.race", "--report",
               str(out_html), "--junit", str(out_xml)])
    assert rc == 0
    selected = conformance.select("numerics.ties or sanitizer.race")
    assert len(selected) == 8 + 6
    names = [tc.get("name") for tc in ET.parse(out_xml).getroot().iter("testcase")]
    assert names == [c.id for c in selected]
    text = out_html.read_text()
    assert all(f'id="{c.id}"' in text for c in selected)
    out = capsys.readouterr().out
    assert "numerics" in out and "sanitizer" in out and "\r" not in out  # no live line
    assert out.rstrip().endswith("(backend interp)")


def test_cli_fails_on_a_planted_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    conformance.select()  # every area registered first
    monkeypatch.setitem(registry.REGISTRY, "planted.fails", PLANTED[0])
    xml_path, html_path = tmp_path / "f.xml", tmp_path / "f.html"
    rc = main(["conformance", "-k", "planted or numerics.nan.bf16", "--junit", str(xml_path),
               "--report", str(html_path)])
    assert rc == 1
    out = capsys.readouterr().out
    assert "FAILED planted.fails [a spec §1]: planted: one plus one is not three" in out
    failures = ET.parse(xml_path).getroot().findall(".//testcase/failure")
    assert len(failures) == 1
    assert failures[0].get("message", "").startswith("planted: one plus one is not three")
    assert '<tr class="failed" id="planted.fails">' in html_path.read_text()


def test_k_expressions() -> None:
    ids = [c.id for c in conformance.select("numerics and not fp4 and ties")]
    assert ids and all(i.startswith("numerics.") and "fp4" not in i and "ties" in i
                       for i in ids)
    assert "numerics.ties.fp4_e2m1" not in ids and "numerics.near-ties.bf16" in ids
    assert conformance.select("MESH.ALL-GATHER.TP")[0].id == "mesh.all-gather.tp"
    assert conformance.select("no-such-case") == []
    with pytest.raises(ArgumentError, match="bad -k expression"):
        conformance.select("numerics and (")


def test_a_pattern_that_selects_nothing_is_an_error(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    """A mistyped -k would otherwise pass, having run nothing."""
    assert main(["conformance", "-k", "numercs"]) == 1
    err = capsys.readouterr().err
    assert "no conformance case matches -k 'numercs'" in err
    assert "the areas are autodiff, graph" in err and "Traceback" not in err


def test_unknown_backend_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--backend", "gpu"]) == 1
    err = capsys.readouterr().err
    assert "unknown conformance backend 'gpu'" in err and "interp, tile, target, cuda" in err
    with pytest.raises(ArgumentError):
        conformance.run([], "gpu")


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list", "-k", "mesh.broadcast"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("mesh.broadcast.dp  [decisions.md")


def test_cuda_cases_skip_without_gpu_and_after_a_lost_context(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU a kernel case is a skip; with one, a sticky CUDA error is that
    case's error and the later cuda cases are skipped, naming it."""
    import tessera as ts
    from tessera.conformance import context

    (result,) = conformance.run(conformance.select("kernels.saxpy.corrected"), "cuda").results
    if not context.gpu()[0]:
        assert result.outcome == "skipped" and result.message.startswith("no GPU: ")

    def sticky(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(context, "gpu", lambda: (True, ""))
    monkeypatch.setattr(context, "_LOST", [])
    monkeypatch.setattr(ts, "check_against_reference", sticky)
    report = conformance.run(conformance.select("kernels.saxpy or kernels.gemm.corrected"),
                             "cuda")
    outcomes = [(r.outcome, r.message) for r in report.results]
    assert outcomes[0] == ("error", "RuntimeError: cuCtxSynchronize failed: "
                                    "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert all(o == "skipped" and m.startswith("the CUDA context was lost by an earlier "
                                               "case: cuCtxSynchronize") for o, m in outcomes[1:])
    assert len(outcomes) == 2


def test_an_error_without_a_line_is_placed_at_the_case() -> None:
    """A library error raised under a case has no user's frame on the stack (the case
    is library code too): the report names the case's line instead of ``<unknown>``."""
    from tessera.errors import UNKNOWN_LOC, InterpretError

    def compares(ctx: Any) -> None:
        raise InterpretError("output 1 differs", loc=UNKNOWN_LOC)

    (result,) = conformance.run([Case("planted.unplaced", "s", compares, doc="d")]).results
    line = compares.__code__.co_firstlineno + 1
    assert result.outcome == "error"
    assert result.message.startswith(f"InterpretError: {__file__}:{line}: "), result.message
