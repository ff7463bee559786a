"""The SM constants of the static performance estimate, each with its source.

Throughputs are per SM and per clock; the clock is the one the datasheet's tensor-core
peak implies. Sources (docs/ptx-backend.md, "Static performance estimate", lists them):

* [H] NVIDIA H100 Tensor Core GPU datasheet: H100 SXM dense BF16/FP16 989.4 TFLOP/s
  (1979 with sparsity), FP8 1979, INT8 1979 TOPS, TF32 494.7, 3.35 TB/s HBM3; and the NVIDIA H100
  Tensor Core GPU Architecture whitepaper (2022): 132 SMs, per SM 128 FP32, 64 FP64 and
  64 INT32 lanes, 4 warp schedulers, 228 KiB shared memory, 64 K registers, at most
  2048 threads and 32 blocks per SM. 989.4e12 / (132 SMs x 4096 FLOP/clk) = 1.83 GHz.
* [P] CUDA C++ Programming Guide, "Arithmetic Instructions" (throughput per clock per
  SM, compute capability 9.0): 16 special-function results (``ex2``, ``lg2``, ``rcp``,
  ``rsqrt``) and 16 conversions to or from 64-bit types (charged to f64 conversions
  only: an integer widening is a register move); 32 warp shuffles.
* [A] NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs at 1.41 GHz,
  312 TFLOP/s dense BF16 (2048 FLOP/clk/SM), 624 TOPS dense INT8, 2.04 TB/s (SXM4
  80 GB), 164 KiB shared memory per SM.
* [L] Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture"
  (IPDPS 2024, arXiv:2402.13499) and its extended version "Dissecting the NVIDIA Hopper
  Architecture through Microbenchmarking and Multiple Level Analysis"
  (arXiv:2501.12084): global-memory latency of several hundred cycles on Hopper, and
  TMA reaching the copy bandwidth of ``cp.async``; the latencies below are round
  figures of that order, chosen, not measured here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.arch.limits import A100, H100, TargetLimits


@dataclass(frozen=True)
class SMHardware:
    """One GPU's per-SM rates and limits, and the latencies the estimate charges."""

    name: str
    limits: TargetLimits  # SM count, HBM bandwidth, per-block limits
    clock_hz: float
    tensor_flops_per_clk: dict[str, int]  # dense, per SM, by input format
    lanes_per_clk: dict[str, int] = field(default_factory=dict)  # per pipe class
    schedulers: int = 4  # warp instructions issued per clock per SM
    shared_per_sm: int = 228 * 1024
    registers_per_sm: int = 65536
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    memory_latency: int = 600  # cycles from a TMA/cp.async/ld issue to its data [L]
    barrier_latency: int = 24  # cycles a bar.sync or mbarrier wait costs when ready
    wgmma_latency: int = 128  # cycles from a wgmma group's issue to its wait returning
    l2_bandwidth_ratio: float = 3.0  # L2-to-SM bandwidth over HBM bandwidth (chosen)

    @property
    def sms(self) -> int:
        return self.limits.sms

    @property
    def hbm_bytes_per_clk(self) -> float:
        """HBM bytes per clock for the whole GPU."""
        return self.limits.hbm_bytes_per_s / self.clock_hz

    def tensor_rate(self, fmt: str) -> int:
        """Dense tensor-core FLOP per clock per SM for inputs of ``fmt``."""
        return self.tensor_flops_per_clk.get(fmt, self.tensor_flops_per_clk["bf16"])

    def peak_flops(self, fmt: str) -> float:
        """Dense tensor-core FLOP/s of the whole GPU for inputs of ``fmt``."""
        return self.tensor_rate(fmt) * self.sms * self.clock_hz


_LANES = {"f32": 128, "f64": 64, "int": 64, "sfu": 16, "shfl": 32, "mem": 32,
          "tensor": 32, "sync": 32}

#: H100 SXM5 [H], [P], [L]
H100_SXM = SMHardware(
    "H100 SXM", H100, 1.83e9,
    {"bf16": 4096, "f16": 4096, "tf32": 2048, "e4m3": 8192, "e5m2": 8192, "s8": 8192,
     "u8": 8192},
    dict(_LANES))

#: A100 SXM4 [A]: 64 FP32 and 32 FP64 lanes per SM; the memory latency is of the same order.
A100_SXM = SMHardware(
    "A100 SXM", A100, 1.41e9,
    {"bf16": 2048, "f16": 2048, "tf32": 1024, "s8": 4096, "u8": 4096},
    {**_LANES, "f32": 64, "f64": 32},
    shared_per_sm=164 * 1024, threads_per_sm=2048, memory_latency=600)

DEVICES = {"h100": H100_SXM, "a100": A100_SXM}

__all__ = ["A100_SXM", "DEVICES", "H100_SXM", "SMHardware"]
