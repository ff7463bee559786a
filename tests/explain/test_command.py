"""``tessera explain``: pages from the command line, and its mistakes reported at the
user's file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.cli import main
from tests.explain import subjects

SUBJECTS = subjects.__file__


def test_kernel_page_from_the_command_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deep" / "saxpy.html"
    code = main(["explain", f"{SUBJECTS}:saxpy", "--arg", "x=16:f32", "--arg", "y=16:f32",
                 "--const", "alpha=2.0", "--grid", "4", "--group-size", "4",
                 "--html", str(out)])
    assert code == 0 and capsys.readouterr().out.strip() == str(out)
    html = out.read_text()
    for key in ("source", "tile", "target", "ptx"):
        assert f'data-key="{key}"' in html
    assert "Tile map" in html and "x read" in html and "y written" in html


def test_graph_function_page_fills_annotated_arguments(tmp_path: Path) -> None:
    out = tmp_path / "sum.html"
    assert main(["explain", f"{SUBJECTS}:scaled_sum", "--html", str(out)]) == 0
    html = out.read_text()
    assert 'data-key="graph"' in html and 'data-key="schedule"' in html
    assert 'class="dataflow"' in html and "kernel k0" in html


@pytest.mark.parametrize(("target", "words"), [
    ("nowhere.py:f", ["no such file: nowhere.py"]),
    (f"{SUBJECTS}", ["should be FILE.py:FUNCTION"]),
    (f"{SUBJECTS}:missing", ["defines no 'missing'", "saxpy"]),
    (f"{SUBJECTS}:NOT_A_FUNCTION",
     [f"{SUBJECTS}:{subjects.line_of('NOT_A_FUNCTION = 42')}: explain error",
      "neither a @ts.kernel nor a graph function", "hint:"]),
])
def test_mistakes_name_the_file_and_line(target: str, words: list[str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert main(["explain", target, "--html", str(out)]) == 1
    err = capsys.readouterr().err
    for w in words:
        assert w in err
    assert not out.exists()


def test_kernel_options_on_a_graph_function_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", f"{SUBJECTS}:scaled_sum", "--grid", "2",
                 "--html", str(tmp_path / "p.html")]) == 1
    assert "a kernel's options" in capsys.readouterr().err


def test_a_kernel_without_its_arguments_lists_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", f"{SUBJECTS}:saxpy", "--html", str(tmp_path / "p.html")]) == 1
    err = capsys.readouterr().err
    assert "--arg x=" in err and "--const alpha=VALUE" in err
