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

@ts.jit
def wavy(x: ts.Tensor["B", "D", ts.f32]):
    return ts.sin(x * 2.0)

@ts.jit
def smooth(x: ts.Tensor["B", "D", ts.f32]):
    return ts.pow(x, 3.0)

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
    # pow computes NumPy's float64 pow, which the Target lowering refuses
    assert main(["ir", f"{program}:smooth", "--stage", "target", "--arg", "x=2x3:f32"]) == 1
    line = PROGRAM.splitlines().index("    return ts.pow(x, 3.0)") + 1
    assert f"prog.py:{line}: unsupported: graph.pow" in capsys.readouterr().err
    # the Tile IR of sin is not generated: the op and its line, in one line
    assert main(["ir", f"{program}:wavy", "--stage", "tile", "--arg", "x=2x3:f32"]) == 1
    err = capsys.readouterr().err
    line = PROGRAM.splitlines().index("    return ts.sin(x * 2.0)") + 1
    assert f"prog.py:{line}: unsupported: graph.sin" in err and "Traceback" not in err


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


# ------------------------------------------- errors name the user's file, not the script
KERNEL = '''import tessera as ts

@ts.kernel
def saxpy(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32], alpha: ts.f32):
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
    return y
'''

STATIC = '''import tessera as ts

@ts.jit
def half_static(x: ts.Tensor[2, 3, ts.f32], w):
    return x @ w
'''


def script(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``tessera`` console script (where errors used to be located)."""
    exe = Path(sys.executable).parent / "tessera"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_errors_through_the_installed_script_name_the_users_file(program: Path) -> None:
    out = script("ir", f"{program}:untyped")
    assert out.returncode == 1
    assert "bin/tessera" not in out.stderr and "Traceback" not in out.stderr
    line = PROGRAM.splitlines().index("def untyped(x):") + 1
    assert out.stderr.startswith(f"tessera: {program}:{line}: argument error: "), out.stderr
    assert "x (no annotation)  ->  --arg x=SHAPE:FORMAT or --const x=VALUE" in out.stderr
    missing = script("ir", f"{program}:nothing")
    assert missing.stderr.startswith(f"tessera: {program}: argument error: prog.py defines "
                                     "no 'nothing'"), missing.stderr


def test_ptx_without_arguments_lists_the_parameters(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kern.py"
    path.write_text(KERNEL)
    assert main(["ptx", f"{path}:saxpy"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tessera: {path}:4: argument error: the kernel saxpy needs example "
                          "arguments for 3 parameter(s):"), err
    for usage in ('x: Tensor["n", f32]  ->  --arg x=<n>:f32',
                  'y: Tensor["n", f32]  ->  --arg y=<n>:f32',
                  "alpha: f32 (a scalar)  ->  --const alpha=VALUE"):
        assert usage in err
    assert "hint: pass each array as --arg NAME=SHAPE:FORMAT" in err
    # what the message asks for is enough
    assert main(["ptx", f"{path}:saxpy", "--arg", "x=64:f32", "--arg", "y=64:f32",
                 "--const", "alpha=2.0"]) == 0
    assert ".entry saxpy" in capsys.readouterr().out
    # naming a parameter that does not exist lists the real ones
    assert main(["ptx", f"{path}:saxpy", "--arg", "z=64:f32"]) == 1
    assert "has no parameter(s) z" in capsys.readouterr().err


def test_ptx_mode_fast_emits_approximate_exp(capsys: pytest.CaptureFixture[str]) -> None:
    softmax = f"{Path(__file__).parents[1] / 'examples/kernels/row_softmax.py'}:row_softmax"
    args = ["--target", "sm_80", "--arg", "x=16x64:f32", "--arg", "y=16x64:f32",
            "--tile-shape", "8"]
    assert main(["ptx", softmax, *args, "--mode", "fast"]) == 0
    fast = capsys.readouterr().out
    assert "ex2.approx.ftz.f32" in fast and ".f64" not in fast
    assert main(["ptx", softmax, *args]) == 0
    assert "mul.rn.f64" in capsys.readouterr().out


def test_ir_fills_statically_annotated_parameters(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "static.py"
    path.write_text(STATIC)
    assert main(["ir", f"{path}:half_static"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:4:" in err and "1 parameter(s)" in err and "w (no annotation)" in err
    assert main(["ir", f"{path}:half_static", "--arg", "w=3x5:f32"]) == 0
    assert "%x: tensor<2x3xf32>, %w: tensor<3x5xf32>" in capsys.readouterr().out


def test_broken_user_files_are_reported_at_their_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import tessera as ts\n\ndef f(x)\n    return x\n")
    assert main(["ir", f"{bad}:f"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tessera: {bad}:3: argument error: ") and "not valid Python" in err
    raising = tmp_path / "raising.py"
    raising.write_text("x = 1\nraise ValueError('no config')\n")
    assert main(["ptx", f"{raising}:f"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tessera: {raising}:2: argument error: ")
    assert "ValueError: no config" in err and "Traceback" not in err


def test_opt_errors_name_the_ir_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = Path(__file__).parent / "golden" / "passes" / "cse_duplicates.before.tir"
    assert main(["opt", str(src), "--passes", "nosuchpass"]) == 1
    assert capsys.readouterr().err.startswith(f"tessera: {src}: stage error: unknown pass")
    gone = tmp_path / "gone.tir"
    assert main(["opt", str(gone)]) == 1
    assert capsys.readouterr().err.startswith(f"tessera: {gone}: argument error: no such file")
    out = run_cli("opt", str(gone))  # python -m tessera: no traceback either
    assert out.returncode == 1 and "Traceback" not in out.stderr and str(gone) in out.stderr


def test_target_stage_and_ptx_of_a_graph_function(program: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--arg", "x=64x48:f32"]
    assert main(["ir", f"{program}:untyped", "--stage", "target", "--target", "sm_80",
                 *args]) == 0
    text = capsys.readouterr().out
    assert "ptx.kernel @untyped_k0" in text and 'target = "sm_80"' in text
    assert "launch @untyped_k0" in text
    out = tmp_path / "untyped.ptx"
    assert main(["ptx", f"{program}:untyped", *args, "-o", str(out), "--stats"]) == 0
    ptx = out.read_text()
    assert ptx.startswith("// kernel untyped_k0\n") and ".target sm_90a" in ptx
    assert ".visible .entry untyped_k0(" in ptx
    assert "untyped_k0 sm_90a:" in capsys.readouterr().err
    assert main(["ptx", f"{program}:untyped", *args, "--grid", "4"]) == 1
    assert "a kernel's option" in capsys.readouterr().err
    # pow is refused at its line, as the target stage refuses it
    assert main(["ptx", f"{program}:smooth", "--arg", "x=2x3:f32"]) == 1
    line = PROGRAM.splitlines().index("    return ts.pow(x, 3.0)") + 1
    assert f"prog.py:{line}: unsupported: graph.pow" in capsys.readouterr().err


def test_run_shows_the_programs_error_as_python_does(tmp_path: Path) -> None:
    """A program's own error: its traceback from its first frame (no frame of the
    command's or of runpy), a syntax error as its line; exit status 1."""
    raising = tmp_path / "raising.py"
    raising.write_text("def f():\n    raise KeyError('mine')\n\nf()\n")
    out = run_cli("run", str(raising))
    assert out.returncode == 1
    assert out.stderr.startswith("Traceback (most recent call last):\n  File "
                                 f'"{raising}", line 4, in <module>')
    assert "cli.py" not in out.stderr and "runpy" not in out.stderr
    assert out.stderr.rstrip().endswith("KeyError: 'mine'")
    broken = tmp_path / "broken.py"
    broken.write_text("x = (\n")
    out = run_cli("run", str(broken))
    assert out.returncode == 1 and out.stderr.startswith(f'  File "{broken}", line 1')
    assert "SyntaxError" in out.stderr and "Traceback" not in out.stderr


def test_opt_refuses_a_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = tmp_path / "module.tir"
    blob.write_bytes(b"\x00\xff")
    assert main(["opt", str(blob)]) == 1
    err = capsys.readouterr().err
    assert f"'{blob}' is not text (byte 1 is not UTF-8): the IR text file was expected" in err


def test_ir_of_what_is_not_a_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    src = tmp_path / "names.py"
    src.write_text("import tessera as ts\nX = 3\n")
    for name, said in (("ts", "got the module tessera"), ("X", "got int 3")):
        assert main(["ir", f"{src}:{name}"]) == 1
        err = capsys.readouterr().err
        assert "argument error: inspect_ir needs a" in err and said in err
        assert "@ts.jit or @ts.kernel" in err
