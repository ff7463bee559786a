"""Lowering rules on small kernels (tests/lower/kernels.py): async copies of every
element format, a returned tile's attributes, the barrier before a copy that opens a
loop body, the '+=' cases that are refused at the kernel's line, and the value slots of
structured ops."""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tessera.errors import IRVerifyError, UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.ir import PassManager, parse_module
from tessera.ir.core import Instr, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.lower.layout import possibly_wide, value_slots
from tessera.lower.tiles import ELEM_BYTES, elem_size
from tessera.lower.values import ELEM_OF
from tests.lower import kernels
from tests.lower.test_lowering import TARGETS, same_bits

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(5)


def test_element_names_agree() -> None:
    """Every format a box can hold has a PTX element name with its byte size."""
    for name, elem in ELEM_OF.items():
        assert elem_size(elem) == np.dtype(getattr(ml_dtypes, name, name)).itemsize, name
    assert set(ELEM_OF.values()) <= set(ELEM_BYTES)
    with pytest.raises(UnsupportedError, match="'int32' elements"):
        elem_size("int32")


@pytest.mark.parametrize("target", TARGETS)
def test_async_copies_of_int32_and_f64_tiles(target: str) -> None:
    """cp.async moves bytes: int32 and float64 tiles copy like f32 ones (and assemble)."""
    x = rng.integers(-2**31, 2**31 - 1, (64, 48), dtype=np.int32)
    same_bits(kernels.stage, x, np.zeros_like(x), target=target, tile_shape=(32,))
    y = rng.standard_normal((64, 24))
    same_bits(kernels.stage, y, np.zeros_like(y), target=target, tile_shape=(32,))
    ptx = compile_kernel(kernels.stage, y, np.zeros_like(y), target=target,
                         tile_shape=(32,)).ptx
    assert "cp.async.cg.shared.global" in ptx


@pytest.mark.parametrize("target", TARGETS)
def test_async_copy_of_a_format_with_no_ptx_element_is_refused(target: str) -> None:
    x = np.zeros((64, 16), np.complex64)
    with pytest.raises(UnsupportedError, match="does not copy or multiply") as info:
        compile_kernel(kernels.stage_complex, x, target=target, tile_shape=(32,))
    assert "kernels.py:" in str(info.value)


def tile_ir_text(kernel: Any, *args: Any, **launch: Any) -> str:
    return kernel.inspect_ir("tile", *args, **launch)


@pytest.mark.parametrize("drop", ["result_shape", "result_element"])
def test_returned_tile_needs_its_result_attributes(drop: str) -> None:
    """Tile IR written by hand, returning a tile without the attributes that describe
    the output tensor: a verification error naming them, not a KeyError."""
    x = np.zeros((64, 64), np.float32)
    text = tile_ir_text(kernels.doubled, x, tile_shape=(32,))
    text, hits = re.subn(rf"{drop} = (\[[^]]*\]|[^,]*), ", "", text)
    assert hits == 1
    module = parse_module(text, "doubled.tir")
    with pytest.raises(IRVerifyError, match=f"no {drop} attribute") as info:
        PassManager.from_names(["lower-ptx-sm80"]).run(module)
    assert "doubled.tir:2" in str(info.value) and "result_shape = [" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_copy_opening_a_loop_body_is_preceded_by_a_barrier(target: str) -> None:
    """The copy before the loop does not count for the body: from the second trip the
    body's copy follows the body's reads, so the body starts with bar.sync."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    same_bits(kernels.recopy_in_loop, x, np.zeros_like(x), target=target, tile_shape=(32,))
    ptx = compile_kernel(kernels.recopy_in_loop, x, np.zeros_like(x), target=target,
                         tile_shape=(32,)).ptx
    before_loop, body = ptx.split("$L__for_", 1)
    assert "cp.async" in before_loop.split("bar.sync")[-1]  # the copy just before the loop
    assert "bar.sync" in body[:body.index("cp.async")]


@pytest.mark.parametrize("target", TARGETS)
def test_mma_right_after_a_commit(target: str) -> None:
    """A copy in flight while an mma runs: on sm_90a the commit's group-ring counters are
    fenced for the async proxy before the wgmma."""
    a = rng.standard_normal((64, 128)).astype(BF16)
    b = rng.standard_normal((128, 64)).astype(BF16)
    same_bits(kernels.mma_over_copy, a, b, np.zeros((64, 64), np.float32), target=target,
              tile_shape=(64, 64, 64))


@pytest.mark.parametrize("target", TARGETS)
def test_add_of_an_accumulator_into_a_strided_view_is_refused(target: str) -> None:
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 128), BF16)
    c = np.zeros((128, 128, 2), np.float32)
    with pytest.raises(UnsupportedError, match="row-major views") as info:
        compile_kernel(kernels.add_acc_into_strided, a, b, c, target=target,
                       tile_shape=(64, 64, 64))
    assert "kernels.py:" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_add_of_row_sums_is_refused(target: str) -> None:
    x, out = np.zeros((64, 64), np.float32), np.zeros(64, np.float32)
    with pytest.raises(UnsupportedError, match="row-reduced tile") as info:
        compile_kernel(kernels.add_row_sums, x, out, target=target, tile_shape=(32,))
    assert "kernels.py:" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_sum_of_a_whole_tile_to_one_value_is_refused(target: str) -> None:
    """A reduction of a whole tile to one value has no register layout: an
    UnsupportedError at the kernel's line, not an internal KeyError."""
    data, total = np.ones(512, np.float32), np.zeros(1, np.float32)
    with pytest.raises(UnsupportedError, match="whole tensor<128xf32> tile") as info:
        compile_kernel(kernels.add_whole_tile_sum, data, total, target=target,
                       tile_shape=(128,))
    assert "kernels.py:" in str(info.value)


def _structured(fn: Any, cls: type) -> Instr:
    (instr,) = [i for i in walk(fn.body) if isinstance(i.op, cls)]
    return instr


def test_value_slots_of_if_and_while() -> None:
    """An if's slots are its branches' yields and its result (not its condition); a
    while's are its initial value, its body's yield, both regions' arguments and its
    result (not the condition region's bool). An mma result reaching them is wide."""
    a, b = np.zeros((64, 32), BF16), np.zeros((32, 64), BF16)
    args, launch = (a, b, np.zeros((64, 64), np.float32), 3), {"tile_shape": (64, 64, 32)}
    fn = kernels.branchy_product.compile(*args, **launch).functions["branchy_product"]
    branch, loop = _structured(fn, tile_ir.If), _structured(fn, tile_ir.While)
    (sources, targets), = value_slots(branch)
    assert sources == [r.block.terminator.operands[0] for r in branch.regions]
    assert targets == [branch.results[0]] and branch.operands[0] not in sources
    slots = value_slots(loop)
    assert len(slots) == 2
    sources, targets = slots[0]
    cond, body = (r.block for r in loop.regions)
    assert sources == [loop.operands[0], body.terminator.operands[0]]
    assert targets == [loop.results[0], cond.args[0], body.args[0]]
    wide = possibly_wide(fn)
    assert {branch.results[0], loop.results[0], body.args[0]} <= wide
    assert not {branch.regions[1].block.terminator.operands[0], loop.results[1]} & wide
    for target in TARGETS:
        for n in (3, 0):
            same_bits(kernels.branchy_product, *args[:3], n, target=target, **launch)


def _wide_join_model(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """``C`` of ``kernels.wide_join`` by docs/kernels.md section 7: ``acc``'s slots are
    wide on every path, so each tile sums in float64 (``p * c`` rounds ``p`` and the
    product to f32 first) and rounds once, at the store."""
    f32 = np.float32
    c = np.zeros((a.shape[0], b.shape[1]), f32)
    for m0 in range(0, c.shape[0], 64):
        for n0 in range(0, c.shape[1], 64):
            p = a[m0:m0 + 64, :32].astype(np.float64) @ b[:32, n0:n0 + 64].astype(np.float64)
            p32 = p.astype(f32)
            acc = np.zeros((64, 64))
            for _ in range(max(n, 0)):
                acc = acc + p
            acc = acc + p if m0 == n * 64 else acc + (p32 * f32(0.1)).astype(np.float64)
            acc = acc + (p32 * f32(0.3)).astype(np.float64)
            c[m0:m0 + 64, n0:n0 + 64] = acc + (p32 * f32(0.7)).astype(np.float64)
    return c


@pytest.mark.parametrize("n", [-1, 0, 1])
def test_wide_slots_are_wide_on_every_path(n: int) -> None:
    """A slot that one path fills with an mma result is wide on every path: with no
    trip and no tile in the mma branch (n = -1), with the CTAs of one row in it (0),
    and after one trip (1). The simulator follows the NumPy model of the rule in every
    schedule, and the lowered kernel, whose Target IR joins widen alike, has its bits."""
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    launch = {"tile_shape": (64, 64, 32)}
    want = _wide_join_model(a, b, n)
    if n == -1:  # the rule differs from adding in f32 where nothing brings a wide value
        p = np.zeros(want.shape, np.float32)
        for m0, n0 in ((0, 0), (0, 64), (64, 0), (64, 64)):
            p[m0:m0 + 64, n0:n0 + 64] = (a[m0:m0 + 64, :32].astype(np.float64)
                                         @ b[:32, n0:n0 + 64].astype(np.float64))
        f32 = np.float32
        narrow = (p * f32(0.1) + p * f32(0.3)) + p * f32(0.7)
        assert narrow.tobytes() != want.tobytes()
    for schedule in ("vectorized", "sequential"):
        c = np.zeros((128, 128), np.float32)
        kernels.wide_join(a, b, c, n, schedule=schedule, **launch)
        assert c.tobytes() == want.tobytes(), schedule
    for target in TARGETS:
        same_bits(kernels.wide_join, a, b, np.zeros((128, 128), np.float32), n,
                  target=target, **launch)


def _copy_sizes(ptx: str) -> set[str]:
    """The chunk sizes of the kernel's cp.async instructions."""
    return set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^]]+\], \[[^]]+\], (\d+)", ptx))


@pytest.mark.parametrize("target", TARGETS)
def test_async_copy_chunks_follow_the_start_alignment(target: str) -> None:
    """cp.async chunks must be aligned to their size: a view starting at a run-time
    column copies 4-byte chunks (and is right at an odd column), one starting at
    column 2 of an f32 tensor 8-byte chunks, a loop index stepping by 16 bf16 16-byte
    ones."""
    x = rng.standard_normal((64, 40)).astype(np.float32)
    for c0 in (1, 0, 8):
        same_bits(kernels.stage_at, x, np.zeros((64, 32), np.float32), c0, target=target,
                  tile_shape=(32,))
    cases = [(kernels.stage_at, (x, np.zeros((64, 32), np.float32), 1), {"4"}),
             (kernels.stage_from_2, (x, np.zeros((64, 32), np.float32)), {"8"})]
    y = rng.standard_normal((64, 64)).astype(BF16)
    cases.append((kernels.stage_k_slices, (y, np.zeros_like(y)), {"16"}))
    for kernel, args, sizes in cases:
        ptx = compile_kernel(kernel, *args, target=target, tile_shape=(32,)).ptx
        assert _copy_sizes(ptx) == sizes, kernel.name
        same_bits(kernel, *args, target=target, tile_shape=(32,))


@pytest.mark.parametrize("target", TARGETS)
def test_async_copy_below_4_byte_alignment_is_refused(target: str) -> None:
    x = np.zeros((64, 40), BF16)
    with pytest.raises(UnsupportedError, match="multiples of 2 bytes") as info:
        compile_kernel(kernels.stage_bf16_from_1, x, target=target, tile_shape=(32,))
    assert "kernels.py:" in str(info.value) and "multiple of 4" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_accumulator_stored_from_a_run_time_column(target: str) -> None:
    """Column pairs go out as one vector store only where the view's start is aligned
    to the pair: from a run-time column every element is stored on its own."""
    a = rng.standard_normal((64, 32)).astype(BF16)
    b = rng.standard_normal((32, 64)).astype(BF16)
    for c0 in (1, 0):
        same_bits(kernels.gemm_into_column, a, b, np.zeros((64, 66), np.float32), c0,
                  target=target, tile_shape=(64, 64, 32), grid=(1, 1))
    ptx = compile_kernel(kernels.gemm_into_column, a, b, np.zeros((64, 66), np.float32), 1,
                         target=target, tile_shape=(64, 64, 32), grid=(1, 1)).ptx
    assert "st.global.v2" not in ptx and "st.global.f32" in ptx
