"""Tessera: a tile-first GPU programming model, implemented in Python.

``import tessera as ts`` gives the whole public API; ``from tessera import *`` gives the
names the specification's examples use bare (never names that shadow Python builtins
such as ``max``, ``sum``, ``abs``, ``round``, ``min`` and ``range``).
"""

from tessera import dist, graph, op, tile
from tessera.autodiff import (
    autodiff,
    custom_jvp,
    custom_vjp,
    grad,
    jvp,
    value_and_grad,
    vjp,
)
from tessera.errors import (
    ArgumentError,
    DimBindingError,
    DTypeError,
    GradError,
    InterpretError,
    IRParseError,
    IRVerifyError,
    PolicyError,
    ShapeError,
    StageError,
    TesseraError,
    TileContextError,
    TraceError,
    UnsupportedError,
)
from tessera.frontend.jit import JitFunction, inspect_ir, jit
from tessera.frontend.kernel import kernel
from tessera.frontend.ops import (
    abs,
    add,
    broadcast,
    broadcast_to,
    cast,
    conj,
    cos,
    div,
    e,
    equal,
    erf,
    exp,
    fft,
    gelu,
    gemm,
    greater,
    greater_equal,
    ifft,
    imag,
    less,
    less_equal,
    log,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mse,
    mul,
    neg,
    not_equal,
    pi,
    pow,
    real,
    relu,
    reshape,
    round,
    sign,
    sin,
    softmax,
    sqrt,
    sub,
    sum,
    tanh,
    transpose,
    where,
)
from tessera.frontend.tensor import Tensor, as_tensor
from tessera.lower import passes as _lowering_passes  # registers the lowering passes
from tessera.mesh_sim import DistTensor, ShardSpec
from tessera.mesh_sim.errors import MeshError, MeshShapeError, PlacementError, ShardingError
from tessera.mesh_sim.launch import index_launch
from tessera.mesh_sim.regions import Region, RegionConflictError, RegionError, read, reduce, write
from tessera.mesh_sim.spmd.api import all_gather, all_reduce, all_to_all, reduce_scatter
from tessera.numerics import (
    DType,
    Policy,
    PolicyClass,
    TensorSpec,
    accum,
    bf16,
    bfloat16,
    bool_,
    c64,
    c128,
    complex64,
    complex128,
    dtype,
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
    fp8_e4m3,
    fp8_e5m2,
    fp16,
    fp32,
    fp64,
    int8,
    int32,
    int64,
    loss_scale,
    parse_policy,
    precision_policy,
    stochastic_round,
    tf32,
)

__version__ = "0.1.0"
tensor = as_tensor

#: ``from tessera import *``: the names the specification's examples use bare
__all__ = [
    "DType",
    "Policy",
    "Region",
    "ShardSpec",
    "Tensor",
    "TesseraError",
    "accum",
    "all_gather",
    "autodiff",
    "bf16",
    "c64",
    "c128",
    "cast",
    "custom_jvp",
    "custom_vjp",
    "dist",
    "e8m0",
    "f16",
    "f32",
    "f64",
    "fft",
    "fp4",
    "fp4_e2m1",
    "fp6",
    "fp6_e2m3",
    "fp6_e3m2",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp16",
    "fp32",
    "fp64",
    "gelu",
    "gemm",
    "grad",
    "graph",
    "ifft",
    "index_launch",
    "inspect_ir",
    "int8",
    "int32",
    "jit",
    "jvp",
    "kernel",
    "loss_scale",
    "matmul",
    "mse",
    "op",
    "precision_policy",
    "read",
    "reduce",
    "relu",
    "softmax",
    "stochastic_round",
    "tf32",
    "tile",
    "value_and_grad",
    "vjp",
    "write",
]
# the PTX backend, imported on first use (it loads the CUDA bindings)
__all__ += ["aot", "check_against_reference", "launch"]

_BACKEND = ("aot", "check_against_reference", "launch")


def __getattr__(name: str) -> object:
    if name in _BACKEND:
        from tessera.ptx import api

        return getattr(api, name)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")
