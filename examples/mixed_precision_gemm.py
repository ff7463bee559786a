"""FP8 inputs, FP32 accumulation and output: the mixed-precision GEMM of the guide.

Seed: programming-model-guide.md, "Type System with Policies" (``mixed_precision_gemm``).

The float32 arguments are rounded into fp8_e4m3 on entry (round to nearest even,
saturating to +-448). ``ts.gemm`` then accumulates the products *exactly* and rounds
once to the declared accumulator, f32. The reference below does the same with NumPy:
the float64 product of fp8 values is exact here (every product has at most 8
significant bits and all of them fit in 53 bits together), so one ``astype(float32)``
gives the same bits, and the comparison is for exact equality.

Run: ``python examples/mixed_precision_gemm.py``
"""

import hashlib

import ml_dtypes
import numpy as np

import tessera as ts
from tessera import accum


# --- programming-model-guide.md (as written) -------------------------------------------
# Mixed precision computation
@ts.jit
def mixed_precision_gemm(
    A: ts.Tensor["M", "K", ts.fp8_e4m3 @accum(ts.f32)],
    B: ts.Tensor["K", "N", ts.fp8_e4m3 @accum(ts.f32)]
) -> ts.Tensor["M", "N", ts.f32]:
    """FP8 inputs, FP32 accumulation and output"""
    return ts.gemm(A, B)  # Automatic precision handling


def to_fp8(x: np.ndarray) -> np.ndarray:
    """Round into e4m3 as tessera does: clip to +-448 (satfinite), then RNE."""
    return np.clip(x, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn)


def main() -> None:
    rng = np.random.default_rng(1)
    A = (rng.standard_normal((32, 64)) * 4).astype(np.float32)
    B = (rng.standard_normal((64, 16)) * 4).astype(np.float32)
    A[0, 0] = 1000.0  # beyond e4m3's range: saturates to 448

    C = mixed_precision_gemm(A, B)
    print(ts.inspect_ir(mixed_precision_gemm), end="")
    ref = (to_fp8(A).astype(np.float64) @ to_fp8(B).astype(np.float64)).astype(np.float32)
    got = np.asarray(C)
    print(f"C: {C.shape} {C.element}; bits equal to the exact product rounded once: "
          f"{np.array_equal(got, ref)}")
    assert C.element == ts.f32 and got.dtype == np.float32
    assert np.array_equal(got, ref)
    print(f"A[0, 0] = {A[0, 0]} is stored as {float(to_fp8(A)[0, 0])} (satfinite)")
    print("sha256:", hashlib.sha256(got.tobytes()).hexdigest()[:16])
    print("OK: exact match with the float64 reference")


if __name__ == "__main__":
    main()
