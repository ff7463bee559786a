"""A numerically stable softmax with bf16 input and output.

Seed: programming-model-guide.md, "Safe Numerical Operations"
(``numerically_stable_softmax``).

The function widens to f32, subtracts the row maximum, exponentiates, sums (exactly,
rounded once to f32) and divides; the result is rounded once more to bf16. Literal
semantics worth knowing: the row sum is at least 1 (the maximum contributes
``exp(0) = 1``), so adding ``1e-10`` in f32 never changes it; the epsilon is harmless
but has no effect.

Run: ``python examples/stable_softmax.py``
"""

import ml_dtypes
import numpy as np

import tessera as ts


# --- programming-model-guide.md (as written) -------------------------------------------
@ts.jit
def numerically_stable_softmax(x: ts.Tensor["B", "S", ts.bf16]) -> ts.Tensor["B", "S", ts.bf16]:
    """Numerically stable softmax with explicit precision control"""
    # Convert to FP32 for stability
    x_f32 = ts.cast(x, ts.f32)

    # Safe operations
    x_max = ts.max(x_f32, axis=-1, keepdims=True)
    exp_x = ts.exp(x_f32 - x_max)  # Prevent overflow
    sum_exp = ts.sum(exp_x, axis=-1, keepdims=True)

    # Safe division with epsilon
    softmax = exp_x / (sum_exp + 1e-10)

    # Cast back to BF16
    return ts.cast(softmax, ts.bf16)


@ts.jit
def naive_softmax(x: ts.Tensor["B", "S", ts.bf16]) -> ts.Tensor["B", "S", ts.bf16]:
    """The same without subtracting the maximum: exp overflows f32 for large inputs."""
    exp_x = ts.exp(ts.cast(x, ts.f32))
    return ts.cast(exp_x / ts.sum(exp_x, axis=-1, keepdims=True), ts.bf16)


def reference(x: np.ndarray) -> np.ndarray:
    """The seed's steps in float64, rounding to f32 where the graph does (before bf16)."""
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64)
    s = e.sum(axis=-1, keepdims=True).astype(np.float32).astype(np.float64)
    return (e / s).astype(np.float32).astype(np.float64)


def main() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 32)) * 40).astype(ml_dtypes.bfloat16)
    y = numerically_stable_softmax(x)
    got = np.asarray(y)
    assert y.element == ts.bf16 and got.dtype == ml_dtypes.bfloat16
    want = reference(x)
    # bf16 keeps 8 significant bits: the last rounding is within 2**-9 relative, or
    # half the smallest bf16 step (2**-134) where tiny values underflow to subnormals.
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2.0**-8, atol=2.0**-133)
    sums = got.astype(np.float64).sum(axis=-1)
    print(f"softmax of bf16 inputs in [{float(x.min())}, {float(x.max())}]: {y.shape} "
          f"{y.element}; row sums {np.round(sums, 3).tolist()}")

    naive = np.asarray(naive_softmax(x)).astype(np.float64)
    print(f"without the max subtraction: {int(np.isnan(naive).sum())} NaN of {naive.size} "
          "(exp overflows f32)")
    assert np.isnan(naive).any() and not np.isnan(got.astype(np.float64)).any()
    print("OK: within one bf16 rounding of the NumPy float64 reference")


if __name__ == "__main__":
    main()
