"""Exact-text goldens of the PTX emitted for small example kernels, and the
``tessera ptx`` command. Set ``TESSERA_UPDATE_GOLDENS=1`` to rewrite the goldens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tessera.cli import main
from tessera.frontend.kernel.backends.compile import compile_kernel
from tests.lower.test_lowering import example

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ptx"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.ptx"
    if os.environ.get("TESSERA_UPDATE_GOLDENS"):
        path.write_text(text)
    assert text == path.read_text(), f"PTX of {name} changed; review and regenerate"


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_saxpy_golden(target: str) -> None:
    x = np.zeros(1000, np.float32)
    compiled = compile_kernel(example("saxpy").saxpy, x, x.copy(), 2.5, target=target)
    check_golden(f"lowered_saxpy_{target}", compiled.ptx)


def test_row_softmax_golden() -> None:
    x = np.zeros((4, 64), np.float32)
    compiled = compile_kernel(example("row_softmax").row_softmax, x, x.copy(), target="sm_80",
                              tile_shape=(1,))
    check_golden("lowered_row_softmax_sm_80", compiled.ptx)


def test_cli_ptx_writes_ptx_and_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gemm.ptx"
    path = Path(__file__).resolve().parents[2] / "examples" / "kernels" / "gemm.py"
    rc = main(["ptx", f"{path}:gemm", "--target", "sm_90a", "--arg", "A=128x64:bf16",
               "--arg", "B=64x128:bf16", "--arg", "C=128x128:f32", "--tile-shape", "64,64,64",
               "-o", str(out), "--stats"])
    assert rc == 0
    assert "wgmma.mma_async" in out.read_text()
    err = capsys.readouterr().err
    assert "gemm sm_90a:" in err and "registers" in err and "0 bytes spill stores" in err


def test_cli_ptx_reports_user_errors(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "kernels" / "saxpy.py"
    assert main(["ptx", f"{path}:saxpy", "--target", "sm_70", "--arg", "x=8:f32",
                 "--arg", "y=8:f32", "--const", "alpha=1.0"]) == 1
    assert "unknown PTX target 'sm_70'" in capsys.readouterr().err


def test_inspect_ir_target_stage(capsys: pytest.CaptureFixture[str]) -> None:
    saxpy = example("saxpy").saxpy
    x = np.zeros(8, np.float32)
    text = saxpy.inspect_ir("target", x, x.copy(), 2.0, target="sm_80")
    assert text.startswith("module @saxpy {\n  ptx.kernel @saxpy(") and 'target = "sm_80"' in text
    path = Path(__file__).resolve().parents[2] / "examples" / "kernels" / "saxpy.py"
    assert main(["ir", f"{path}:saxpy", "--stage", "target", "--arg", "x=8:f32", "--arg",
                 "y=8:f32", "--const", "alpha=2.0"]) == 0
    assert 'target = "sm_90a"' in capsys.readouterr().out


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_masked_saxpy_golden(target: str) -> None:
    """Guarded loads and stores of a ragged last tile (tests/lower/masked_kernels.py)."""
    from tests.lower.masked_kernels import saxpy_edges

    x = np.zeros(100, np.float32)
    compiled = compile_kernel(saxpy_edges, x, x.copy(), 2.5, target=target, grid=2)
    check_golden(f"lowered_saxpy_edges_{target}", compiled.ptx)
