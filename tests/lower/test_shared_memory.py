"""Kernels whose shared buffers exceed the 48 KiB of static shared memory: one dynamic
``.extern .shared`` array at the offsets the Target IR interpreter uses, ptxas accepts
it, the interpreter gives the tile interpreter's bits, and a kernel over its target's
per-CTA maximum is refused at its line before ptxas (CUDA C++ Programming Guide,
"Compute Capabilities": 163 KiB on 8.0, 99 KiB on 8.6 and 8.9, 227 KiB on 9.0)."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.arch.errors import SharedMemoryLimitError
from tessera.arch.limits import SHARED_BASE
from tessera.backend.ptx.render import render
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.interp.target.runner import _shared_layout
from tessera.ir.core import Block, Function
from tessera.ir.dialects.target import KERNEL, Return
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.lower.emit import TargetEmitter
from tessera.lower.shared import shared_plan
from tests.lower.test_lowering import example

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(48)


@ts.kernel
def reverse(data: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    """out = data reversed, through two shared halves behind a small flag buffer."""
    ctx = ts.tile.context()
    flag = ts.tile.alloc_shared((4,), ts.int32)
    lo = ts.tile.alloc_shared((N // 2,), ts.f32)
    hi = ts.tile.alloc_shared((N // 2,), ts.f32)
    if ts.tile.local_id() < 4:
        flag[ts.tile.local_id()] = 1
    for i in ts.tile.range(ts.tile.local_id(), N // 2, ctx.group_size):
        lo[i] = data[i]
        hi[i] = data[N // 2 + i]
    ts.tile.barrier()
    for i in ts.tile.range(ts.tile.local_id(), N // 2, ctx.group_size):
        out[i] = hi[N // 2 - 1 - i]
        out[N // 2 + i] = lo[N // 2 - 1 - i]


def _offsets(ptx: str) -> list[int]:
    """The offsets into ``smem`` that the PTX takes buffer addresses at."""
    return [int(m.group(1) or 0) for m in re.finditer(r"mov\.u32 %r\d+, smem(?:\+(\d+))?;",
                                                      ptx)]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_big_buffers_are_dynamic_at_the_interpreters_offsets(target: str) -> None:
    n = 16384  # two 32 KiB halves
    data = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    compiled = compile_kernel(reverse, data, out, target=target, grid=1, group_size=128)
    ptx = compiled.ptx
    assert ".extern .shared .align 16 .b8 smem[];" in ptx
    assert not re.search(r"^\s*\.shared", ptx, re.MULTILINE)  # no static buffer left
    layout, size = _shared_layout(compiled.kernel)
    # the interpreter's addresses: the PTX's offsets into smem[], which starts at shared
    # address 1024 (the kilobyte below is reserved for system use)
    assert sorted(_offsets(ptx)) == sorted(a - SHARED_BASE for a in layout.values()) == [
        0, 16, 16 + 4 * n // 2]
    assert compiled.shared_bytes == size == 16 + 4 * n
    stats = compiled.assemble().stats["reverse"]
    assert stats.smem == 0  # nothing static: all of it comes with the launch
    ts.check_against_reference(reverse, data, out, backend="target", target=target, grid=1,
                               group_size=128)
    got = np.zeros(n, np.float32)
    ts.launch(reverse, 1, (data, got), backend="target", target=target, group_size=128)
    assert np.array_equal(got, data[::-1])


def test_small_buffers_stay_static() -> None:
    data = np.arange(256, dtype=np.float32)
    compiled = compile_kernel(reverse, data, np.zeros_like(data), target="sm_80", grid=1,
                              group_size=128)
    assert ".extern" not in compiled.ptx and ".shared .align 16 .b8 smem1[512];" in compiled.ptx
    assert compiled.shared_bytes == 0


# (sm_90a's 227 KiB is every kernel's limit: tracing refuses more, for every target)
@pytest.mark.parametrize(("target", "n", "limit"), [("sm_80", 50000, 166912)])
def test_a_kernel_over_its_targets_limit_is_refused_at_its_line(target: str, n: int,
                                                                limit: int) -> None:
    data = np.zeros(n, np.float32)
    need = 16 + 4 * n
    with pytest.raises(SharedMemoryLimitError) as info:
        compile_kernel(reverse, data, np.zeros_like(data), target=target, grid=1,
                       group_size=128)
    err = info.value
    source = Path(__file__).read_text().splitlines()
    assert err.loc.file == __file__ and "reverse" in "".join(source[err.loc.line - 1:
                                                                     err.loc.line + 1])
    assert f"needs {need:,} bytes" in err.message and f"{limit:,} bytes" in err.message
    assert f"{2 * n:,} bytes at {__file__}:" in err.message  # each half, with its line


def test_sm90a_allows_what_sm80_refuses() -> None:
    data = rng.standard_normal(50000).astype(np.float32)  # 200,016 bytes
    compiled = compile_kernel(reverse, data, np.zeros_like(data), target="sm_90a", grid=1,
                              group_size=128)
    assert compiled.shared_bytes == 200016
    compiled.assemble()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_double_buffered_gemm_at_big_tiles(target: str) -> None:
    """Two stages of 128x64 and 64x128 bf16 tiles: 64 KiB of operand buffers."""
    kernel = example("double_buffered_gemm").double_buffered_gemm
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    c = np.zeros((128, 128), np.float32)
    compiled = compile_kernel(kernel, a, b, c, target=target, tile_shape=(128, 128, 64))
    align = 1024 if target == "sm_90a" else 16  # the TMA buffers' 128-byte swizzle atoms
    assert f".extern .shared .align {align} .b8 smem[];" in compiled.ptx
    assert compiled.shared_bytes == shared_plan(compiled.kernel).total >= 4 * 16384
    layout, _ = _shared_layout(compiled.kernel)
    assert sorted(_offsets(compiled.ptx)) == sorted(a - SHARED_BASE for a in layout.values())
    assert compiled.assemble().stats[kernel.name].smem == 0
    ts.check_against_reference(kernel, a, b, c, backend="target", target=target,
                               tile_shape=(128, 128, 64))


def test_flash_attention_128_blocks_on_sm90a_is_dynamic() -> None:
    fa = example("flash_attention").flash_attention
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(BF16) for _ in range(3))
    config = dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2)
    compiled = compile_kernel(fa, q, k, v, is_causal=True, target="sm_90a", config=config)
    assert ".extern .shared .align 1024 .b8 smem[];" in compiled.ptx
    assert compiled.shared_bytes > 48 * 1024
    compiled.assemble()


def _hand_kernel(sizes: list[int], target: str) -> Function:
    body = Block()
    e = TargetEmitter(body)
    for k, size in enumerate(sizes):
        e.one(SharedAlloc(f"buf{k}", size, 128))
    e.op(Return())
    return Function("k", body, [], KERNEL, {"target": target, "block": [32]})


def test_the_renderer_checks_hand_written_target_ir() -> None:
    assert ".extern .shared .align 128 .b8 smem[];" in render(_hand_kernel([40000, 20000],
                                                                           "sm_80"))
    assert ".shared .align 128 .b8 buf1[8000];" in render(_hand_kernel([4000, 8000], "sm_80"))
    with pytest.raises(SharedMemoryLimitError, match="needs 180,096 bytes"):
        render(_hand_kernel([100000, 80000], "sm_80"))
    render(_hand_kernel([100000, 80000], "sm_90a"))
    with pytest.raises(SharedMemoryLimitError, match=r"the 232,448 bytes \(227 KiB\)"):
        render(_hand_kernel([200000, 40000], "sm_90a"))
