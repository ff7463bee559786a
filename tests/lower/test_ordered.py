"""Updates of one global element from several tiles (tessera.lower.rules.ordered.scalar): the
Target IR gives the tile interpreter's bits for any grid and in any order the CTAs'
atomics land, the PTX holds no float ``red`` for them (integer ``red`` stays), it
assembles for sm_80 and sm_90a without advisories, and the scratch it keeps in module
variables is restored for the next launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.conformance.kernels.cooperative_reduction import block_reduction
from tessera.frontend.kernel.backends.compile import compile_kernel, target_arguments
from tessera.interp.target import run_target
from tessera.interp.target.state import TargetFault
from tessera.ir.dialects.target import U64
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.tables import ModuleVar
from tests.interp.target.kit import Kernel
from tests.lower import kernels

TARGETS = ("sm_80", "sm_90a")
F32_RED = "red.global.add.f32"


def _tile_result(kernel: Any, *args: Any, **launch: Any) -> list[np.ndarray]:
    """The arguments after a launch in the tile interpreter (on copies)."""
    copies = [np.array(a) for a in args]
    kernel(*copies, **launch)
    return copies


def _target_result(kernel: Any, *args: Any, target: str = "sm_80",
                   cta_order: str = "ascending", **launch: Any) -> list[np.ndarray]:
    """The arguments after the lowered kernel runs in the Target IR interpreter with the
    CTAs' atomics landing in ``cta_order`` (on copies)."""
    copies = [np.array(a) for a in args]
    compiled = compile_kernel(kernel, *copies, target=target, **launch)
    prep, _ = kernel.specialise(tuple(copies), dict(launch))
    targs, _ = target_arguments(compiled, prep.runtime)
    run_target(compiled.kernel, targs, cta_order=cta_order)
    return copies


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 1500), groups=st.integers(1, 24), size=st.sampled_from([32, 64, 128]),
       seed=st.integers(0, 2**31 - 1), order=st.sampled_from(["ascending", "descending"]))
def test_block_reduction_has_the_tile_bits_for_any_grid(n: int, groups: int, size: int,
                                                       seed: int, order: str) -> None:
    """The conformance kernel whose GPU run differed in the last place: sixteen (here
    any number of) groups add their partial sums into one total, the CTAs' atomics
    landing in either order."""
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    start = np.array([rng.standard_normal()], np.float32)
    want = _tile_result(block_reduction, data, start, grid=groups, group_size=size)
    got = _target_result(block_reduction, data, start, grid=groups, group_size=size,
                         cta_order=order)
    assert got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("kernel", [kernels.every_tile_adds, kernels.every_tile_multiplies])
@pytest.mark.parametrize("launch", [{}, {"grid": 3, "group_size": 128}])
def test_the_result_does_not_depend_on_the_cta_order(kernel: Any, launch: dict[str, Any],
                                                      ) -> None:
    """Every tile (several per CTA) updates one element: the Target IR run gives the
    tile interpreter's bits whether the ticket atomics land in ascending or descending
    CTA order (then CTA 0 is the one that folds)."""
    rng = np.random.default_rng(11)
    x = (1 + rng.standard_normal(300) / 64).astype(np.float32)
    if kernel is kernels.every_tile_adds:  # magnitudes far apart: the order shows
        x = (rng.standard_normal(300) * 10.0 ** rng.integers(-4, 6, 300)).astype(np.float32)
    total = np.array([0.75], np.float32)
    want = _tile_result(kernel, x, total, **launch)[1]
    for order in ("ascending", "descending"):
        got = _target_result(kernel, x, total, cta_order=order, **launch)[1]
        assert got.tobytes() == want.tobytes(), order


@pytest.mark.parametrize("target", TARGETS)
def test_a_block_kernel_adds_its_scalar_once_per_tile(target: str) -> None:
    """In a block kernel a scalar is in all 128 threads of the tile's CTA: the update
    is one per tile (it was one per thread), in tile order."""
    x = np.random.default_rng(4).standard_normal(1024).astype(np.float32)
    total = np.array([0.5], np.float32)
    want = _tile_result(kernels.tiles_add_a_scalar, x, total, tile_shape=(32,))
    for order in ("ascending", "descending"):
        got = _target_result(kernels.tiles_add_a_scalar, x, total, target=target,
                             cta_order=order, tile_shape=(32,))
        assert got[1].tobytes() == want[1].tobytes()
        assert np.array_equal(got[0], want[0])


def test_float_red_lands_in_the_cta_order() -> None:
    """The descending order is a real other order: three CTAs' ``red.add.f32`` of
    1, 1e8 and -1e8 sum to 0 one way and to 1 the other (what the ordered scheme
    avoids)."""
    k = Kernel("red3", [U64, U64], block=(1,), grid=(3, 1, 1))
    src, dst = k.args
    cta = k.sreg("ctaid.x")
    v = k.ld("global", "f32", k.elem_addr(src, cta, 4))
    k.op(target_ops.Reduce("global", "add", "f32"), dst, v)
    fn = k.build()
    sums = []
    for order in ("ascending", "descending"):
        out = np.zeros(1, np.float32)
        run_target(fn, [np.array([1.0, 1e8, -1e8], np.float32), out], cta_order=order)
        sums.append(float(out[0]))
    assert sums == [0.0, 1.0]


@pytest.mark.parametrize("target", TARGETS)
def test_ptx_folds_in_order_and_keeps_integer_red(target: str) -> None:
    """Float updates of one element: no ``red.global.add.f32``, a ticket atomic between
    gpu-scope fences and module-scope scratch, no kernel parameter added; integer '+='
    stays ``red.global.add.s32``; ptxas accepts both with no advisory."""
    data, total = np.ones(1024, np.float32), np.zeros(1, np.float32)
    compiled = compile_kernel(block_reduction, data, total, target=target, grid=16,
                              group_size=64)
    ptx = compiled.ptx
    assert F32_RED not in ptx
    assert ptx.count("fence.acq_rel.gpu;") == 2
    assert "atom.global.add.u32" in ptx
    assert ".global .align 4 .b8 __tessera_block_reduction_ord_ticket[4];" in ptx
    assert ".global .align 4 .b8 __tessera_block_reduction_ord_tags[4096];" in ptx
    assert ".global .align 8 .b8 __tessera_block_reduction_ord_values[8192];" in ptx
    assert ptx.count(".param .u64") == 2
    log = compiled.assemble().log
    assert "advisory" not in log.lower() and "C75" not in log
    counts = compile_kernel(kernels.every_tile_adds, np.ones(300, np.int32),
                            np.zeros(1, np.int32), target=target)
    assert "red.global.add.s32" in counts.ptx and "atom" not in counts.ptx
    assert "advisory" not in counts.assemble().log.lower()


def test_integer_updates_keep_red_and_own_elements_need_no_atomic() -> None:
    """Integer '+=' from every tile keeps ``red``; '+=' where each tile owns its element
    is a plain load, add and store; both agree with the tile interpreter."""
    rng = np.random.default_rng(3)
    xi = rng.integers(-1000, 1000, 300).astype(np.int32)
    ts.check_against_reference(kernels.every_tile_adds, xi, np.zeros(1, np.int32),
                               backend="target", target="sm_80")
    x = rng.standard_normal(300).astype(np.float32)
    ts.check_against_reference(kernels.tiles_add_their_own, x, np.ones(300, np.float32),
                               backend="target", target="sm_80")
    ptx = compile_kernel(kernels.tiles_add_their_own, x, np.ones(300, np.float32),
                         target="sm_80").ptx
    assert "red." not in ptx.replace("shared.", "") and "atom" not in ptx
    assert "ld.global.f32" in ptx and "__tessera" not in ptx


@ts.kernel
def tiles_fill_bins(x: ts.Tensor["N", ts.f32], bins: ts.Tensor["B", ts.f32]):
    """Tile i adds its element into bin ``i % B``: several tiles per element, which
    element depending on the tile."""
    i = ts.tile.linear_id()
    if i < N:
        bins[i % B] += x[i]


@ts.kernel
def tiles_fill_data_bins(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                         bins: ts.Tensor["B", ts.f32]):
    """Tile i adds into the bin its key names: the element depends on loaded data."""
    i = ts.tile.linear_id()
    if i < N:
        bins[key[i]] += x[i]


@pytest.mark.parametrize("launch", [{}, {"grid": 5, "group_size": 64}])
def test_elements_that_depend_on_the_tile_are_folded_in_order(launch: dict[str, Any]
                                                               ) -> None:
    """``bins[i % B] += x[i]``: each slot keeps its destination, and the last CTA applies
    the slots in tile order, in either order of the tickets; the PTX has no float
    ``red``, also where the element depends on loaded data."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(300) * 10.0 ** rng.integers(-4, 6, 300)).astype(np.float32)
    bins = rng.standard_normal(7).astype(np.float32)
    want = _tile_result(tiles_fill_bins, x, bins, **launch)[1]
    for order in ("ascending", "descending"):
        got = _target_result(tiles_fill_bins, x, bins, cta_order=order, **launch)[1]
        assert got.tobytes() == want.tobytes(), order
    for target in TARGETS:
        compiled = compile_kernel(tiles_fill_bins, x, bins, target=target, **launch)
        assert F32_RED not in compiled.ptx and "atom.global.add.u32" in compiled.ptx
        assert "advisory" not in compiled.assemble().log.lower()
    key = rng.integers(0, 7, 300).astype(np.int32)
    want = _tile_result(tiles_fill_data_bins, x, key, bins, **launch)[2]
    for order in ("ascending", "descending"):
        got = _target_result(tiles_fill_data_bins, x, key, bins, cta_order=order, **launch)[2]
        assert got.tobytes() == want.tobytes(), order
    data = compile_kernel(tiles_fill_data_bins, x, key, bins, target="sm_80", **launch).ptx
    assert F32_RED not in data and "__tessera_tiles_fill_data_bins_ord_dests" in data


@pytest.mark.parametrize("target", TARGETS)
def test_the_ptx_text_keeps_the_order_launch_after_launch(target: str) -> None:
    """The rendered PTX read back by ``ts.ptx`` and launched three times on the same
    module variables (kept across launches, as a loaded module keeps them): each
    launch adds the tile interpreter's bits, and the scratch is zero after each."""
    rng = np.random.default_rng(8)
    data = (rng.standard_normal(1000) * 10.0 ** rng.integers(-3, 4, 1000)).astype(np.float32)
    total = np.array([0.25], np.float32)
    compiled = compile_kernel(block_reduction, data, total, target=target, grid=16,
                              group_size=64)
    module = ts.ptx.load(compiled.ptx)
    kernel = module.kernel(compiled.name)
    symbols = {v.name: np.zeros(v.size, np.uint8) for v in kernel.ir.globals}
    assert len(symbols) == 4
    for _ in range(3):
        want = _tile_result(block_reduction, data, total, grid=16, group_size=64)[1]
        kernel.run(grid=compiled.grid, block=compiled.block, args=[data, total],
                   symbols=symbols)
        assert total.tobytes() == want.tobytes()
        assert not any(v.any() for name, v in symbols.items() if not name.endswith("values"))


def test_a_module_variable_left_nonzero_is_a_fault() -> None:
    """A ``restored`` module variable the kernel leaves nonzero would reach the next
    launch: the interpreter reports it at the end of the launch."""
    k = Kernel("leaves_state", [], block=(32,))
    var = k.op(ModuleVar("__leftover", 8, 4, restored=True))
    k.st("global", "u32", var, k.const(7, "u32"), offset=4)
    with pytest.raises(TargetFault, match="leaves byte 4 of __leftover nonzero"):
        run_target(k.build(), [])


def test_aot_bundle_keeps_the_signature(tmp_path: Path) -> None:
    """The scratch is module-scope: the bundle's kernel has the kernel's own two
    parameters and its PTX declares the variables."""
    data, total = np.ones(256, np.float32), np.zeros(1, np.float32)
    path = ts.aot.save(block_reduction, tmp_path, data, total, targets=TARGETS, grid=4,
                       group_size=64)
    manifest = json.loads(path.read_text())
    assert len(manifest["signature"]) == 2
    for target in TARGETS:
        ptx = (tmp_path / f"block_reduction.{target}.ptx").read_text()
        assert "__tessera_block_reduction_ord_ticket" in ptx and F32_RED not in ptx


@ts.kernel
def tiles_cross(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32],
                out: ts.Tensor["N", ts.f32]):
    """Two updates that meet: tile i adds into element i, then into element i + 1."""
    i = ts.tile.linear_id()
    out[i] += x[i]
    out[(i + 1) % N] += y[i]


def test_updates_that_meet_are_applied_tile_by_tile() -> None:
    """Element k gets tile k-1's second update before tile k's first (tile order, then
    program order), as the tile interpreter applies them; each site alone owns its
    elements, but together they meet, so no plain read-modify-write races."""
    rng = np.random.default_rng(12)
    x, y, out = (((rng.standard_normal(300) * 10.0 ** rng.integers(-6, 6, 300))
                  .astype(np.float32)) for _ in range(3))
    want = _tile_result(tiles_cross, x, y, out)[2]
    assert want.tobytes() == ((out + np.roll(y, 1)) + x).astype(np.float32).tobytes()
    for order in ("ascending", "descending"):
        assert _target_result(tiles_cross, x, y, out, cta_order=order)[2].tobytes() == \
            want.tobytes(), order
