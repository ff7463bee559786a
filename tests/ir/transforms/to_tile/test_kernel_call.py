"""A ``graph.kernel_call`` in the host program: its kernel launched as it is, after a
generated copy of each operand it writes in place, with a buffer even for a result
nobody reads; custom calls (``custom_vjp``) are inlined, so a kernel inside one is
launched too."""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera.interp.tile.program import run_program


@ts.kernel
def bump(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    y[i] = y[i] + x[i]
    x[i] = x[i] * 2.0


@ts.custom_vjp
def bumped(x, y):
    return bump(x, y)[1]


bumped.defvjp(lambda x, y: (bump(x, y)[1], None), lambda saved, g: (g, g))


def test_written_operands_are_copied_and_unread_results_get_buffers() -> None:
    def f(x, y):
        return bump(x, y)[1] + x  # x's new contents are never read

    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    program = ts.jit(f).lower(x, y).tile
    host = program.host_text()
    assert "%f_k0_scratch = global tensor<4xf32>" in host  # x's new contents
    assert "launch @f_k0_copy grid (4,) (%x, %f_k0_scratch)" in host
    assert "launch @f_k0_copy_1 grid (4,) (%y, %k0_0)" in host  # y's: the result
    assert "launch @f_k0_bump grid (4,) (%f_k0_scratch, %k0_0)" in host
    assert host.index("@f_k0_copy_1 grid") < host.index("@f_k0_bump grid")
    (got,) = run_program(program, [x, y])
    np.testing.assert_array_equal(got, (y + x) + x)
    np.testing.assert_array_equal(x, np.arange(4))  # the arguments are untouched
    np.testing.assert_array_equal(y, np.ones(4))


def test_a_kernel_inside_a_custom_vjp_is_launched() -> None:
    def f(x, y):
        return bumped(x * 1.0, y) * 3.0

    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    lowered = ts.jit(f).lower(x, y)
    assert any(k.name.endswith("_bump") for k in lowered.kernels)
    np.testing.assert_array_equal(np.asarray(lowered.run(x, y, backend="tile")),
                                  np.asarray(lowered.run(x, y, backend="interp")))
