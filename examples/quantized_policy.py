"""A user-defined precision policy: int8 storage with an f32 scale.

Seed: programming-model-guide.md, "Custom Numeric Policies" (``QuantizedPolicy``).

``@ts.precision_policy`` turns the class into an element type (a ``PolicyClass``):
storage int8, compute f32, accumulate f32. Its methods are reachable on the policy
itself, with ``self`` bound. Literal semantics of the seed, as tessera runs it:

* ``quantize`` is annotated ``-> ts.int8`` but returns a *tuple* ``(q, scale)``:
  ``scale = max|x| / 127`` (an f32 division, rounded once), ``q = round(x / scale)``
  (round half to even) converted to int8. Python does not enforce return annotations.
* ``dequantize(q, scale)`` is ``q.astype(f32) * scale``, rounded once to f32.
* As an annotation, ``ts.Tensor["D", "D", QuantizedPolicy]`` stores int8 values; a
  value converted to it is rounded to int8 *without* any scale. The scale travels
  separately, as in the seed's own ``dequantize(x, scale)`` signature.

Run: ``python examples/quantized_policy.py``
"""

import numpy as np

import tessera as ts


# --- programming-model-guide.md (as written) -------------------------------------------
# Define custom precision policy
@ts.precision_policy
class QuantizedPolicy:
    storage = ts.int8
    scale = ts.f32
    compute = ts.f32
    accumulate = ts.f32

    def quantize(self, x: ts.f32) -> ts.int8:
        scale = ts.max(ts.abs(x)) / 127.0
        return ts.round(x / scale).astype(ts.int8), scale

    def dequantize(self, x: ts.int8, scale: ts.f32) -> ts.f32:
        return x.astype(ts.f32) * scale

# Use custom policy
quantized_weight: ts.Tensor["D", "D", QuantizedPolicy]


@ts.jit
def quantized_linear(x: ts.Tensor["B", "D", ts.f32],
                     w: ts.Tensor["D", "D", QuantizedPolicy],
                     scale: ts.Tensor[ts.f32]) -> ts.Tensor["B", "D", ts.f32]:
    """``x @ dequantize(w, scale)``: the weight arrives as int8 storage."""
    return x @ QuantizedPolicy.dequantize(w, scale)


def quantize_reference(w: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """The seed's quantize in NumPy: each f32 operation rounded once to f32."""
    scale = np.float32(np.max(np.abs(w)).astype(np.float64) / 127.0)
    q = np.rint((w.astype(np.float64) / np.float64(scale)).astype(np.float32))
    return q.astype(np.int8), scale


def main() -> None:
    spec = globals()["__annotations__"]["quantized_weight"]
    pol = spec.element
    print(f"quantized_weight: {spec}  (storage={pol.storage}, compute={pol.compute}, "
          f"accumulate={pol.accum_dtype}, scale={pol.scale})")

    rng = np.random.default_rng(3)
    W = rng.standard_normal((8, 8)).astype(np.float32)
    result = QuantizedPolicy.quantize(W)
    assert isinstance(result, tuple) and len(result) == 2  # the seed returns (q, scale)
    q, scale = result
    q_ref, scale_ref = quantize_reference(W)
    assert q.element == ts.int8 and scale.element == ts.f32
    assert np.array_equal(np.asarray(q), q_ref) and np.asarray(scale) == scale_ref
    print(f"quantize -> (q: {q.shape} {q.element}, scale: {float(scale):.6g} {scale.element})")

    W_hat = QuantizedPolicy.dequantize(q, scale)
    deq_ref = (q_ref.astype(np.float64) * np.float64(scale_ref)).astype(np.float32)
    assert np.array_equal(np.asarray(W_hat), deq_ref)
    err = float(np.max(np.abs(np.asarray(W_hat) - W)))
    print(f"max |dequantize(quantize(W)) - W| = {err:.4f} <= scale/2 = {float(scale) / 2:.4f}")
    assert err <= float(scale) / 2 * (1 + 1e-6)

    x = rng.standard_normal((3, 8)).astype(np.float32)
    y = quantized_linear(x, q, scale)
    y_ref = (x.astype(np.float64) @ deq_ref.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(y), y_ref, rtol=1e-6, atol=1e-6)
    arg_line = ts.inspect_ir(quantized_linear).splitlines()[1].strip()
    print("graph signature:", arg_line.split(" -> ")[0].removeprefix("graph.func "))
    print("OK: quantize/dequantize and the quantized linear layer match NumPy")


if __name__ == "__main__":
    main()
