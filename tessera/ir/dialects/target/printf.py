"""``ptx.printf``: CUDA's device ``printf``, the call ``vprintf(format, args)`` that nvcc
writes for it (CUDA C++ Programming Guide, "Formatted Output"); and ``ptx.assertfail``,
the call ``__assertfail(message, file, line, function, char_size)`` that a failed
device ``assert`` makes ("Assertion").

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


__all__ = ["AssertFail", "Printf"]
