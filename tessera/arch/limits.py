"""Per-launch resource limits of the targets, for the scheduler's cost model.

H100 SXM5 (sm_90a): 132 SMs; 227 KiB of shared memory per thread block (of 228 KiB per
SM, opt-in above 48 KiB); 65,536 32-bit registers per SM and per block, at most 255 per
thread; 3.35 TB/s of HBM3 bandwidth (NVIDIA H100 Tensor Core GPU Architecture
whitepaper, 2022; CUDA C++ Programming Guide, "Compute Capabilities", table 21).
A100 SXM4 (sm_80): 108 SMs, 163 KiB of shared memory per block, 65,536 registers,
2.04 TB/s (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetLimits:
    """What one kernel launch may use on a target, and how fast memory is."""

    name: str
    sms: int
    shared_per_block: int  # bytes
    registers_per_block: int  # 32-bit registers
    hbm_bytes_per_s: float

    @property
    def register_bytes(self) -> int:
        """The register file one block may use, in bytes."""
        return 4 * self.registers_per_block


H100 = TargetLimits("sm_90a", 132, 227 * 1024, 65536, 3.35e12)
A100 = TargetLimits("sm_80", 108, 163 * 1024, 65536, 2.04e12)
TARGETS = {"sm_90a": H100, "sm_80": A100}

__all__ = ["A100", "H100", "TARGETS", "TargetLimits"]
