"""The calls of CUDA's device runtime library that nvcc writes: ``ptx.printf``, the
device ``printf``'s ``vprintf(format, args)`` (CUDA C++ Programming Guide, "Formatted
Output"); ``ptx.assertfail``, the call ``__assertfail(message, file, line, function,
char_size)`` that a failed device ``assert`` makes ("Assertion"); and ``ptx.malloc`` and
``ptx.free``, the device heap's ``malloc(size)`` and ``free(pointer)`` ("Dynamic Global
Memory Allocation and Operations").

``format`` is the generic address of the NUL-terminated format string (a ``.global``
array of the module), ``args`` that of a buffer holding the arguments one after another,
each at an offset aligned to its size: 4-byte integers (``char`` and ``short``
promoted), 8-byte ``long``/``long long``, pointers and doubles (``float`` promoted), or
0 when the format takes none. The result is what ``printf`` returns on the device: the
number of arguments the format consumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import RegType, reg_of


@register_op
@dataclass(frozen=True)
class Printf(Op):
    """``call.uni (r), vprintf, (format, args)``: each active thread's formatted text,
    in thread order; the result (s32) counts the arguments its format consumed."""

    name: ClassVar[str] = "ptx.printf"
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        for t in operands:
            reg_of(self, t, "u64")
        return (RegType("s32"),)


@register_op
@dataclass(frozen=True)
class AssertFail(Op):
    """``call.uni __assertfail, (message, file, line, function, char_size)``: the active
    threads' ``assert`` failed; the launch ends, as a GPU's does with
    ``cudaErrorAssert``. Operands: the three strings' generic addresses and the line."""

    name: ClassVar[str] = "ptx.assertfail"
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 4)
        for t, elem in zip(operands, ("u64", "u64", "u32", "u64")):
            reg_of(self, t, elem)
        return ()


@register_op
@dataclass(frozen=True)
class DeviceMalloc(Op):
    """``call.uni (p), malloc, (size)``: a block of ``size`` bytes (u64) from the device
    heap for each active thread, in thread order; the generic address, or 0 when the
    heap cannot hold it."""

    name: ClassVar[str] = "ptx.malloc"
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u64")
        return (RegType("u64"),)


@register_op
@dataclass(frozen=True)
class DeviceFree(Op):
    """``call.uni free, (p)``: each active thread gives back the heap block at ``p``
    (0: nothing), in thread order."""

    name: ClassVar[str] = "ptx.free"
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u64")
        return ()


__all__ = ["AssertFail", "DeviceFree", "DeviceMalloc", "Printf"]
