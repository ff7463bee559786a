"""Bit-level hardware rules of NVIDIA sm_80 and sm_90a, as plain NumPy functions.

This package knows nothing of Tessera's IR.  It states, one rule at a time, what the
hardware does with bits, so that the Target IR interpreter can execute a kernel exactly,
the PTX lowering can emit the right constants, and the CUDA launcher can build valid
tensor maps.  Every rule cites where it is written down: the PTX ISA (instruction
semantics, fragment layouts, descriptor formats, mbarrier) or cuda.h (tensor maps).

* :mod:`~tessera.arch.fragments` -- mma.sync and wgmma register fragment layouts;
* :mod:`~tessera.arch.ldmatrix` -- ``ldmatrix.m8n8.x{1,2,4}{.trans}.b16``;
* :mod:`~tessera.arch.swizzle` -- the 32B / 64B / 128B shared-memory swizzles and their
  two enum encodings;
* :mod:`~tessera.arch.descriptor` -- the 64-bit wgmma matrix descriptor and the operand
  it addresses in shared memory;
* :mod:`~tessera.arch.tma` -- tensor maps and TMA tile loads and stores;
* :mod:`~tessera.arch.mbarrier` -- the mbarrier phase / tx-count state machine;
* :mod:`~tessera.arch.mma` -- the golden numerics of one tensor-core instruction.
"""

from __future__ import annotations

from tessera.arch.descriptor import (
    MatrixDescriptor,
    decode_descriptor,
    encode_descriptor,
    load_operand,
    operand_addresses,
)
from tessera.arch.errors import (
    AlignmentError,
    ArchError,
    DescriptorError,
    MbarrierError,
    TensorMapError,
)
from tessera.arch.fragments import (
    FragmentLayout,
    from_fragments,
    mma_m16n8_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    pack_registers,
    to_fragments,
    unpack_registers,
    wgmma_accumulator,
    wgmma_accumulator_registers,
)
from tessera.arch.ldmatrix import ldmatrix
from tessera.arch.mbarrier import TX_LIMIT, MbarrierArray
from tessera.arch.mma import FORMATS, decode_elements, instruction_k, mma, mma_sync_fragments
from tessera.arch.swizzle import (
    Swizzle,
    check_swizzle_alignment,
    from_tma_swizzle,
    from_wgmma_layout,
    swizzle_address,
    swizzle_permutation,
    to_tma_swizzle,
    to_wgmma_layout,
)
from tessera.arch.tma import (
    PTX_ELEMENT_TYPES,
    Interleave,
    L2Promotion,
    OobFill,
    TensorMap,
    TensorMapDataType,
    row_major_2d,
    tma_data_type,
    tma_load,
    tma_store,
)

__all__ = [
    "FORMATS",
    "PTX_ELEMENT_TYPES",
    "TX_LIMIT",
    "AlignmentError",
    "ArchError",
    "DescriptorError",
    "FragmentLayout",
    "Interleave",
    "L2Promotion",
    "MatrixDescriptor",
    "MbarrierArray",
    "MbarrierError",
    "OobFill",
    "Swizzle",
    "TensorMap",
    "TensorMapDataType",
    "TensorMapError",
    "check_swizzle_alignment",
    "decode_descriptor",
    "decode_elements",
    "encode_descriptor",
    "from_fragments",
    "from_tma_swizzle",
    "from_wgmma_layout",
    "instruction_k",
    "ldmatrix",
    "load_operand",
    "mma",
    "mma_m16n8_c",
    "mma_m16n8k16_a",
    "mma_m16n8k16_b",
    "mma_m16n8k32_a",
    "mma_m16n8k32_b",
    "mma_sync_fragments",
    "operand_addresses",
    "pack_registers",
    "row_major_2d",
    "swizzle_address",
    "swizzle_permutation",
    "tma_data_type",
    "tma_load",
    "tma_store",
    "to_fragments",
    "to_tma_swizzle",
    "to_wgmma_layout",
    "unpack_registers",
    "wgmma_accumulator",
    "wgmma_accumulator_registers",
]
