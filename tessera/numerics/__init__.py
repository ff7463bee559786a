"""Numerics of tessera: formats, policies, conversion and correctly rounded reductions.

* :mod:`.formats` -- the :class:`DType` values (``f32``, ``bf16``, ``fp8_e4m3``, ...),
  their aliases, :func:`dtype` and :func:`promote`; RNE conversion with PTX
  ``satfinite`` saturation; Philox-4x32-10 and stochastic rounding.
* :mod:`.policy` -- ``dtype @accum(t) @stochastic_round @loss_scale(s)`` policies,
  ``parse_policy``, ``@precision_policy`` classes and ``Tensor["B", "D", bf16 @accum(f32)]``
  specs with their dim binding.
* :mod:`.reductions` -- correctly rounded matmul and sums (bitwise determinism) and the
  fixed float64 tree of tile row sums.
* :mod:`.transcendental` -- the specified f32 ``exp`` and its compiled vector loop.
"""

from tessera.numerics.formats.convert import convert, to_f64
from tessera.numerics.formats.dtypes import (
    DTYPES,
    DType,
    bf16,
    bfloat16,
    bool_,
    c64,
    c128,
    complex64,
    complex128,
    dtype,
    e2m1,
    e2m3,
    e3m2,
    e4m3,
    e5m2,
    e8m0,
    f16,
    f32,
    f64,
    float16,
    float32,
    float64,
    fp4,
    fp4_e2m1,
    fp6,
    fp6_e2m3,
    fp6_e3m2,
    fp8,
    fp8_e4m3,
    fp8_e5m2,
    fp16,
    fp32,
    fp64,
    from_numpy_dtype,
    half,
    i8,
    i32,
    i64,
    int8,
    int32,
    int64,
    promote,
    tf32,
    ue8m0,
)
from tessera.numerics.formats.e8m0 import to_e8m0
from tessera.numerics.formats.stochastic import philox4x32, philox_uint32, stochastic_round_array
from tessera.numerics.policy.annotations import DimEnv, TensorSpec, tensor_spec
from tessera.numerics.policy.modifiers import (
    Element,
    Modifier,
    Policy,
    PolicyClass,
    accum,
    accum_of,
    default_accum,
    element,
    loss_scale,
    loss_scale_of,
    parse_policy,
    precision_policy,
    stochastic_round,
    storage_of,
)
from tessera.numerics.reductions.rounding import (
    matmul_rounded,
    round_fraction,
    round_verified,
    sum_rounded,
)

sr_round = stochastic_round_array
"""Short name of :func:`stochastic_round_array` (``stochastic_round`` is the modifier)."""

__all__ = [
    "DTYPES", "DType", "DimEnv", "Element", "Modifier", "Policy", "PolicyClass", "TensorSpec",
    "accum", "accum_of", "bf16", "bfloat16", "bool_", "c64", "c128", "complex64",
    "complex128", "convert", "default_accum", "dtype", "e2m1", "e2m3", "e3m2", "e4m3",
    "e5m2", "e8m0", "element", "f16", "f32", "f64", "float16", "float32", "float64", "fp4",
    "fp4_e2m1", "fp6", "fp6_e2m3", "fp6_e3m2", "fp8", "fp8_e4m3", "fp8_e5m2", "fp16",
    "fp32", "fp64", "from_numpy_dtype", "half", "i8", "i32", "i64", "int8", "int32",
    "int64", "loss_scale", "loss_scale_of", "matmul_rounded", "parse_policy",
    "philox4x32", "philox_uint32", "precision_policy", "promote", "round_fraction",
    "round_verified", "sr_round", "stochastic_round", "stochastic_round_array",
    "storage_of", "sum_rounded", "tensor_spec", "tf32", "to_e8m0", "to_f64", "ue8m0",
]
