"""nvcc's PTX for sm_80 (tests/ir/text/ptx/ptx_corpus/kernels.cu), run on the CPU by
``ts.ptx`` and compared with NumPy; planted bugs in copies are reported at their line."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import NVCC_PTX, collatz_reference, line_of

rng = np.random.default_rng(7)


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(NVCC_PTX)


def test_saxpy(mod) -> None:
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = (np.float64(2.5) * x + y).astype(np.float32)  # fma: one rounding
    mod.kernel("saxpy").run(grid=(4, 1, 1), block=(256, 1, 1),
                            args=[np.int32(n), np.float32(2.5), x, y])
    np.testing.assert_array_max_ulp(y, want, 1)


@pytest.mark.parametrize("name, block, dyn", [("reduce_tree", 256, 0),
                                               ("reduce_dynamic", 128, 128 * 4)])
def test_tree_reductions(mod, name: str, block: int, dyn: int) -> None:
    n = 700
    x = rng.standard_normal(n).astype(np.float32)
    grid = -(-n // block)
    out = np.zeros(grid, np.float32)
    mod.kernel(name).run(grid=grid, block=block, args=[x, out, np.int32(n)],
                         shared_bytes=dyn)
    padded = np.zeros(grid * block, np.float64)
    padded[:n] = x
    np.testing.assert_allclose(out, padded.reshape(grid, block).sum(axis=1), rtol=1e-5,
                               atol=1e-5)


def test_warp_shuffle_sum(mod) -> None:
    n, grid, block = 1000, 2, 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(grid * block // 32, np.float32)
    mod.kernel("warp_sum").run(grid=grid, block=block, args=[x, out, np.int32(n)])
    per_thread = np.zeros(grid * block)
    for t in range(grid * block):
        per_thread[t] = x[t::grid * block].astype(np.float64).sum()
    np.testing.assert_allclose(out, per_thread.reshape(-1, 32).sum(axis=1), rtol=1e-5,
                               atol=1e-5)


def test_cp_async_double_buffer(mod) -> None:
    ctas, tiles = 2, 3
    x = rng.standard_normal((ctas, tiles, 128, 4)).astype(np.float32)
    out = np.zeros_like(x)
    mod.kernel("cp_async_copy").run(grid=ctas, block=128, args=[x, out, np.int32(tiles)])
    v = np.roll(x, -1, axis=2)  # thread t reads its neighbour t + 1's copy
    want = np.stack([2 * v[..., 0], v[..., 1] + 1, v[..., 2], -v[..., 3]], axis=-1)
    np.testing.assert_array_equal(out, want)


def test_divergent_loops_and_bit_instructions(mod) -> None:
    n = 200
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v[:4] = [0, 1, 27, 0xFFFFFFFF]
    steps = np.zeros(n, np.uint32)
    bits = np.zeros(n, np.uint32)
    wide = np.zeros(n, np.uint64)
    mod.kernel("collatz_bits").run(grid=2, block=128,
                                   args=[v, steps, bits, wide, np.int32(n)])
    s, b, w = collatz_reference(v)
    np.testing.assert_array_equal(steps, s)
    np.testing.assert_array_equal(bits, b)
    np.testing.assert_array_equal(wide, w)


def test_transpose_2d_blocks(mod) -> None:
    rows, cols = 50, 70
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((cols, rows), np.float32)
    mod.kernel("transpose").run(grid=(3, 2, 1), block=(32, 8, 1),
                                args=[x, out, np.int32(rows), np.int32(cols)])
    np.testing.assert_array_equal(out, x.T)


def test_histogram_atomics(mod) -> None:
    words = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    hist = np.zeros(64, np.uint32)
    mod.kernel("histogram").run(grid=3, block=96, args=[words, hist, np.int32(len(words))])
    np.testing.assert_array_equal(hist, np.bincount(words & 63, minlength=64))


def test_ldmatrix_mma_sync(mod) -> None:
    a = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    c = np.zeros((16, 8), np.float32)
    mod.kernel("mma_tile").run(grid=1, block=32, args=[a.view(np.uint16), b.view(np.uint16),
                                                       c])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ planted bugs
def _planted(tmp_path: Path, kernel: str, old: str, new: str) -> tuple[Path, str]:
    """A copy of the corpus with ``old`` replaced by ``new`` everywhere in ``kernel``."""
    text = NVCC_PTX.read_text()
    start = text.index(f".entry {kernel}(")
    end = text.index("\n}", start)
    assert old in text[start:end]
    text = text[:start] + text[start:end].replace(old, new) + text[end:]
    path = tmp_path / f"{kernel}_bug.ptx"
    path.write_text(text)
    return path, text


def test_missing_bar_sync_is_a_race(tmp_path: Path) -> None:
    text = NVCC_PTX.read_text()
    start = text.index(".entry reduce_tree(")
    loop = text.index("bar.sync", text.index("bar.sync", start) + 1)  # the loop's barrier
    text = text[:loop] + "// barrier removed" + text[text.index("\n", loop):]
    path = tmp_path / "reduce_tree_bug.ptx"
    path.write_text(text)
    bug = text
    x = rng.standard_normal(256).astype(np.float32)
    k = ts.ptx.load(path).kernel("reduce_tree")
    with pytest.raises(TargetFault, match="shared memory race") as err:
        k.run(grid=1, block=256, args=[x, np.zeros(1, np.float32), np.int32(256)])
    assert err.value.loc.file == str(path)
    assert "ld.shared.f32" in bug.splitlines()[err.value.loc.line - 1] or \
        "st.shared.f32" in bug.splitlines()[err.value.loc.line - 1]


def test_wrong_wait_group_reads_before_the_wait(tmp_path: Path) -> None:
    path, bug = _planted(tmp_path, "cp_async_copy", "cp.async.wait_group 1",
                         "cp.async.wait_group 2")
    x = rng.standard_normal((1, 3, 128, 4)).astype(np.float32)
    k = ts.ptx.load(path).kernel("cp_async_copy")
    with pytest.raises(TargetFault, match="async copy read before its wait") as err:
        k.run(grid=1, block=128, args=[x, np.zeros_like(x), np.int32(3)])
    assert err.value.loc.file == str(path)
    assert "ld.shared.v4.f32" in bug.splitlines()[err.value.loc.line - 1]
    assert err.value.op.startswith("ld.shared.v4.f32")


def test_out_of_bounds_store(tmp_path: Path) -> None:
    path, bug = _planted(tmp_path, "saxpy", "st.global.f32 \t[%rd7], %f4",
                         "st.global.f32 \t[%rd7+4], %f4")
    n = 300
    x, y = np.ones(n, np.float32), np.ones(n, np.float32)
    with pytest.raises(TargetFault, match="out of bounds") as err:
        ts.ptx.load(path).kernel("saxpy").run(grid=2, block=256,
                                              args=[np.int32(n), np.float32(1), x, y])
    assert err.value.loc.line == line_of(bug, "[%rd7+4]")
    assert "4 bytes past the end of argument 3" in str(err.value)
    assert err.value.thread == n - 1 - 256 and err.value.cta == (1, 0, 0)


def test_local_memory_array(mod) -> None:
    n = 100
    x = rng.integers(-500, 500, (n, 8)).astype(np.int32)
    out = np.zeros_like(x)
    mod.kernel("local_sort").run(grid=1, block=128, args=[x, out, np.int32(n)])
    t = np.arange(n)[:, None]
    v = np.take_along_axis(x, (np.arange(8)[None, :] * 5 + t) & 7, axis=1)
    v[np.arange(n), x[:, 0] & 7] += 1000
    np.testing.assert_array_equal(out, np.sort(v, axis=1))


def test_byte_loads_and_stores(mod) -> None:
    n = 300
    keep = rng.integers(0, 2, n).astype(np.uint8)
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, 7.0, np.float32)
    flags = np.zeros(n, np.uint8)
    mod.kernel("byte_mask").run(grid=2, block=256, args=[keep, x, y, flags, np.int32(n)])
    np.testing.assert_array_equal(y, np.where(keep != 0, x, 0.0).astype(np.float32))
    np.testing.assert_array_equal(flags, (x > 0).astype(np.uint8) | (keep << 1))


def test_wmma_tile(mod) -> None:
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c = np.full((16, 16), np.nan, np.float32)
    # B is loaded column-major with leading dimension 16: pass B transposed, contiguous
    mod.kernel("wmma_tile").run(grid=1, block=32, args=[a.view(np.int32).reshape(-1),
                                                        np.ascontiguousarray(b.T),
                                                        c, np.float32(0.5)])
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32) * np.float32(0.5)
    np.testing.assert_array_equal(c, want)
