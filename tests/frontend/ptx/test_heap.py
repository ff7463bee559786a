"""The device heap of kernels' ``malloc`` and ``free`` (nvcc's PTX of the corpus): blocks
in thread order, kept from launch to launch in one ``DeviceHeap``, NULL when the heap
cannot hold a request, reuse of given-back blocks; a write past a block, a double free,
a use after free and a free of no block are faults; ``ptx.malloc``/``ptx.free`` render
to the calls nvcc writes, which ptxas takes and ``ts.ptx`` reads back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault
from tessera.interp.target.ptx.heap import HEAP_BASE, HEAP_BYTES, DeviceHeap
from tests.frontend.ptx.corpus import NVCC_PTX


@pytest.fixture(scope="module")
def mod():
    return ts.ptx.load(NVCC_PTX)


def _keep(mod, heap: DeviceHeap, n: int = 4, poke: int = 1) -> np.ndarray:
    kept = np.zeros(4, np.uint64)
    mod.kernel("heap_keep").run(block=4, args=[kept, np.int32(n), np.int32(poke)], heap=heap)
    return kept


def test_blocks_in_thread_order_and_null_when_the_heap_is_full(mod) -> None:
    sizes = np.array([3, 5, HEAP_BYTES // 4, 2, 7], np.int32)  # the third asks for 8 MiB
    sums = np.zeros(5, np.int32)
    mod.kernel("heap_sum").run(block=5, args=[sizes, sums])
    want = [sum(t + i for i in range(n)) for t, n in enumerate(sizes)]
    want[2] = -1  # the 8 MiB block does not fit beside the two before it
    np.testing.assert_array_equal(sums, want)
    heap = DeviceHeap()
    kept = _keep(mod, heap)
    # 16 bytes a block, 16 unused after each: the same addresses in every run
    np.testing.assert_array_equal(kept, HEAP_BASE + 32 * np.arange(4))


def test_the_heap_outlives_a_launch_and_reuses_what_was_given_back(mod) -> None:
    heap = DeviceHeap()
    kept = _keep(mod, heap)
    out = np.zeros(4, np.int32)
    mod.kernel("heap_release").run(block=4, args=[kept, out, np.int32(0)], heap=heap)
    np.testing.assert_array_equal(out, 0)  # block[0]: never written, the heap's zeros
    again = _keep(mod, heap, poke=0)
    np.testing.assert_array_equal(np.sort(again), np.sort(kept))  # the blocks reused
    mod.kernel("heap_release").run(block=4, args=[again, out, np.int32(0)], heap=heap)
    np.testing.assert_array_equal(out, np.arange(4))


@pytest.mark.parametrize("mistake, what", [
    (1, r"invalid free: free\(0x10000000000\): the block was given back already"),
    (2, r"use after free: global read of 4 bytes at address 0x10000000000, inside the "
        r"16-byte block from device malloc, which free gave back"),
    (3, r"invalid free: free\(0x10000000004\): no block that device malloc gave starts"),
])
def test_heap_mistakes_are_faults_of_the_first_thread(mod, mistake: int, what: str) -> None:
    heap = DeviceHeap()
    kept = _keep(mod, heap)
    if mistake == 3:
        kept += 4  # a pointer into the block, not its start
    with pytest.raises(TargetFault, match=what) as err:
        mod.kernel("heap_release").run(block=4, args=[kept, np.zeros(4, np.int32),
                                                      np.int32(mistake % 3)], heap=heap)
    assert err.value.thread == 0


def test_a_write_past_a_block_is_out_of_bounds(mod) -> None:
    with pytest.raises(TargetFault, match="global write of 4 bytes at address 0x10000000010, "
                       "4 bytes past the end of the 16-byte block from device malloc") as err:
        _keep(mod, DeviceHeap(), poke=4)
    assert err.value.thread == 0


def test_malloc_and_free_render_assemble_and_read_back(tmp_path: Path) -> None:
    from tessera.backend.ptx.render import render
    from tessera.ir.dialects.target import RegType, Return
    from tessera.ir.dialects.target.ops import Binary, Special, Store
    from tessera.ir.dialects.target.printf import DeviceFree, DeviceMalloc
    from tests.backend.ptx.render.test_render import c, do, kernel, one, ptxas

    fn, b, (out,) = kernel("blocks", [RegType("u64")], block=4)
    tid = one(b, Special("tid.x"))
    size = one(b, Binary("mul", "u32", "wide"), one(b, Binary("add", "u32"), tid,
                                                  c(b, 1, "u32")), c(b, 8, "u32"))
    block = one(b, DeviceMalloc(), size)
    do(b, Store("global", "u64"), one(b, Binary("add", "u64"), out, one(
        b, Binary("mul", "u32", "wide"), tid, c(b, 8, "u32"))), block)
    do(b, DeviceFree(), block)
    do(b, Return())
    text = render(fn)
    assert "call.uni (retval0), malloc, (param0);" in text and "call.uni free" in text
    ptxas(text, "sm_80", tmp_path)
    got = np.zeros(4, np.uint64)
    heap = DeviceHeap()
    ts.ptx.load(text).kernel("blocks").run(block=4, args=[got], heap=heap)
    # 8, 16, 24 and 32 bytes: rooms of 16, 16, 32 and 32 bytes, each with 16 unused after
    np.testing.assert_array_equal(got, HEAP_BASE + np.array([0, 32, 64, 112]))
    assert sorted(heap.given_back) == got.tolist()
