"""Tensor maps (``CUtensorMap``) for TMA: ``cuTensorMapEncodeTiled``'s arguments, checked
against cuda.h's rules without a GPU (the rules live in :mod:`tessera.arch.tma`), and
encoded through the driver where one exists."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from tessera.backend.ptx.driver import launch
from tessera.errors import ArgumentError


def encode_tensor_map(dtype: str, global_address: int, global_dims: Sequence[int],
                      global_strides: Sequence[int], box_dims: Sequence[int],
                      element_strides: Sequence[int] | None = None, *, swizzle: int = 0,
                      interleave: int = 0, l2_promotion: int = 0, oob_fill: int = 0) -> bytes:
    """Encode a TMA descriptor with ``cuTensorMapEncodeTiled``; returns its 128 bytes.

    ``dtype`` is a PTX element name (``"bf16"``, ``"e4m3"``...); dimensions run innermost
    first; ``global_strides`` are the rank-1 outer byte strides; ``swizzle`` uses the
    driver's enum (0 none, 1 32B, 2 64B, 3 128B).
    """
    # left None, the TensorMap's ``strides`` supplies cuda.h's default of all ones
    strides = tuple(element_strides) if element_strides is not None else None
    return encode(tensor_map(dtype=dtype, global_address=global_address,
                             global_dims=tuple(global_dims),
                             global_strides=tuple(global_strides), box_dims=tuple(box_dims),
                             element_strides=strides, swizzle=swizzle, interleave=interleave,
                             l2_promotion=l2_promotion, oob_fill=oob_fill))


def encode(tmap: Any) -> bytes:
    """The 128-byte ``CUtensorMap`` of a :class:`tessera.arch.tma.TensorMap`, after
    checking it against cuda.h's rules (which need no GPU)."""
    from tessera.arch.swizzle import to_tma_swizzle

    tmap.validate()
    driver = launch._ready_driver()  # looked up at call time (tests replace it)
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t  # the bindings take no plain ints in lists

    def call() -> Any:
        return driver.cuTensorMapEncodeTiled(
            getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{tmap.dtype.name}"),
            tmap.rank, tmap.global_address, [u64(d) for d in tmap.global_dims],
            [u64(s) for s in tmap.global_strides], [u32(b) for b in tmap.box_dims],
            [u32(e) for e in tmap.strides], driver.CUtensorMapInterleave(int(tmap.interleave)),
            driver.CUtensorMapSwizzle(to_tma_swizzle(tmap.swizzle)),
            driver.CUtensorMapL2promotion(int(tmap.l2_promotion)),
            driver.CUtensorMapFloatOOBfill(int(tmap.oob_fill)))

    result = call()
    if result[0] in (driver.CUresult.CUDA_ERROR_INVALID_CONTEXT,
                     driver.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED):
        # the driver encodes only inside a live context: outside a launch (or after the
        # last module released the primary context), take the primary one
        launch.ensure_context(driver, force=True)
        result = call()
    encoded = launch._call(driver, "cuTensorMapEncodeTiled", result)
    return ctypes.string_at(int(encoded.getPtr()), 128)


def tensor_map(dtype: str, global_address: int, global_dims: tuple[int, ...],
               global_strides: tuple[int, ...], box_dims: tuple[int, ...],
               element_strides: tuple[int, ...] | None, swizzle: int, interleave: int,
               l2_promotion: int, oob_fill: int) -> Any:
    """The :class:`tessera.arch.tma.TensorMap` of ``cuTensorMapEncodeTiled``'s arguments
    (enums in the driver's codes, ``dtype`` a PTX element name)."""
    from tessera.arch import tma  # imported here: only tensor-map users need it
    from tessera.arch.swizzle import from_tma_swizzle

    data_type = tma.tma_data_type(dtype)
    try:
        return tma.TensorMap(
            dtype=data_type, global_address=global_address,
            global_dims=global_dims, global_strides=global_strides, box_dims=box_dims,
            element_strides=element_strides, interleave=tma.Interleave(interleave),
            swizzle=from_tma_swizzle(swizzle), l2_promotion=tma.L2Promotion(l2_promotion),
            oob_fill=tma.OobFill(oob_fill))
    except ValueError as err:
        raise ArgumentError(f"invalid tensor-map enum value: {err}",
                            hint="use the cuda.h codes for interleave, l2_promotion and "
                                 "oob_fill") from None


__all__ = ["encode", "encode_tensor_map", "tensor_map"]
