"""A kernel some tile of which is sure to run past a tensor with the call's shapes is
refused before any PTX exists (``compile_kernel``, every launch backend that compiles,
``tessera ptx``), at the access's line: on a GPU it would read or write another
allocation, where the interpreters report it. What a guard or a mask keeps inside
compiles."""

from __future__ import annotations

import inspect
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.cli import main
from tessera.conformance.kernels.gemm import gemm
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.frontend.kernel.errors import KernelBoundsError
from tests.lower import masked_kernels as mk

TARGETS = ("sm_80", "sm_90a")


@ts.kernel
def shifted(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    y[i] = x[i + 1]


@ts.kernel
def guarded(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i + 1 < N:
        y[i] = x[i + 1]


def _line(fn: object, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("target", TARGETS)
def test_a_gemm_whose_tile_does_not_divide_m_is_refused(target: str) -> None:
    a = np.zeros((100, 64), ml_dtypes.bfloat16)
    b = np.zeros((64, 64), ml_dtypes.bfloat16)
    c = np.zeros((100, 64), np.float32)
    for run in (lambda: compile_kernel(gemm, a, b, c, target=target, tile_shape=(64, 64, 32)),
                lambda: ts.launch(gemm, None, (a, b, c), backend="target", target=target,
                                  tile_shape=(64, 64, 32))):
        with pytest.raises(KernelBoundsError, match=r"A\[64:128\] along axis 0, which has "
                                                    r"100 elements \(and 1 more\)") as info:
            run()
        assert info.value.loc.line == _line(gemm.fn, "cp_async(smem_a")
        assert "mask=" in (info.value.hint or "")
    assert not c.any()  # nothing ran
    compile_kernel(gemm, a[:64], b, c[:64], target=target, tile_shape=(64, 64, 32))


@pytest.mark.parametrize("target", TARGETS)
def test_a_shifted_read_is_refused_and_its_guard_compiles(target: str) -> None:
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(KernelBoundsError, match=r"x\[8:9\] along axis 0") as info:
        compile_kernel(shifted, x, y, grid=8, target=target)
    assert info.value.loc.file == __file__
    assert info.value.loc.line == _line(shifted.fn, "x[i + 1]")
    compile_kernel(guarded, x, y, grid=8, target=target)
    ts.launch(guarded, 8, (x, y), backend="target", target=target)
    assert np.array_equal(y, np.r_[x[1:], 0])


@pytest.mark.parametrize("target", TARGETS)
def test_masked_edges_compile(target: str) -> None:
    x, y = np.ones(40, np.float32), np.ones(40, np.float32)
    compile_kernel(mk.saxpy_edges, x, y, np.float32(2), grid=3, target=target)


def test_the_ptx_command_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    src, out = tmp_path / "kernels.py", tmp_path / "k.ptx"
    src.write_text("import tessera as ts\n\n\n@ts.kernel\n"
                   "def shifted(x: ts.Tensor['N', ts.f32], y: ts.Tensor['N', ts.f32]):\n"
                   "    i = ts.tile.linear_id()\n    y[i] = x[i + 1]\n")
    assert main(["ptx", f"{src}:shifted", "--arg", "x=8:f32", "--arg", "y=8:f32",
                 "--grid", "8", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tessera: {src}:7: out of bounds: kernel 'shifted' is sure to")
    assert not out.exists()
