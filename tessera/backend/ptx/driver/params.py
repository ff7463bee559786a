"""Kernel parameter layout and packing for ``cuLaunchKernel``.

The CUDA driver copies a kernel's parameters into its parameter space, where each one sits
at an offset aligned to its natural alignment (CUDA Driver API, ``cuLaunchKernel``: "This
places the burden on the application of knowing each kernel parameter's size and
alignment/padding within the buffer").  :func:`pack_params` builds that buffer once; the
same bytes serve both launch forms: ``kernelParams`` (an array of pointers, one into the
buffer per parameter) and ``CU_LAUNCH_PARAM_BUFFER_POINTER`` (the buffer itself).
"""

from __future__ import annotations

import ctypes
import math
import operator
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import ArgumentError

# PTX fundamental types allowed in the .param state space and their sizes in bytes
# (PTX ISA 9.x, sec. 5.2.2 "Fundamental Types").
_SCALAR_SIZES: dict[str, int] = {
    "u8": 1, "s8": 1, "b8": 1,
    "u16": 2, "s16": 2, "b16": 2, "f16": 2, "bf16": 2,
    "u32": 4, "s32": 4, "b32": 4, "f32": 4,
    "u64": 8, "s64": 8, "b64": 8, "f64": 8,
}  # fmt: skip

_ARRAY = re.compile(r"^(?:\.align\s+(\d+)\s+)?\.(\w+)\s*(?:\w+\s*)?\[\s*(\d+)\s*\]$")
# `.ptr`, `.global`, `.shared` etc. qualify pointer parameters without changing the layout.
_QUALIFIERS = re.compile(r"\.ptr\b|\.(?:global|shared|const|local)\b|\.align\s+\d+")


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One kernel parameter: its name, kind (``u32``, ``f32``, ``bytes`` ...), size, alignment."""

    name: str
    kind: str
    size: int
    align: int


def param_spec(name: str, ptx_type: str) -> ParamSpec:
    """Build the :class:`ParamSpec` of one parameter from its PTX type text.

    ``ptx_type`` is a scalar type such as ``".u64"`` or ``".f32"`` (pointer qualifiers such
    as ``.ptr .global .align 16`` are accepted and ignored), or an opaque byte array such as
    ``".align 64 .b8 [128]"`` (a ``CUtensorMap``).
    """
    text = " ".join(ptx_type.split())
    array = _ARRAY.match(text)
    if array:
        align_text, elem, count = array.groups()
        if elem not in _SCALAR_SIZES:
            raise ArgumentError(f"parameter {name!r}: unknown PTX element type .{elem}",
                                hint="use one of " + ", ".join(f".{t}" for t in _SCALAR_SIZES))
        elem_size = _SCALAR_SIZES[elem]
        align = int(align_text) if align_text else elem_size
        if align <= 0 or align & (align - 1):
            raise ArgumentError(f"parameter {name!r}: alignment {align} is not a power of two")
        return ParamSpec(name, "bytes", elem_size * int(count), max(align, elem_size))
    scalar = _QUALIFIERS.sub(" ", text).split()
    if len(scalar) != 1 or scalar[0].lstrip(".") not in _SCALAR_SIZES:
        raise ArgumentError(
            f"parameter {name!r}: cannot read the PTX type {ptx_type!r}",
            hint="write a scalar type like '.u64' or an array like '.align 64 .b8 [128]'",
        )
    kind = scalar[0].lstrip(".")
    return ParamSpec(name, kind, _SCALAR_SIZES[kind], _SCALAR_SIZES[kind])


def param_specs(signature: Sequence[tuple[str, str] | ParamSpec]) -> tuple[ParamSpec, ...]:
    """Turn a signature — ``(name, ptx type)`` pairs or ready specs — into specs."""
    return tuple(s if isinstance(s, ParamSpec) else param_spec(*s) for s in signature)


def entry_signature(ptx: str, entry: str) -> list[tuple[str, str]]:
    """Read the ``(name, ptx type)`` parameter list of ``.entry <entry>`` from PTX text."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", ptx)
    if match is None:
        if re.search(rf"\.entry\s+{re.escape(entry)}\b", ptx):
            return []  # an entry with no parameter list
        raise ArgumentError(f"the PTX has no kernel '.entry {entry}'",
                            hint="check the kernel name against the PTX's .entry lines")
    pairs = []
    for decl in match.group(1).split(","):
        decl = " ".join(decl.replace(".param", " ").split())
        if not decl:
            continue
        array = re.match(r"^(.*?)(\w+)\s*\[\s*(\d+)\s*\]$", decl)
        if array:
            pairs.append((array.group(2), f"{array.group(1).strip()} [{array.group(3)}]"))
        else:
            *type_words, pname = decl.split()
            pairs.append((pname, " ".join(type_words)))
    return pairs


def layout(specs: Sequence[ParamSpec]) -> tuple[tuple[int, ...], int]:
    """Offsets of each parameter and the total size of the parameter buffer."""
    offsets, end = [], 0
    for spec in specs:
        offset = -(-end // spec.align) * spec.align
        offsets.append(offset)
        end = offset + spec.size
    return tuple(offsets), end


def _encode_int(spec: ParamSpec, value: Any) -> bytes:
    try:
        number = operator.index(value)
    except TypeError:
        raise ArgumentError(
            f"parameter {spec.name!r} (.{spec.kind}) needs an integer, got {type(value).__name__}",
            hint="pass a Python or NumPy integer",
        ) from None
    bits = spec.size * 8
    low = 0 if spec.kind[0] == "u" else -(1 << (bits - 1))
    high = (1 << bits) if spec.kind[0] in "ub" else (1 << (bits - 1))
    if not low <= number < high:
        raise ArgumentError(
            f"parameter {spec.name!r}: {number} does not fit .{spec.kind} "
            f"(range {low} .. {high - 1})",
            hint="pass a value in range or declare a wider parameter type",
        )
    return (number % (1 << bits)).to_bytes(spec.size, "little")


def _encode_float(spec: ParamSpec, value: Any) -> bytes:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(
            f"parameter {spec.name!r} (.{spec.kind}) needs a number, got {type(value).__name__}",
        ) from None
    if spec.kind == "f64":
        return struct.pack("<d", number)
    if spec.kind == "f32":
        try:
            return struct.pack("<f", number)
        except OverflowError:
            encoded, finite = b"", False
    else:
        dtype = np.float16 if spec.kind == "f16" else ml_dtypes.bfloat16
        with np.errstate(over="ignore"):
            converted = np.array(number).astype(dtype)
        encoded, finite = converted.tobytes(), bool(np.isfinite(converted))
    if math.isfinite(number) and not finite:
        raise ArgumentError(
            f"parameter {spec.name!r}: {number} overflows .{spec.kind}",
            hint="pass a value within the format's finite range",
        )
    return encoded


def encode_value(spec: ParamSpec, value: Any) -> bytes:
    """The little-endian bytes of one parameter value, checked against its type."""
    if spec.kind == "bytes":
        try:
            data = bytes(memoryview(value))
        except TypeError:
            raise ArgumentError(
                f"parameter {spec.name!r} is an opaque {spec.size}-byte block; "
                f"got {type(value).__name__}",
                hint="pass bytes (for a tensor map: the result of encode_tensor_map)",
            ) from None
        if len(data) != spec.size:
            raise ArgumentError(
                f"parameter {spec.name!r} needs exactly {spec.size} bytes, got {len(data)}")
        return data
    if spec.kind[0] == "f" or spec.kind == "bf16":
        return _encode_float(spec, value)
    return _encode_int(spec, value)


@dataclass(frozen=True, slots=True)
class PackedParams:
    """Parameter values laid out for ``cuLaunchKernel``: ``buffer[offsets[i]:]`` holds value i."""

    specs: tuple[ParamSpec, ...]
    offsets: tuple[int, ...]
    buffer: bytes

    def value_bytes(self, index: int) -> bytes:
        """The bytes of parameter ``index`` inside the buffer."""
        return self.buffer[self.offsets[index]:self.offsets[index] + self.specs[index].size]


def pack_params(signature: Sequence[tuple[str, str] | ParamSpec], values: Sequence[Any]
                ) -> PackedParams:
    """Check ``values`` against ``signature`` and lay them out in one parameter buffer."""
    specs = param_specs(signature)
    if len(values) != len(specs):
        names = ", ".join(s.name for s in specs) or "none"
        raise ArgumentError(
            f"the kernel takes {len(specs)} parameter(s) ({names}), got {len(values)}",
            hint="pass one value per kernel parameter, in order",
        )
    offsets, size = layout(specs)
    buffer = bytearray(size)
    for spec, offset, value in zip(specs, offsets, values):
        buffer[offset:offset + spec.size] = encode_value(spec, value)
    return PackedParams(specs, offsets, bytes(buffer))


class NativeParams:
    """The packed buffer copied into C memory, with both launch forms' pointer arrays.

    Keep this object alive until ``cuLaunchKernel`` returns: the driver reads through the
    pointers during the call.
    """

    # The base is aligned to 128 bytes so every parameter, a 64-byte-aligned tensor map
    # included, sits at its natural alignment in host memory too.
    _BASE_ALIGN = 128

    def __init__(self, packed: PackedParams):
        size = len(packed.buffer)
        self._storage = ctypes.create_string_buffer(size + self._BASE_ALIGN)
        start = ctypes.addressof(self._storage)
        self.base = -(-start // self._BASE_ALIGN) * self._BASE_ALIGN
        ctypes.memmove(self.base, packed.buffer, size)
        pointers = [self.base + offset for offset in packed.offsets]
        self._pointers = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        self._size = ctypes.c_size_t(size)
        # CU_LAUNCH_PARAM_BUFFER_POINTER = 1, CU_LAUNCH_PARAM_BUFFER_SIZE = 2, END = 0
        # (cuda.h); the values are fixed by the driver ABI.
        self._extra = (ctypes.c_void_p * 5)(1, self.base, 2, ctypes.addressof(self._size), 0)

    @property
    def kernel_params(self) -> int:
        """Address of the ``void*[]`` array for ``cuLaunchKernel``'s ``kernelParams``."""
        return ctypes.addressof(self._pointers)

    @property
    def extra(self) -> int:
        """Address of the ``extra`` array that passes the packed buffer instead."""
        return ctypes.addressof(self._extra)

    def read(self, index: int, size: int) -> bytes:
        """The bytes the ``kernelParams`` entry ``index`` points at (for checking)."""
        return ctypes.string_at(self._pointers[index], size)
