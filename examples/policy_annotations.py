"""Numerics policies as types: the annotations of the seed documents.

Seeds: programming-model-guide.md, "Type System with Policies" (``x1``, ``x2``, ``x3``)
and overview-and-quickstart.md, "Numerical Policies" (``x`` with bare names).

A policy such as ``ts.bf16 @accum(ts.f32)`` is an immutable, hashable value: the storage
format plus modifiers. The string ``"bf16 @accum(f32)"`` parses to the same value. An
annotated argument of a ``@ts.jit`` function is converted to the storage format on
entry (round to nearest even; fp8/fp6/fp4 saturate to their largest finite value).

Run: ``python examples/policy_annotations.py``
"""

import ml_dtypes
import numpy as np

import tessera as ts
from tessera import accum, loss_scale, stochastic_round

# --- programming-model-guide.md, "Type System with Policies" (as written) ------------
# Basic types with accumulation policies
x1: ts.Tensor["B", "D", ts.fp8_e4m3 @accum(ts.f32)]
x2: ts.Tensor["B", "D", ts.bf16 @accum(ts.f32) @stochastic_round]
x3: ts.Tensor["B", "D", ts.fp6 @accum(ts.f32) @loss_scale(128.0)]

# --- overview-and-quickstart.md, "Numerical Policies" (bare names, as written) -------
from tessera import *

# Explicit precision control
x: Tensor["B", "D", fp8_e4m3 @accum(fp32) @loss_scale(128.0)]


@ts.jit
def store_fp8(v: ts.Tensor["B", "D", ts.fp8_e4m3 @accum(ts.f32)]) -> ts.Tensor["B", "D", ts.f32]:
    """Take an fp8 argument (converted on entry) and widen it back to f32."""
    return ts.cast(v, ts.f32)


def fp8_reference(v: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even into e4m3 with PTX ``satfinite`` (clip to +-448 first)."""
    return np.clip(v, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def main() -> None:
    specs = {name: globals()["__annotations__"][name] for name in ("x1", "x2", "x3", "x")}
    for name, spec in specs.items():
        pol = spec.element
        print(f"{name}: {spec}")
        print(f"    storage={pol.storage} accum={pol.accum} stochastic_round="
              f"{pol.stochastic_round} loss_scale={pol.loss_scale}")

    # The string form parses to the very same value as the built policy.
    built = ts.bf16 @accum(ts.f32)
    parsed = ts.parse_policy("bf16 @accum(f32)")
    assert parsed == built and hash(parsed) == hash(built)
    assert ts.Tensor["B", "D", "bf16 @accum(f32)"] == ts.Tensor["B", "D", built]
    assert specs["x"].element == ts.parse_policy("fp8_e4m3 @accum(fp32) @loss_scale(128.0)")
    assert ts.fp6 is ts.fp6_e2m3 and fp32 is ts.f32 and ts.dtype("fp32") is ts.f32
    print(f'"bf16 @accum(f32)" == ts.bf16 @accum(ts.f32): {parsed == built}')

    # An annotated argument is rounded into its storage format on entry.
    v = np.array([[0.1, 1.99, -7.7, 400.0, 1000.0, -1e9]], np.float32)
    got = np.asarray(store_fp8(v))
    want = fp8_reference(v)
    print(f"fp8_e4m3 storage of {v.ravel().tolist()}: {got.ravel().tolist()}")
    assert np.array_equal(got, want), (got, want)
    print("OK: policies match their string form; fp8 storage matches the NumPy reference")


if __name__ == "__main__":
    main()
