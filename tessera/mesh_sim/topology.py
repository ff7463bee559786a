"""Hardware the cost model describes: device rooflines and NVLink/NVSwitch topologies.

Every constant here is documented with its public source in ``docs/cost-model.md``.
Units are SI throughout: seconds, bytes, bytes per second, FLOP per second.

* :class:`DeviceSpec` -- one GPU's roofline: peak dense throughput per number format
  and HBM bandwidth (:data:`H100_SXM`, :data:`B200`).
* :class:`Topology` -- GPUs behind NVSwitches: line rate per GPU, the *bus bandwidth*
  collectives reach (calibrated on measured NCCL runs), latencies, trays
  (:data:`NVL72`, :data:`H100_NODE`).

Bandwidths named ``bus_bw`` follow the nccl-tests convention: the bandwidth ``B`` in
the alpha-beta formulas of :mod:`.cost`, which a ring reaches on every link.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessera.errors import MeshError

GB = 1e9
TB = 1e12
US = 1e-6


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU's roofline: dense peak FLOP/s per format and HBM bytes/s.

    ``peak`` maps a format family (``"bf16"``, ``"fp8"``, ``"fp4"``, ``"tf32"``,
    ``"fp32"``, ``"fp64"``) to its dense (no 2:4 sparsity) tensor-core peak; ``"fp32"``
    is the non-tensor (CUDA core) rate, which elementwise work and plain f32 matmuls
    use. A family the device lacks falls back to the next wider one it has.
    """

    name: str
    peak: Mapping[str, float]
    hbm_bw: float
    hbm_bytes: float

    def peak_for(self, family: str) -> float:
        """The dense peak FLOP/s for a format family (falling back to a wider one)."""
        order = ("fp4", "fp6", "fp8", "bf16", "tf32", "fp32", "fp64")
        if family not in order:
            raise MeshError(f"unknown format family {family!r}",
                            hint=f"use one of {', '.join(order)}")
        for f in order[order.index(family):]:
            if f in self.peak:
                return self.peak[f]
        return self.peak["fp32"]

    @property
    def ridge(self) -> float:
        """FLOP per byte where the bf16 tensor peak meets the HBM bandwidth."""
        return self.peak_for("bf16") / self.hbm_bw


#: NVIDIA H100 SXM5 (datasheet, dense = half the "with sparsity" figures).
H100_SXM = DeviceSpec(
    name="H100 SXM",
    peak={"fp8": 1979 * TB, "bf16": 989 * TB, "tf32": 494.5 * TB, "fp32": 67 * TB,
          "fp64": 67 * TB},
    hbm_bw=3.35 * TB, hbm_bytes=80 * GB)

#: NVIDIA Blackwell B200 as configured in GB200 NVL72 (per-GPU figures of the
#: GB200 NVL72 specification, dense = half the sparse tensor figures).
B200 = DeviceSpec(
    name="B200 (GB200 NVL72)",
    peak={"fp4": 10_000 * TB, "fp8": 5_000 * TB, "bf16": 2_500 * TB, "tf32": 1_250 * TB,
          "fp32": 80 * TB, "fp64": 40 * TB},
    hbm_bw=8 * TB, hbm_bytes=186 * GB)


@dataclass(frozen=True)
class Topology:
    """GPUs joined by NVLink through NVSwitches: every GPU reaches every other in one
    switch hop, so a collective's cost depends on the group size, not on placement.

    ``alpha`` is the per-step latency of ring and tree collectives (what NCCL pays per
    hop of an algorithm); ``hop_latency`` the latency of one NVLink hop through a
    switch (point-to-point, all-to-all, in-switch reduction). ``bus_bw`` is the bus
    bandwidth ring collectives reach; ``nvls_bw`` the bus bandwidth of an all-reduce
    reduced inside the NVSwitches (NVLink SHARP, "NVLS"), or None where the switch
    cannot reduce. ``all_reduce_algorithm`` is the algorithm the measured bus
    bandwidth was calibrated with, which the cost model uses unless told otherwise.
    """

    name: str
    n_gpus: int
    links_per_gpu: int
    link_bw: float  # bytes/s per link per direction
    bus_bw: float
    nvls_bw: float | None
    alpha: float
    hop_latency: float
    gpus_per_tray: int
    switch_trays: int
    switch_chips: int
    device: DeviceSpec
    all_reduce_algorithm: str = "ring"
    calibration: tuple[tuple[str, float, float], ...] = field(default=())

    @property
    def line_bw(self) -> float:
        """Bytes/s one GPU can send (and, at once, receive): links x link rate."""
        return self.links_per_gpu * self.link_bw

    @property
    def compute_trays(self) -> int:
        """Trays holding the GPUs."""
        return math.ceil(self.n_gpus / self.gpus_per_tray)

    @property
    def aggregate_bw(self) -> float:
        """All GPUs' NVLink bandwidth, both directions (NVIDIA's "130 TB/s" for NVL72)."""
        return 2 * self.line_bw * self.n_gpus

    def tray_of(self, gpu: int) -> int:
        """The compute tray that holds GPU ``gpu``."""
        self.check_gpu(gpu)
        return gpu // self.gpus_per_tray

    def check_gpu(self, gpu: int) -> int:
        """``gpu`` if it is a GPU of this topology, else MeshError."""
        if not isinstance(gpu, int) or not 0 <= gpu < self.n_gpus:
            raise MeshError(f"GPU {gpu!r} is not in {self.name} ({self.n_gpus} GPUs)",
                            hint="map at most as many mesh devices as the topology has GPUs")
        return gpu


def fit_ring(n: int, points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(alpha, B)`` of the ring all-reduce ``2(n-1)a + 2(n-1)/n S/B`` through two
    measured ``(S bytes, bus bandwidth)`` points (nccl-tests reports bus bandwidth).

    Measured time is ``2(n-1)/n S / busbw``; two points give two linear equations.
    """
    (s1, b1), (s2, b2) = points
    c = 2 * (n - 1) / n
    t1, t2 = c * s1 / b1, c * s2 / b2
    bw = c * (s2 - s1) / (t2 - t1)
    alpha = (t1 - c * s1 / bw) / (2 * (n - 1))
    return alpha, bw


#: nccl-tests all-reduce bus bandwidth measured on a full 72-GPU rack (bytes, bytes/s).
NVL72_ALLREDUCE_MEASURED = ((512 * 2**20, 586 * GB), (4 * 2**30, 835 * GB),
                            (8 * 2**30, 847 * GB))
_NVL72_ALPHA, _NVL72_BUS = fit_ring(72, [NVL72_ALLREDUCE_MEASURED[0],
                                         NVL72_ALLREDUCE_MEASURED[2]])

#: GB200 NVL72: 72 B200 GPUs in 18 compute trays of 4, 9 NVLink switch trays (18
#: NVSwitch chips); NVLink 5 = 18 links x 50 GB/s per direction = 900 GB/s per GPU.
NVL72 = Topology(
    name="GB200 NVL72", n_gpus=72, links_per_gpu=18, link_bw=50 * GB,
    bus_bw=round(_NVL72_BUS / GB, 1) * GB, nvls_bw=None,
    alpha=round(_NVL72_ALPHA / US, 2) * US, hop_latency=1 * US,
    gpus_per_tray=4, switch_trays=9, switch_chips=18, device=B200,
    calibration=tuple(("all_reduce", s, b) for s, b in NVL72_ALLREDUCE_MEASURED))

#: An 8-GPU H100 SXM node (DGX/HGX H100): 4 third-generation NVSwitch chips; NVLink 4
#: = 18 links x 25 GB/s per direction = 450 GB/s per GPU; about 370 GB/s effective for
#: ring collectives and about 480 GB/s bus bandwidth for an all-reduce with NVLS.
H100_NODE = Topology(
    name="H100 SXM x8 (NVSwitch)", n_gpus=8, links_per_gpu=18, link_bw=25 * GB,
    bus_bw=370 * GB, nvls_bw=480 * GB, alpha=1 * US, hop_latency=1 * US,
    gpus_per_tray=8, switch_trays=1, switch_chips=4, device=H100_SXM,
    all_reduce_algorithm="nvls")

TOPOLOGIES = {"nvl72": NVL72, "h100": H100_NODE, "h100x8": H100_NODE}


def topology(spec: Any = "nvl72") -> Topology:
    """A Topology from itself or a name: ``"nvl72"`` or ``"h100"`` (``"h100x8"``)."""
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, str) and spec.lower() in TOPOLOGIES:
        return TOPOLOGIES[spec.lower()]
    raise MeshError(f"unknown topology {spec!r}",
                    hint=f"use a Topology or one of {sorted(TOPOLOGIES)}")


__all__ = ["B200", "GB", "H100_NODE", "H100_SXM", "NVL72", "NVL72_ALLREDUCE_MEASURED",
           "TB", "TOPOLOGIES", "US", "DeviceSpec", "Topology", "fit_ring", "topology"]
