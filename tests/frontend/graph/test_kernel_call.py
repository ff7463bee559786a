"""A ``@ts.kernel`` called inside ``@ts.jit``: one ``graph.kernel_call`` that runs on
the graph interpreter (the tile simulator on copies of its operands) and in the
generated host program (``backend="tile"``), with the same bits.

The references are NumPy float32 arithmetic: each kernel below does one f32 operation
per step, which NumPy rounds the same way.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest

import tessera as ts

HERE = os.path.basename(__file__)
F32 = np.float32
BACKENDS = ("interp", "tile")


@ts.kernel
def scale(x: ts.Tensor["M", "N", ts.f32], s: ts.f32) -> ts.Tensor["M", "N", ts.f32]:
    return x[tile_m:tile_m + BM, tile_n:tile_n + BN] * s


@ts.kernel
def saxpy(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32], alpha: ts.f32):
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
    return y


@ts.kernel
def split_signs(x: ts.Tensor["n", ts.f32], lo: ts.Tensor["n", ts.f32],
                hi: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    lo[i] = ts.tile.minimum(x[i], 0.0)
    hi[i] = ts.tile.maximum(x[i], 0.0)


@ts.kernel
def total(x: ts.Tensor["n", ts.f32]) -> ts.f32:
    return ts.tile.reduce_sum(x[0:n])


def _line_of(fn: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def _bits(x: Any) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_returning_a_tile_is_one_op_between_graph_ops(backend: str) -> None:
    def f(x):
        return scale(x * 2.0, 3.0, tile_shape=(2, 4)) + 1.0

    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    got = ts.jit(f, backend=backend)(x)
    assert got.shape == (4, 8) and got.element == ts.f32
    assert _bits(got) == _bits((x * F32(2)) * F32(3) + F32(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_writing_an_argument_gives_its_new_contents_on_a_copy(backend: str) -> None:
    def f(x, y):
        return saxpy(x, y, 2.5), y

    x = np.arange(8, dtype=F32)
    y = np.linspace(-1, 1, 8).astype(F32)
    y_before = y.copy()
    new_y, old_y = ts.jit(f, backend=backend)(x, y)
    assert _bits(new_y) == _bits(F32(2.5) * x + y_before)
    assert _bits(old_y) == _bits(y_before) and _bits(y) == _bits(y_before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_shape_gives_fresh_outputs(backend: str) -> None:
    def f(x):
        lo, hi = split_signs(x, out_shape=[ts.Tensor[6, ts.f32], x])
        return lo * hi, hi

    x = np.array([-2, -1, 0, 1, 2, 3], F32)
    prod, hi = ts.jit(f, backend=backend)(x)
    assert _bits(hi) == _bits(np.maximum(x, 0))
    assert _bits(prod) == _bits(np.minimum(x, 0) * np.maximum(x, 0))  # -0.0 where x < 0
    # one spec (not a list): the last parameter, bare; 'lo' is written on a copy
    hi_only = ts.jit(lambda v: split_signs(v, v + 1.0, out_shape=ts.Tensor[6, ts.f32]),
                     backend=backend)(x)
    assert _bits(hi_only) == _bits(np.maximum(x, 0))
    returned = ts.jit(lambda v: saxpy(v, v * 0.0, 1.0), backend=backend)(x)
    assert _bits(returned) == _bits(x)  # a returned parameter: its new contents


def test_a_traced_rank_0_value_is_a_runtime_scalar() -> None:
    @ts.jit
    def f(x):
        return scale(x, ts.max(x), tile_shape=(2, 2))

    x = np.arange(16, dtype=F32).reshape(4, 4)
    assert _bits(f(x)) == _bits(x * F32(15))
    assert len(f.cache) == 1  # the scalar is an operand, not a specialisation


def test_launch_keywords_specialise_the_call() -> None:
    def f(x, y):
        return saxpy[4](x, y, 1.0)  # 4 tiles: the first 4 elements only

    x, y = np.ones(8, F32), np.zeros(8, F32)
    for backend in BACKENDS:
        assert _bits(ts.jit(f, backend=backend)(x, y)) == _bits(np.array([1] * 4 + [0] * 4,
                                                                        F32))
    text = ts.inspect_ir(f, "graph", x, y)
    assert 'graph.kernel_call(%x, %y, %0) {kernel = "saxpy", grid = [4]' in text


def test_the_host_program_launches_the_kernels_own_tile_ir_unfused() -> None:
    def f(x):
        return scale(x + 1.0, 2.0, tile_shape=(2, 4)) * 3.0

    x = np.ones((4, 8), F32)
    lowered = ts.jit(f).lower(x)
    names = [k.name for k in lowered.kernels]
    assert len(names) == 4 and names[2] == "f_k2_scale"  # +1.0, the scalar, scale, *3.0
    own = scale.compile(np.ones((4, 8), F32), 2.0, tile_shape=(2, 4)).functions["scale"]
    launched = lowered.tile.module.functions["f_k2_scale"]
    assert str(launched).split("\n", 1)[1] == str(own).split("\n", 1)[1]  # body and all
    assert launched.attrs == own.attrs


def test_a_transposed_operand_is_computed_first() -> None:
    def f(x):
        return scale(x.T, 2.0, tile_shape=(4, 2))

    x = np.arange(8, dtype=F32).reshape(2, 4)
    np.testing.assert_array_equal(np.asarray(ts.jit(f)(x)), x.T * 2)
    schedule = ts.inspect_ir(f, "schedule", x)
    assert schedule.count("schedule.kernel(") == 3  # transpose, scalar, the call


def test_a_kernel_on_a_concrete_array_inside_jit_is_a_constant_operand() -> None:
    data = np.arange(4, dtype=F32)

    @ts.jit
    def f(a):
        return saxpy(data, a, 2.0)

    for k in range(2):  # runs on every call, not once at trace time
        got = f(np.full(4, k, F32))
        assert _bits(got) == _bits(F32(2) * data + F32(k))
    assert _bits(data) == _bits(np.arange(4, dtype=F32))


def test_fast_mode_runs_the_kernel_in_the_simulators_fast_mode() -> None:
    x = np.random.default_rng(1).standard_normal((4, 4)).astype(F32)
    got = ts.jit(lambda v: scale(v, 0.5, tile_shape=(2, 2)), mode="fast")(x)
    assert _bits(got) == _bits(x * F32(0.5))


# ------------------------------------------------------------------------------ errors
def test_a_wrong_format_names_the_call_line() -> None:
    def f(x):
        return saxpy(ts.cast(x, ts.bf16), x, 1.0)

    with pytest.raises(ts.DTypeError) as info:
        ts.jit(f)(np.ones(4, F32))
    assert f"{HERE}:{_line_of(f, 'saxpy(')}" in str(info.value)
    assert "argument 'x' is bf16, the kernel takes f32" in str(info.value)


def test_wrong_shapes_name_the_call_line() -> None:
    def f(x, y):
        return saxpy(x, y, 1.0)

    with pytest.raises(ts.DimBindingError) as info:
        ts.jit(f)(np.ones(4, F32), np.ones(5, F32))
    assert f"{HERE}:{_line_of(f, 'saxpy(')}" in str(info.value)


def test_a_sanitizer_report_names_the_call_line() -> None:
    def f(x):
        return scale(x, 1.0, tile_shape=(4, 4))  # 6 rows: the second tile reads past

    with pytest.raises(ts.InterpretError) as info:
        ts.jit(f)(np.ones((6, 4), F32))
    text = str(info.value)
    assert f"{HERE}:{_line_of(f, 'scale(')}" in text and "kernel 'scale'" in text
    assert "outside [0, 6)" in text


def test_a_returned_scalar_and_a_written_alias_are_refused() -> None:
    with pytest.raises(ts.UnsupportedError, match="returns a scalar"):
        ts.jit(lambda v: total(v))(np.ones(4, F32))
    with pytest.raises(ts.UnsupportedError, match="passed as 'x' and 'y'"):
        ts.jit(lambda v: saxpy(v, v, 1.0))(np.ones(4, F32))


def test_out_shape_needs_static_dims() -> None:
    with pytest.raises(ts.ArgumentError, match="out_shape"):
        ts.jit(lambda v: split_signs(v, out_shape=ts.Tensor["n", ts.f32]))(np.ones(3, F32))
    with pytest.raises(ts.ArgumentError, match="out_shape takes"):
        ts.jit(lambda v: split_signs(v, out_shape=(3,)))(np.ones(3, F32))


def test_capture_graph_warns_once_on_backends_without_cuda_graphs() -> None:
    with pytest.warns(ts.CaptureGraphWarning, match="no effect on backend 'tile'") as seen:
        for _ in range(2):  # one line, one warning
            ts.jit(lambda v: v * 2.0, capture_graph=True, backend="tile")
    assert len(seen) == 1 and seen[0].filename.endswith(HERE)


def test_a_kernel_call_in_a_placed_function_is_refused() -> None:
    from tessera import dist

    mesh = dist.mesh(axes=("tp",), shape=(2,))
    x = dist.tensor(shape=(8,), layout=dist.ShardSpec(("row",), ("tp",)), mesh=mesh,
                    dtype="f32", data=np.ones(8, F32))
    with pytest.raises(ts.UnsupportedError, match="distributed \\(placed\\) arguments"):
        ts.jit(lambda v: saxpy(v * 1.0, v * 2.0, 1.0))(x)
