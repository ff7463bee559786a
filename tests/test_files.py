"""Files written for users: whole or not at all, missing folders created, and a path
that cannot be written reported as an ArgumentError naming it, by every command that
writes one (``tessera ptx -o``, ``tessera conformance --report/--junit``), before the
work where the work is long."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tessera.cli import main
from tessera.errors import ArgumentError
from tessera.files import check_writable, write_output

SAXPY = ("import tessera as ts\n\n@ts.kernel\n"
         "def saxpy(x: ts.Tensor['N', ts.f32], y: ts.Tensor['N', ts.f32]):\n"
         "    i = ts.tile.linear_id()\n    if i < N:\n        y[i] = 2.0 * x[i] + y[i]\n")


def test_text_and_bytes_are_written_whole_with_missing_folders(tmp_path: Path) -> None:
    text = tmp_path / "a" / "b" / "k.ptx"
    assert write_output(text, "é\n", "PTX") == text
    assert text.read_bytes() == "é\n".encode()
    blob = write_output(tmp_path / "k.cubin", b"\x00\x01")
    assert blob.read_bytes() == b"\x00\x01"
    assert (blob.stat().st_mode & 0o777) == 0o644
    write_output(text, "again")  # replaces
    assert text.read_text() == "again"
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["k.ptx"]


@pytest.mark.parametrize("case", ["file in the way", "folder", "no permission"])
def test_a_path_that_cannot_be_written_names_itself(tmp_path: Path, case: str) -> None:
    (tmp_path / "afile").write_text("x")
    path, reason = {
        "file in the way": (tmp_path / "afile" / "sub" / "k.ptx",
                            f"'{tmp_path / 'afile'}' is a file, not a folder"),
        "folder": (tmp_path, "it is a folder"),
        "no permission": (tmp_path / "locked" / "k.ptx", "Permission denied"),
    }[case]
    if case == "no permission":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        (tmp_path / "locked").mkdir(mode=0o500)
    with pytest.raises(ArgumentError, match="cannot write the PTX") as info:
        write_output(path, "text", "PTX")
    assert str(path) in str(info.value) and reason in str(info.value)
    assert info.value.loc.file == str(path)  # the error is the output path's
    with pytest.raises(ArgumentError):
        check_writable(path, "PTX")
    assert (tmp_path / "afile").read_text() == "x"


def test_an_error_while_writing_leaves_the_old_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "page.html"
    path.write_text("old")

    def full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ArgumentError, match="No space left on device"):
        write_output(path, "new", "page")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_ptx_output_path_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.py"
    src.write_text(SAXPY)
    (tmp_path / "afile").write_text("x")
    args = [f"{src}:saxpy", "--arg", "x=64:f32", "--arg", "y=64:f32", "--grid", "64"]
    assert main(["ptx", *args, "-o", str(tmp_path / "afile" / "k.ptx")]) == 1
    err = capsys.readouterr().err
    assert "argument error: cannot write the PTX" in err and "Traceback" not in err
    assert err.startswith(f"tessera: {tmp_path / 'afile' / 'k.ptx'}: ")  # not the kernel's
    assert main(["ptx", *args, "-o", str(tmp_path / "new" / "k.ptx")]) == 0
    assert ".entry saxpy" in (tmp_path / "new" / "k.ptx").read_text()


def _never(what: str) -> Any:
    """A stand-in for work that must not start before the output path is checked."""
    def run(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{what} before the output path was checked")
    return run


def test_conformance_refuses_a_report_path_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.conformance import runner

    monkeypatch.setattr(runner, "run", _never("the suite ran"))
    (tmp_path / "afile").write_text("x")
    for flag in ("--report", "--junit"):
        rc = main(["conformance", "-k", "numerics.ties", flag,
                   str(tmp_path / "afile" / "out")])
        err = capsys.readouterr().err
        assert rc == 1 and "cannot write the" in err and "Traceback" not in err


def test_explain_refuses_a_page_path_before_the_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.explain import collect

    monkeypatch.setattr(collect, "explain", _never("explained"))
    src = tmp_path / "k.py"
    src.write_text(SAXPY)
    (tmp_path / "afile").write_text("x")
    rc = main(["explain", f"{src}:saxpy", "--arg", "x=64:f32", "--arg", "y=64:f32",
               "--html", str(tmp_path / "afile" / "page.html")])
    err = capsys.readouterr().err
    assert rc == 1 and "cannot write the page" in err and "Traceback" not in err
