"""A Hopper GEMM written with CuTe, CUTLASS's layout algebra (tests/ir/text/ptx/ptx_corpus/
cute_gemm.cu, compiled by nvcc): TMA loads with an L2 cache policy into a ring of three
128-byte swizzled stages, transaction-count mbarriers, ``wgmma`` with f32 accumulators
and a launch in clusters of two CTAs, run on the CPU by ``ts.ptx`` and compared bit for
bit with NumPy (small integers: every sum is exact in float32, in any order)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import ArgumentError
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import CORPUS

#: sizeof(GemmStorage): three stages of two 128 x 64 half tiles and six mbarriers,
#: rounded up to its 1024-byte alignment
SHARED_BYTES = 99328
rng = np.random.default_rng(3)


@pytest.fixture(scope="module")
def kernel() -> ts.ptx.PtxKernel:
    module = ts.ptx.load(CORPUS / "cute_gemm_sm90a.ptx")
    (name,) = module.kernels
    return module.kernel(name)


def cute_gemm(kernel: ts.ptx.PtxKernel, a: np.ndarray, b: np.ndarray,
              box_a: tuple[int, int] = (128, 64), shared: int = SHARED_BYTES) -> np.ndarray:
    """C = A B^T by the kernel: its parameters are (M, N, K), the CTA tile (no bytes
    that matter), the two TMA copy atoms (structs that begin with their tensor maps),
    C, C's leading dimension and the TiledMMA, whose first word says whether wgmma
    accumulates (CuTe's ScaleOut::One)."""
    (m, k), n = a.shape, b.shape[0]
    c = np.zeros((m, n), np.float32)
    args = [np.array([m, n, k], np.int32).tobytes(), bytes(1), bytes(256), bytes(256), c,
            np.int32(n), np.array([1, 0], np.uint32).tobytes()]
    kernel.run(grid=(m // 128, n // 128), block=128, args=args, shared_bytes=shared,
               tensor_maps={2: ts.ptx.tensor_map(a, box=box_a, swizzle=128),
                            3: ts.ptx.tensor_map(b, box=(128, 64), swizzle=128)})
    return c


@pytest.mark.parametrize("m, n, k", [(256, 128, 64), (256, 256, 256), (512, 128, 448)])
def test_the_cute_gemm_gives_numpys_product(kernel, m: int, n: int, k: int) -> None:
    """One k tile; four (the ring refilled once); seven (each stage refilled twice)."""
    a = rng.integers(-4, 5, (m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (n, k)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_array_equal(cute_gemm(kernel, a, b), want.astype(np.float32))


def test_a_tensor_map_whose_box_the_kernel_does_not_expect(kernel) -> None:
    """A's box of 64 rows instead of 128: each stage's barrier announces 32 KB and gets
    24 KB, so the first wait never completes, as it would hang on a GPU."""
    a = np.ones((256, 64), np.float16)
    with pytest.raises(TargetFault) as err:
        cute_gemm(kernel, a, a[:128], box_a=(64, 64))
    assert err.value.what == "mbarrier"
    assert "mbarrier.try_wait.parity" in str(err.value)
    assert "mbarrier phase never completes: expected 32768 tx bytes, got 24576" \
        in str(err.value)


def test_too_little_dynamic_shared_memory(kernel) -> None:
    """The barriers lie past the stages: 64 KB of dynamic shared memory ends before."""
    a = np.ones((256, 64), np.float16)
    with pytest.raises(TargetFault) as err:
        cute_gemm(kernel, a, a[:128], shared=65536)
    assert err.value.what == "out of bounds"
    assert "mbarrier.init" in str(err.value)
    assert "the CTA's 65536 bytes of shared memory are shared addresses 1024 to 66559" \
        in str(err.value)


def test_a_tensor_map_for_a_parameter_that_holds_none(kernel) -> None:
    """Parameter 4 is C's pointer: no tensor map begins there."""
    a = np.ones((256, 64), np.float16)
    with pytest.raises(ArgumentError, match=r"argument 4 .*\.u64\): a tensor map is a "
                                            "parameter of 128 bytes, or the start of"):
        kernel.run(grid=(2, 1), block=128, args=[bytes(12), bytes(1), bytes(256), bytes(256),
                                                   np.zeros(1, np.float32), np.int32(1),
                                                   bytes(8)],
                   shared_bytes=SHARED_BYTES,
                   tensor_maps={4: ts.ptx.tensor_map(a, box=(128, 64), swizzle=128)})
