"""The @ts.kernel front end: Python control flow and variables to Tile IR, free names,
batch dims, broadcasting and typing rules, inlined functions, errors with file:line."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.errors import DimBindingError, StageError, TileContextError

BIG = 1000.0
RNG = np.random.default_rng(7)


def sub_square(x):
    return x * x


def sub_clamp(x, lo=0.0, hi=1.0):
    """A called function with defaults and its own control flow."""
    y = x
    if y < lo:
        y = lo
    elif y > hi:
        y = hi
    return y


def sub_sum_range(x, start, stop):
    s = 0.0
    for i in ts.tile.range(start, stop):
        s += x[i]
    return s


@ts.kernel
def if_elif_else(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    v = x[i]
    if v < -1.0:
        r = -1.0
    elif v < 1.0:
        r = v * 2.0
    else:
        r = v + BIG
    out[i] = r


def test_if_elif_else_merges_values() -> None:
    x = np.linspace(-3, 3, 25).astype(np.float32)
    out = np.zeros_like(x)
    if_elif_else(x, out)
    ref = np.where(x < -1, -1.0, np.where(x < 1, x * 2, x + 1000.0)).astype(np.float32)
    assert np.array_equal(out, ref)
    text = if_elif_else.inspect_ir("tile")
    assert text.count("tile.if") == 2 and "tile.yield" in text


@ts.kernel
def collatz(n0: ts.Tensor["N", ts.int64], steps: ts.Tensor["N", ts.int64]):
    i = ts.tile.linear_id()
    n = n0[i]
    count = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        count += 1
    steps[i] = count


def _collatz(n: int) -> int:
    c = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        c += 1
    return c


def test_while_with_tile_dependent_trip_counts() -> None:
    n0 = np.arange(1, 40, dtype=np.int64)
    steps = np.zeros_like(n0)
    collatz(n0, steps)
    assert steps.tolist() == [_collatz(int(n)) for n in n0]


@ts.kernel
def loops_and_swaps(out: ts.Tensor["N", ts.f32]):
    a, b = 1.0, 2.0
    total = 0
    for k in range(4):
        a, b = b, a
        total += k
    for k in ts.tile.range(10, 0, -3):
        total += k
    for c in (1.0, 2.0, 3.0):  # unrolled
        a = a + c
    out[ts.tile.linear_id()] = a * 100.0 + b * 10.0 + total


def test_range_forms_tuple_swap_and_unrolled_loop() -> None:
    out = np.zeros(3, np.float32)
    loops_and_swaps(out)
    # a, b swapped 4 times -> (1, 2); total = 0+1+2+3 + 10+7+4+1 = 28; a = 1 + 6
    assert np.array_equal(out, np.full(3, 700.0 + 20.0 + 28.0, np.float32))


@ts.kernel
def uses_subroutines(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = sub_clamp(sub_square(x[i]), hi=2.0) + sub_sum_range(x, 0, 2)


def test_called_functions_are_inlined_with_defaults_and_control_flow() -> None:
    x = np.array([0.5, -2.0, 1.2, 3.0], np.float32)
    out = np.zeros_like(x)
    uses_subroutines(x, out)
    ref = np.clip(x * x, 0, 2) + (x[0] + x[1])
    assert np.allclose(out, ref, rtol=0, atol=1e-6)


def k_slice_of(A, B):
    """This group's BK slice of ``A @ B``: the only use of ``tile_k`` is here."""
    return ts.tile.mma(A[tile_m:tile_m + BM, tile_k:tile_k + BK],
                       B[tile_k:tile_k + BK, tile_n:tile_n + BN])


@ts.kernel
def split_k_by_helper(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                      C: ts.Tensor["M", "N", ts.f32]):
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.cast(k_slice_of(A, B), ts.f32)


def test_tile_k_used_by_an_inlined_function_sizes_the_default_grid() -> None:
    """The default grid has a K axis where ``tile_k`` is used, also inside a called
    function (it had one group per output tile, and the product lost all but the first
    K slice). The slices' products, each rounded to f32, are added in group order."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 16)).astype(np.float32)
    c = np.zeros((32, 16), np.float32)
    split_k_by_helper(a, b, c, tile_shape=(16, 16, 16))
    want = np.zeros_like(c)
    for k in range(0, 48, 16):
        part = a[:, k:k + 16].astype(np.float64) @ b[k:k + 16].astype(np.float64)
        want = (want + part.astype(np.float32)).astype(np.float32)
    assert c.tobytes() == want.tobytes()


@ts.kernel
def constants_fold(out: ts.Tensor["N", ts.f32], flag: bool = True, scale: int = 3):
    c = math.sqrt(16.0) * scale + min(2, 5) + max(1, 7)
    if flag:
        c = c + float('inf') * 0.0 if False else c + 1.0
    out[ts.tile.linear_id()] = c


def test_python_constants_and_flags_are_folded() -> None:
    out = np.zeros(2, np.float32)
    constants_fold(out)
    assert np.array_equal(out, np.full(2, 4 * 3 + 2 + 7 + 1.0, np.float32))
    text = constants_fold.inspect_ir("tile")
    assert "tile.if" not in text and "value = 22.0" in text
    constants_fold(out, flag=False, scale=1)
    assert np.array_equal(out, np.full(2, 4.0 + 2 + 7, np.float32))
    assert len(constants_fold.modules) == 2  # one specialisation per constant set


@ts.kernel
def scalar_minmax(out: ts.Tensor["N", ts.int64]):
    i = ts.tile.linear_id()
    out[i] = min(i * 3, N) - max(i - 2, 0) + abs(i - 4)


def test_min_max_abs_on_kernel_scalars() -> None:
    out = np.zeros(8, np.int64)
    scalar_minmax(out)
    i = np.arange(8)
    assert np.array_equal(out, np.minimum(i * 3, 8) - np.maximum(i - 2, 0) + np.abs(i - 4))


@ts.kernel
def row_scale(x: ts.Tensor["R", "C", ts.f32], s: ts.Tensor["R", ts.f32],
              out: ts.Tensor["R", "C", ts.f32]):
    tile = x[0:R]
    alpha = s[0:R]
    out[0:R] = alpha * tile + tile / alpha[:, None] + tile * alpha[None, :] * 0.0


def test_row_broadcast_rule_and_new_axes() -> None:
    x = RNG.standard_normal((8, 8)).astype(np.float32)  # square: the row rule decides
    s = RNG.uniform(1, 2, 8).astype(np.float32)
    out = np.zeros_like(x)
    row_scale(x, s, out, grid=1)
    assert np.allclose(out, s[:, None] * x + x / s[:, None], rtol=1e-6)


@ts.kernel
def typing_rules(a: ts.Tensor["N", ts.bf16], i: ts.Tensor["N", ts.int64],
                 out_b: ts.Tensor["N", ts.bf16], out_f: ts.Tensor["N", ts.f32]):
    k = ts.tile.linear_id()
    x = a[k] * 3.0  # a weak constant keeps bf16
    out_b[k] = x
    out_f[k] = i[k] / 2 + (i[k] // 3) * 1.0 + (-7 % 3)


def test_weak_constants_and_python_division() -> None:
    a = np.array([1.0, 1.5, 2.5, 0.1], ml_dtypes.bfloat16)
    i = np.array([1, 2, 7, -5], np.int64)
    ob, of = np.zeros_like(a), np.zeros(4, np.float32)
    typing_rules(a, i, ob, of)
    assert np.array_equal(ob, (a.astype(np.float32) * 3).astype(ml_dtypes.bfloat16))
    assert np.array_equal(of, (i / 2 + (i // 3) + (-7 % 3)).astype(np.float32))
    assert "tensor<bf16>" in typing_rules.inspect_ir("tile")


@ts.kernel
def buffer_lists(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    bufs = [ts.tile.alloc_shared((4,), ts.f32), ts.tile.alloc_shared((4,), ts.f32)]
    stage = 0
    for k in ts.tile.range(0, N, 4):
        bufs[stage][0:4] = x[k:k + 4]
        out[k:k + 4] = bufs[stage] + bufs[0][0] * 0.0
        stage = 1 - stage


def test_lists_of_shared_buffers_indexed_by_a_loop_carried_stage() -> None:
    x = np.arange(16, dtype=np.float32)
    out = np.zeros_like(x)
    buffer_lists(x, out, grid=1)
    assert np.array_equal(out, x)
    assert "tile.select" in buffer_lists.inspect_ir("tile")


@ts.kernel
def batched(Q: ts.Tensor["B*H", "S", "D", ts.f32], out: ts.Tensor["B*H", "S", "D", ts.f32]):
    out[0:S] = Q[0:S] * 2.0 + ts.tile.group_id() * 0.0


def test_batch_dims_run_one_program_per_index() -> None:
    q = RNG.standard_normal((6, 4, 3)).astype(np.float32)
    out = np.zeros_like(q)
    batched(q, out, grid=1)  # group_id alone would size the grid by S
    assert np.array_equal(out, 2 * q)
    assert "gmem<[6]x4x3xf32>" in batched.inspect_ir("tile")


def test_dims_bind_consistently() -> None:
    with pytest.raises(DimBindingError):
        if_elif_else(np.zeros(4, np.float32), np.zeros(5, np.float32))


@ts.kernel
def undefined_name(x: ts.Tensor["N", ts.f32]):
    x[0] = 1.0
    x[1] = mystery + 1.0


@ts.kernel
def maybe_undefined(x: ts.Tensor["N", ts.f32]):
    if x[0] > 0.0:
        y = 1.0
    x[0] = y


@ts.kernel
def uses_break(x: ts.Tensor["N", ts.f32]):
    for _i in ts.tile.range(0, N):
        break


@ts.kernel
def early_return(x: ts.Tensor["N", ts.f32]):
    if x[0] > 0.0:
        return x
    x[0] = 1.0


@pytest.mark.parametrize("kernel, error, text, line", [
    (undefined_name, ts.tile.UndefinedNameError, "name 'mystery' is not defined",
     "mystery + 1.0"),
    (maybe_undefined, ts.tile.UndefinedNameError, "may be undefined", "x[0] = y"),
    (uses_break, ts.tile.KernelCompileError, "Break statements are not supported", "break"),
    (early_return, ts.tile.KernelCompileError, "last statement", "return x"),
])
def test_compile_errors_name_the_problem_and_line(kernel, error, text, line) -> None:
    with pytest.raises(error, match=text) as info:
        kernel(np.ones(4, np.float32))
    assert info.value.loc.file == __file__
    assert line in open(__file__).read().splitlines()[info.value.loc.line - 1]
    assert isinstance(info.value, ts.TesseraError)


def test_tile_api_outside_a_kernel_raises() -> None:
    with pytest.raises(TileContextError):
        ts.tile.linear_id()
    with pytest.raises(TileContextError):
        ts.tile.mma(np.ones((2, 2)), np.ones((2, 2)))


def test_kernel_objects_inspect_their_tile_ir() -> None:
    @ts.kernel
    def fresh(x: ts.Tensor["N", ts.f32]):
        x[ts.tile.linear_id()] += 1.0

    with pytest.raises(StageError, match="has not been launched"):
        fresh.inspect_ir("tile")
    text = fresh.inspect_ir("tile", np.zeros(4, np.float32))
    assert text == ts.inspect_ir(fresh, "tile")
    assert "tile.update(" in text and 'op = "add"' not in text  # add is the default
    with pytest.raises(StageError):
        fresh.inspect_ir("graph")
    x = np.zeros(4, np.float32)
    fresh[4](x)
    fresh(x, grid=(2,), group_size=2)
    assert np.array_equal(x, np.full(4, 2, np.float32))


def test_free_names_and_context_attributes() -> None:
    @ts.kernel
    def names(out: ts.Tensor["M", "N", ts.int64]):
        ctx = ts.tile.context()
        out[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.full(
            (BM, BN), ctx.tile_m * 1000 + tile_n + BK * 0 + ctx.BLOCK_K * 0 + ctx.N * 0,
            ts.int64)

    out = np.zeros((8, 12), np.int64)
    names(out, tile_shape=(4, 6, 2))  # default grid: (8/4, 12/6)
    ref = np.add.outer(np.repeat([0, 4000], 4), np.repeat([0, 6], 6))
    assert np.array_equal(out, ref)
    assert "grid = [2, 2]" in names.inspect_ir("tile")


def test_context_attribute_errors_list_the_known_names() -> None:
    @ts.kernel
    def bad(out: ts.Tensor["N", ts.f32]):
        ctx = ts.tile.context()
        out[0] = ctx.NOPE

    with pytest.raises(ts.tile.UndefinedNameError, match="BLOCK_M"):
        bad(np.zeros(2, np.float32))


def test_shared_memory_limit_is_checked() -> None:
    @ts.kernel
    def greedy(out: ts.Tensor["N", ts.f32]):
        buf = ts.tile.alloc_shared((256, 256), ts.f32)
        buf[0, 0] = 1.0

    with pytest.raises(ts.tile.KernelResourceError, match="262144 bytes"):
        greedy(np.zeros(2, np.float32))


def test_returned_tile_and_scalar() -> None:
    @ts.kernel
    def tiles(x: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
        return x[tile_m:tile_m + BM, tile_n:tile_n + BN] + 1.0

    @ts.kernel
    def first(x: ts.Tensor["N", ts.f32]) -> ts.f32:
        return x[ts.tile.linear_id()] * 2.0

    x = RNG.standard_normal((8, 6)).astype(np.float32)
    assert np.array_equal(tiles(x, tile_shape=(4, 3)), x + 1)
    assert first(np.array([3.0, 5.0], np.float32)) == 6.0


def test_lanes_are_a_tile_of_lane_indices() -> None:
    @ts.kernel
    def lanes(out: ts.Tensor["N", ts.int64]):
        out[ts.tile.linear_id()] = ts.tile.reduce_sum(ts.tile.lane_id(), 0)

    out = np.zeros(2, np.int64)
    lanes(out)
    assert out.tolist() == [sum(range(32))] * 2


def test_kernels_from_source_less_code_fail_at_launch_with_a_hint() -> None:
    scope: dict = {"ts": ts}
    exec("@ts.kernel\ndef k(x: ts.Tensor['N', ts.f32]):\n    x[0] = 1.0\n", scope)
    with pytest.raises(ts.tile.KernelCompileError, match="cannot read the source"):
        scope["k"](np.zeros(2, np.float32))
