"""Masked (edge-tile) accesses lowered to PTX: guarded ``ld.global``/``st.global`` (PTX
ISA 8.x, sec. 9.3.1 "Predicated execution"), with index tiles computed in each
consumer's layout. Every kernel gives the tile interpreter's bits under the Target IR
interpreter, on sm_80 and sm_90a, on shapes that are not multiples of the tile; a
planted out-of-bounds access is still reported; the PTX holds the predicated forms and
assembles with no spills."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import TesseraError
from tessera.frontend.kernel.backends.compile import compile_kernel, target_arguments
from tessera.interp.target import run_target
from tests.lower import masked_kernels as mk
from tests.lower.test_lowering import same_bits

TARGETS = ("sm_80", "sm_90a")
BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(11)


def _tiles(m: int, n: int) -> int:
    return -(-m // 8) * -(-n // 16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [1, 63, 64, 97, 257])
def test_saxpy_edges(target: str, n: int) -> None:
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    same_bits(mk.saxpy_edges, x, y, 2.5, target=target, grid=-(-n // 64))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_2d_edges_in_every_float_format(target: str, dtype: Any) -> None:
    """The other value -7 and the results round to the tensor's format."""
    a = (3 * rng.standard_normal((13, 21))).astype(dtype)
    same_bits(mk.scale_edges, a, np.zeros_like(a), target=target, grid=_tiles(13, 21))


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 30), n=st.integers(1, 40), seed=st.integers(0, 2**16),
       target=st.sampled_from(TARGETS))
def test_2d_edges_of_any_shape(m: int, n: int, seed: int, target: str) -> None:
    a = np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)
    ts.check_against_reference(mk.scale_edges, a, np.zeros_like(a), grid=_tiles(m, n),
                               backend="target", target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_masked_off_elements_read_other(target: str) -> None:
    a = np.arange(1, 38, dtype=np.float32)
    out = np.zeros(48, np.float32)
    same_bits(mk.padded_copy, a, out, target=target, grid=3)
    got = _lowered_run(mk.padded_copy, (a, out), {"grid": 3}, target)[1]
    assert np.array_equal(got[:37], a) and np.all(got[37:] == 0.5)


@pytest.mark.parametrize("target", TARGETS)
def test_int_elements_and_index_tiles_in_arithmetic(target: str) -> None:
    a = rng.integers(-1000, 1000, 45).astype(np.int32)
    same_bits(mk.count_edges, a, np.zeros_like(a), target=target, grid=2)


@pytest.mark.parametrize("target", TARGETS)
def test_data_dependent_mask(target: str) -> None:
    x = (2 * rng.standard_normal(64)).astype(np.float32)
    same_bits(mk.positive_only, x, target=target, grid=2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m, n", [(100, 72), (65, 1), (128, 128)])
def test_masked_store_of_an_mma_accumulator(target: str, m: int, n: int) -> None:
    """The mask is evaluated in the accumulator layout (rows and columns per register)."""
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    c = np.zeros((m, n), np.float32)
    same_bits(mk.gemm_edges, a, b, c, target=target, grid=(2, 2), tile_shape=(64, 64, 32))


def _lowered_run(kernel: Any, args: tuple[Any, ...], launch: dict[str, Any],
                 target: str) -> list[Any]:
    compiled = compile_kernel(kernel, *args, target=target, **launch)
    prep, _ = kernel.specialise(args, dict(launch))
    targs, _ = target_arguments(compiled, prep.runtime)
    run_target(compiled.kernel, targs)
    return targs


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel, tag", [(mk.leaky_edges, "LEAKY LOAD"),
                                         (mk.unmasked_edges, "UNMASKED")])
def test_planted_out_of_bounds_is_reported_by_both_interpreters(kernel: Any, tag: str,
                                                                 target: str) -> None:
    a = np.ones(40, np.float32)  # tiles of 16: the third reaches past the end
    lines = Path(mk.__file__).read_text().splitlines()
    for run in (lambda: kernel(a.copy(), np.zeros_like(a), grid=3),
                lambda: _lowered_run(kernel, (a.copy(), np.zeros_like(a)), {"grid": 3},
                                     target)):
        with pytest.raises(TesseraError, match="out of bounds") as info:
            run()
        loc = info.value.loc
        assert loc is not None and lines[loc.line - 1].rstrip().endswith(f"# {tag}")


@pytest.mark.parametrize("target", TARGETS)
def test_ptx_has_predicated_loads_and_stores(target: str) -> None:
    x = np.zeros(100, np.float32)
    ptx = compile_kernel(mk.saxpy_edges, x, x.copy(), 2.5, target=target, grid=2).ptx
    lines = [line.strip() for line in ptx.splitlines()]
    loads = [k for k, line in enumerate(lines) if " ld.global.f32 " in line]
    stores = [line for line in lines if " st.global.f32 " in line]
    assert loads and stores
    for k in loads:  # @%p ld ...; @!%p mov <the same register>, <other>;
        guard, dst = lines[k].split()[0], lines[k].split()[2].rstrip(",")
        assert guard.startswith("@%p")
        assert lines[k + 1].startswith(f"@!{guard[1:]} mov.f32 {dst},")
    assert all(line.startswith("@%p") for line in stores)
    assert not any(line.startswith(("ld.global", "st.global")) for line in lines)


# -- masked loads staged into shared memory: zero-fill copies (tessera.lower.rules.staged)


def _ptx(kernel: Any, *args: Any, target: str, **launch: Any) -> list[str]:
    ptx = compile_kernel(kernel, *args, target=target, **launch).ptx
    return [line.strip() for line in ptx.splitlines()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m, k, n", [(100, 70, 72), (130, 80, 72), (64, 64, 64), (1, 1, 1),
                                     (65, 33, 9)])
def test_gemm_with_staged_masked_operands(target: str, m: int, k: int, n: int) -> None:
    """Operand tiles past M, N or K load zeros, which add zero products: the exact sums
    are the tile interpreter's."""
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    c = np.zeros((m, n), np.float32)
    same_bits(mk.gemm_staged_edges, a, b, c, target=target,
              grid=(-(-m // 64), -(-n // 64)), tile_shape=(64, 64, 32))


def test_staged_operands_are_zero_fill_copies() -> None:
    """sm_80: cp.async with a source size (PTX ISA sec. 9.7.9.25), no register loads of
    the operands; sm_90a: TMA (sec. 9.7.9.27) where the row stride is a multiple of 16
    bytes (B's 144), cp.async where it is not (A's 140)."""
    a, b = np.zeros((100, 70), BF16), np.zeros((70, 72), BF16)
    args = (a, b, np.zeros((100, 72), np.float32))
    launch = {"grid": (2, 2), "tile_shape": (64, 64, 32)}
    sm80 = _ptx(mk.gemm_staged_edges, *args, target="sm_80", **launch)
    copies = [line for line in sm80 if line.startswith("cp.async.ca.shared.global")]
    assert copies and all(line.count(",") == 3 for line in copies)  # dst, src, 4, src-size
    assert not any(" ld.global" in line for line in sm80)
    sm90 = _ptx(mk.gemm_staged_edges, *args, target="sm_90a", **launch)
    assert sum(line.startswith("cp.async.bulk.tensor") for line in sm90) == 1
    assert any(line.startswith("cp.async.ca.shared.global") for line in sm90)
    wide = (np.zeros((100, 80), BF16), np.zeros((80, 72), BF16), args[2])
    sm90 = _ptx(mk.gemm_staged_edges, *wide, target="sm_90a", **launch)
    assert sum(line.startswith("cp.async.bulk.tensor") for line in sm90) == 2
    assert not any(line.startswith(("cp.async.ca", "cp.async.cg")) for line in sm90)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [0, 1, 25, 32])
def test_staged_prefix_mask_partial_chunks(target: str, n: int) -> None:
    """Columns below n: a 16-byte chunk of 8 bf16 copies only its first n % 8."""
    x = rng.standard_normal((37, 32)).astype(BF16)
    same_bits(mk.stage_columns, x, np.zeros_like(x), n, target=target, grid=3)
    lines = _ptx(mk.stage_columns, x, x.copy(), n, target=target, grid=3)
    assert any(line.startswith("cp.async.cg.shared.global") and line.count(",") == 3
               for line in lines)


@pytest.mark.parametrize("target", TARGETS)
def test_staged_mask_no_copy_expresses_goes_through_registers(target: str) -> None:
    x = rng.standard_normal((37, 32)).astype(BF16)
    same_bits(mk.stage_even_columns, x, np.zeros_like(x), target=target, grid=3)
    lines = _ptx(mk.stage_even_columns, x, x.copy(), target=target, grid=3)
    assert not any(line.startswith("cp.async") for line in lines)
    assert any(line.startswith("@%p") and " ld.global.b16 " in line for line in lines)


@pytest.mark.parametrize("target", TARGETS)
def test_planted_leak_in_a_staged_copy_is_reported(target: str) -> None:
    x = np.ones((37, 32), np.float32)
    lines = Path(mk.__file__).read_text().splitlines()
    for run in (lambda: mk.stage_leaky(x.copy(), np.zeros_like(x), grid=3),
                lambda: _lowered_run(mk.stage_leaky, (x.copy(), np.zeros_like(x)),
                                     {"grid": 3}, target)):
        with pytest.raises(TesseraError, match="out of bounds") as info:
            run()
        loc = info.value.loc
        assert loc is not None and lines[loc.line - 1].rstrip().endswith("# LEAKY STAGE")
    assert any(line.startswith("cp.async.") and line.count(",") == 3
               for line in _ptx(mk.stage_leaky, x, x.copy(), target=target, grid=3))


# -- masked accesses of shared memory


@pytest.mark.parametrize("target", TARGETS)
def test_masked_shared_accesses(target: str) -> None:
    """A window of a shared buffer that reaches past its end, masked: guarded
    ``ld.shared``/``st.shared``; a mask that lets one element out is a fault."""
    from tests.tile.test_masked import shared_edges

    a = rng.standard_normal(41).astype(np.float32)
    same_bits(shared_edges, a, np.zeros_like(a), 0, target=target, grid=4)
    lines = _ptx(shared_edges, a, a.copy(), 0, target=target, grid=4)
    assert any(line.startswith("@%p") and " ld.shared.f32 " in line for line in lines)
    assert any(line.startswith("@%p") and " st.shared.f32 " in line for line in lines)
    with pytest.raises(TesseraError, match="out of bounds"):
        _lowered_run(shared_edges, (a, np.zeros_like(a), 1), {"grid": 4}, target)
