"""Errors raised when a program breaks one of the hardware's bit-level rules.

Each error names the rule it enforces and cites the document that states it, so a user
who hits one can look the rule up.
"""

from __future__ import annotations

from tessera.errors import TesseraError


class ArchError(TesseraError):
    """A value the sm_80 / sm_90a hardware cannot accept, or an illegal use of a unit."""

    kind = "hardware rule violation"


class AlignmentError(ArchError):
    """A shared-memory address that is not aligned as the instruction requires."""

    kind = "alignment error"


class DescriptorError(ArchError):
    """A wgmma matrix descriptor field that cannot be encoded, or a malformed descriptor."""

    kind = "matrix descriptor error"


class TensorMapError(ArchError):
    """A tensor map that breaks a rule of ``cuTensorMapEncodeTiled`` (cuda.h)."""

    kind = "tensor map error"


class MbarrierError(ArchError):
    """An illegal operation on an mbarrier object (PTX ISA sec. 9.7.13.15)."""

    kind = "mbarrier error"


class SharedMemoryLimitError(ArchError):
    """A kernel whose shared buffers exceed what one CTA may use on its target (CUDA C++
    Programming Guide, "Compute Capabilities": maximum shared memory per thread block)."""

    kind = "shared memory limit"
