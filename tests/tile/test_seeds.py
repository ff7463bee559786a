"""Every tile-kernel seed twice: run as written (its literal semantics, stated in each
test) and as the corrected kernel of tessera/conformance/kernels checked against NumPy."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance import tile_seeds as seeds

EXAMPLES = Path(__file__).resolve().parents[2] / "tessera" / "conformance" / "kernels"
RNG = np.random.default_rng(11)


def example(name: str):
    """Import tessera/conformance/kernels/<name>.py as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"kernel_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bf16(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


def f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("[!_]*.py")))
def test_corrected_example_runs_and_checks_numpy(name: str) -> None:
    example(name).main()


# --------------------------------------------------------------------- as written
def test_saxpy_as_written_is_correct() -> None:
    x, y = RNG.standard_normal(300).astype(np.float32), RNG.standard_normal(300).astype(
        np.float32)
    ref = np.float32(-1.5) * x + y
    out = seeds.saxpy(x, y, -1.5)
    assert out is y and np.array_equal(y, ref)


def test_tile_example_as_written_doubles_every_element() -> None:
    data = np.arange(50, dtype=np.float32)
    seeds.tile_example(data)
    assert np.array_equal(data, 2 * np.arange(50, dtype=np.float32))


def test_process_chunks_as_written_names_the_undefined_function() -> None:
    with pytest.raises(ts.tile.UndefinedNameError) as info:
        seeds.process_chunks(np.ones(8, np.float32), np.zeros(8, np.float32))
    assert "'process'" in str(info.value)
    assert info.value.loc.file.endswith("seeds.py")
    line = Path(seeds.__file__).read_text().splitlines()[info.value.loc.line - 1]
    assert "process(input[i])" in line


def test_memory_hierarchy_as_written_names_undefined_i() -> None:
    with pytest.raises(ts.tile.UndefinedNameError, match="name 'i' is not defined") as info:
        seeds.memory_hierarchy_example(np.ones((64, 64), np.float32))
    line = Path(seeds.__file__).read_text().splitlines()[info.value.loc.line - 1]
    assert "A[i, j]" in line


def test_cooperative_reduction_as_written_is_a_single_group_sum() -> None:
    data = RNG.standard_normal(1024).astype(np.float32)
    exact = f64(data).sum()
    bound = 1024 * 2.0 ** -24 * np.abs(f64(data)).sum()
    assert abs(float(seeds.cooperative_reduction(data, grid=1, group_size=128)) - exact) \
        <= bound
    # default launch: one tile per element, each group of one tile sums data[g:]; tile 0's
    # value (the whole sum) is returned
    assert abs(float(seeds.cooperative_reduction(data)) - exact) <= bound


def test_quickstart_gemm_as_written_is_split_k_under_the_default_grid() -> None:
    """No K loop: each group adds one BK slice into C with +=. The default grid gives
    tile_k its own axis, so the slices are reduced into C (a split-K GEMM); with a 2-D
    grid tile_k is 0 and one launch adds only the first slice."""
    a, b = bf16(128, 96), bf16(96, 128)
    c = np.ones((128, 128), np.float32)
    out = seeds.gemm(a, b, c)
    assert out is c
    full = f64(a) @ f64(b)
    # three f32 additions per element (the slices, in group order): within 3 roundings
    assert np.allclose(c, 1 + full, rtol=0, atol=4 * 2.0 ** -24 * (1 + np.abs(f64(a)) @
                                                                  np.abs(f64(b))).max())
    c2 = np.zeros((128, 128), np.float32)
    seeds.gemm[(2, 2)](a, b, c2)
    assert np.array_equal(c2, (f64(a)[:, :32] @ f64(b)[:32]).astype(np.float32))


def test_double_buffered_gemm_as_written_skips_the_last_k_block() -> None:
    """One (BM, BN) tile; C += A @ B over every K block but the last; the wait without
    a commit is legal (cp_wait_group commits open copies)."""
    a, b = bf16(64, 128), bf16(128, 64)
    c = np.zeros((64, 64), np.float32)
    seeds.double_buffered_gemm(a, b, c)
    partial = f64(a)[:, :96] @ f64(b)[:96]
    assert np.allclose(c, partial, rtol=0, atol=1e-4)
    assert not np.allclose(c, f64(a) @ f64(b), rtol=0, atol=1e-2)


def test_optimized_memory_access_as_written() -> None:
    """Stages 4 elements of each 4th row into shared memory and writes nothing; under
    the default grid the second group's rows run past the tensor."""
    src = bf16(128, 128)
    dst = np.zeros_like(src)
    seeds.optimized_memory_access(src, dst, grid=1)
    assert not dst.astype(np.float32).any()
    with pytest.raises(ts.tile.SanitizerError, match="out of bounds") as info:
        seeds.optimized_memory_access(src, dst)
    assert info.value.group == 1


def _literal_flash(q, k, v, bm, bn, causal):
    """The seed's algorithm, bug for bug, in float64: one program per batch index walks
    every query block with one set of accumulators and the wrong normaliser."""
    out = np.zeros(q.shape)
    s_len, d = q.shape[1:]
    for b in range(q.shape[0]):
        acc, m, l_ = np.zeros((bm, d)), np.full(bm, -np.inf), np.zeros(bm)
        for q0 in range(0, s_len, bm):
            for k0 in range(0, s_len, bn):
                s = f64(q[b, q0:q0 + bm]) @ f64(k[b, k0:k0 + bn]).T / math.sqrt(d)
                if causal:
                    keep = (q0 + np.arange(bm))[:, None] >= (k0 + np.arange(bn))[None, :]
                    s = np.where(keep, s, -np.inf)
                m_new = s.max(1)
                mi_new = np.maximum(m, m_new)
                alpha, beta = np.exp(m - mi_new), np.exp(m_new - mi_new)
                p = np.exp(s - mi_new[:, None])
                l_ = alpha * l_ + beta * p.sum(1)
                acc = alpha[:, None] * acc + p @ f64(v[b, k0:k0 + bn])
                m = mi_new
        out[b, :bm] = acc / l_[:, None]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_as_written(causal: bool) -> None:
    """Literal semantics: the autotuned config sets BM/BN; the result holds the
    accumulator after all query blocks in rows 0..BM of each batch index (zeros
    elsewhere), normalised with the seed's l_i."""
    q, k, v = bf16(2, 256, 32), bf16(2, 256, 32), bf16(2, 256, 32)
    out = seeds.flash_attention(q, k, v, is_causal=causal)
    cfg = seeds.flash_attention.last_config
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    ref = _literal_flash(q, k, v, bm, bn, causal)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == q.shape
    assert not out[:, bm:].astype(np.float32).any()
    err = np.abs(f64(out) - ref).max()
    assert err <= 2.0 ** -8 * np.abs(ref).max() + 1e-3


def test_flash_attention_autotune_is_deterministic_and_reaches_context() -> None:
    q = bf16(1, 256, 64)
    seeds.flash_attention(q, q, q)
    first = dict(seeds.flash_attention.last_config)
    seeds.flash_attention(q, q, q)
    assert seeds.flash_attention.last_config == first
    text = seeds.flash_attention.inspect_ir("tile")
    assert f'["BLOCK_M", {first["BLOCK_M"]}]' in text
    assert f"tensor<{first['BLOCK_M']}x64xf32>" in text
