"""Tessera's own PTX read back by ``ts.ptx``: the example kernels, lowered for both
targets and rendered to text, run from that text in the CFG mode and agree with the
structured Target IR they were rendered from (sm_90a: TMA, mbarrier, wgmma with
descriptors; sm_80: cp.async, ldmatrix, mma.sync)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TensorMapArg, run_target
from tessera.ir.dialects.target import RegType

ROOT = Path(__file__).resolve().parents[3]
BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(11)


def _example(name: str) -> Any:
    path = ROOT / "examples" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_ptx_rt_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _ptx_args(compiled: Any, targs: list[Any]) -> list[Any]:
    out = []
    for p, a in zip(compiled.kernel.args, targs):
        if isinstance(a, TensorMapArg):
            out.append(ts.ptx.tensor_map(a.array, a.box, a.swizzle, elem=a.elem))
        elif isinstance(a, np.ndarray) and a.ndim:
            out.append(a)
        else:
            assert isinstance(p.type, RegType)
            from tessera.interp.target.state import DTYPES

            out.append(DTYPES[p.type.elem].type(a))
    return out


def _round_trip(kernel: Any, *args: Any, target: str, **launch: Any) -> None:
    compiled = ts.compile_kernel(kernel, *args, target=target, **launch)
    prep, _ = kernel.specialise(tuple(args), dict(launch))
    structured, _ = target_arguments(compiled, [np.copy(v) if isinstance(v, np.ndarray)
                                                else v for v in prep.runtime])
    run_target(compiled.kernel, structured)
    from_text, _ = target_arguments(compiled, [np.copy(v) if isinstance(v, np.ndarray)
                                               else v for v in prep.runtime])
    k = ts.ptx.load(compiled.ptx).kernel(compiled.name)
    k.run(grid=compiled.grid, block=compiled.block, args=_ptx_args(compiled, from_text),
          shared_bytes=compiled.shared_bytes)  # a pipelined kernel's ring is dynamic
    for s, t in zip(structured, from_text):
        s = s.array if isinstance(s, TensorMapArg) else s
        t = t.array if isinstance(t, TensorMapArg) else t
        if isinstance(s, np.ndarray) and s.ndim:
            # mma results round to f32 per instruction in PTX registers; the structured
            # interpreter keeps them exact until used: equal within f32 accumulation,
            # or one unit in the last place of a bf16 output
            tol = 2.0 ** -7 if s.dtype == BF16 else 1e-5
            np.testing.assert_allclose(t.astype(np.float64), s.astype(np.float64),
                                       rtol=tol, atol=tol)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_gemm(target: str) -> None:
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    _round_trip(_example("gemm"), a, b, np.zeros((128, 128), np.float32), target=target,
                tile_shape=(64, 64, 64))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_double_buffered_gemm(target: str) -> None:
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    _round_trip(_example("double_buffered_gemm"), a, b, np.zeros((128, 128), np.float32),
                target=target, tile_shape=(64, 64, 64))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_flash_attention(target: str) -> None:
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(BF16) for _ in range(3))
    config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
    _round_trip(_example("flash_attention"), q, k, v, is_causal=True, target=target,
                config=config)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_saxpy_and_softmax(target: str) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    _round_trip(_example("saxpy"), x, np.ones(1000, np.float32), np.float32(2.0),
                target=target)
    s = rng.standard_normal((64, 128)).astype(np.float32)
    _round_trip(_example("row_softmax"), s, np.zeros_like(s), target=target)


@pytest.mark.parametrize("config", [{}, {"num_warps": 12, "schedule": "pingpong"}])
def test_warp_specialised_gemm_whose_ring_wraps(config: dict[str, Any]) -> None:
    """Eight K steps through a ring of four stages: the producer warp waits for the
    consumers to release each stage, at another instruction than theirs."""
    a = rng.standard_normal((128, 512)).astype(BF16)
    b = rng.standard_normal((512, 256)).astype(BF16)
    _round_trip(_example("gemm"), a, b, np.zeros((128, 256), np.float32), target="sm_90a",
                tile_shape=(128, 128, 64), config=config)


def test_warp_specialised_causal_attention_whose_ring_wraps() -> None:
    q, k, v = (rng.standard_normal((1, 256, 64)).astype(BF16) for _ in range(3))
    config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=12, num_stages=2, defer_pv="fa3")
    _round_trip(_example("flash_attention"), q, k, v, is_causal=True, target="sm_90a",
                config=config)
