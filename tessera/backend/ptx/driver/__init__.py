"""PTX text to a running kernel: assemble PTX with ptxas or nvJitLink, pack kernel
parameters, launch kernels through the CUDA driver API, encode TMA tensor maps, and
write and read ahead-of-time kernel bundles.

The submodules are ``assemble``, ``params``, ``launch``, ``tensormap`` and ``aot``. The
``assemble`` function is not re-exported here (import it from
:mod:`tessera.backend.ptx.driver.assemble`): a package attribute of that name would
hide the submodule.
Nothing here needs a GPU until a kernel is loaded or launched; the functions that do need
one raise :class:`GpuUnavailable` with the reason when there is none.
"""

from __future__ import annotations

from tessera.backend.ptx.driver.aot import Bundle, BundleError, Selection, load, save
from tessera.backend.ptx.driver.assemble import (
    Assembled,
    AssemblyError,
    KernelStats,
    ToolchainMissing,
    assemble_nvjitlink,
    find_ptxas,
    parse_only,
)
from tessera.backend.ptx.driver.launch import (
    CudaError,
    CudaModule,
    GpuUnavailable,
    cuda_available,
)
from tessera.backend.ptx.driver.params import PackedParams, ParamSpec, pack_params, param_specs
from tessera.backend.ptx.driver.tensormap import encode_tensor_map

__all__ = [
    "Assembled",
    "AssemblyError",
    "Bundle",
    "BundleError",
    "CudaError",
    "CudaModule",
    "GpuUnavailable",
    "KernelStats",
    "PackedParams",
    "ParamSpec",
    "Selection",
    "ToolchainMissing",
    "assemble_nvjitlink",
    "cuda_available",
    "encode_tensor_map",
    "find_ptxas",
    "load",
    "pack_params",
    "param_specs",
    "parse_only",
    "save",
]
