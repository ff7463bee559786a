"""The ``tessera`` command line: help, ir, run, opt, passes, and error reporting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tessera.cli import main

PROGRAM = '''
import numpy as np
import tessera as ts

@ts.jit
def model(x: ts.Tensor["B", "D", ts.f32], w: ts.Tensor["D", "H", ts.bf16 @ts.accum(ts.f32)]):
    return ts.relu(ts.matmul(x, w))

def untyped(x):
    return x * 2.0

if __name__ == "__main__":
    print("result", float(ts.sum(model(np.ones((2, 3), np.float32), np.ones((3, 4))))))
'''


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera", *args], capture_output=True,
                          text=True, timeout=120)


def test_help() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("ir", "run", "opt", "passes"):
        assert command in out.stdout


def test_ir_with_example_arguments(program: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ir", f"{program}:model", "--stage", "graph", "--arg", "x=2x3:f32",
                 "--arg", "w=3x4:bf16@accum(f32)"]) == 0
    text = capsys.readouterr().out
    assert "graph.func @model(%x: tensor<2x3xf32>, %w: tensor<3x4xbf16@accum(f32)>)" in text
    assert "graph.matmul" in text and "graph.relu" in text


def test_ir_errors_are_one_line_messages(program: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ir", f"{program}:untyped"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tessera: ") and "example arguments" in err
    assert "Traceback" not in err
    assert main(["ir", f"{program}:missing"]) == 1
    assert "defines no 'missing'" in capsys.readouterr().err
    assert main(["ir", f"{program}:model", "--stage", "tile", "--arg", "x=2x3:f32",
                 "--arg", "w=3x4:bf16"]) == 1
    assert "'tile' stage" in capsys.readouterr().err


def test_run(program: Path) -> None:
    out = run_cli("run", str(program))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "result 24.0"


def test_opt_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = Path(__file__).parent / "golden" / "passes"
    src = golden / "cse_duplicates.before.tir"
    assert main(["opt", str(src), "--passes", "cse"]) == 0
    assert capsys.readouterr().out == (golden / "cse_duplicates.after.tir").read_text()
    bad = tmp_path / "bad.tir"
    bad.write_text("module @m {\n  graph.func @f() -> () {\n    graph.zap() : () -> ()\n")
    assert main(["opt", str(bad)]) == 1
    assert "bad.tir:3" in capsys.readouterr().err
    assert main(["passes"]) == 0
    listed = capsys.readouterr().out
    assert "cse" in listed and "dce" in listed and "canonicalize" in listed
