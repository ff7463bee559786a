"""The cost model against hand-computed values and the measurements it is calibrated on.

Every expected number below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera.mesh_sim.cost import (
    CostModel,
    Work,
    call_work,
    nvls_all_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_broadcast,
    ring_reduce_scatter,
    send_recv,
    switch_all_to_all,
    tree_all_reduce,
)
from tessera.mesh_sim.topology import (
    B200,
    H100_NODE,
    H100_SXM,
    NVL72,
    NVL72_ALLREDUCE_MEASURED,
    Topology,
    fit_ring,
    topology,
)

from .util import raises_here

US, GB, MiB = 1e-6, 1e9, 2**20


def test_formulas_by_hand():
    a, b = 2 * US, 100 * GB
    s = 800e6  # 800 MB: S/B = 8 ms
    # ring all-reduce, n = 8: 2*7*2us + 2*7/8*8ms = 28us + 14ms
    assert ring_all_reduce(8, s, a, b) == pytest.approx(28e-6 + 14e-3)
    # tree, n = 8: 2*3*2us + 2*8ms; n = 9 has depth ceil(log2 9) = 4
    assert tree_all_reduce(8, s, a, b) == pytest.approx(12e-6 + 16e-3)
    assert tree_all_reduce(9, s, a, b) == pytest.approx(16e-6 + 16e-3)
    # in-switch: 2 hops + 2*7/8*8ms
    assert nvls_all_reduce(8, s, a, b) == pytest.approx(4e-6 + 14e-3)
    # all-gather / reduce-scatter, n = 4: 3*2us + 3/4*8ms
    assert ring_all_gather(4, s, a, b) == pytest.approx(6e-6 + 6e-3)
    assert ring_reduce_scatter(4, s, a, b) == ring_all_gather(4, s, a, b)
    # all-to-all, n = 4: 1 hop + 3/4*8ms; broadcast, n = 4: 3*2us + 8ms
    assert switch_all_to_all(4, s, a, b) == pytest.approx(2e-6 + 6e-3)
    assert ring_broadcast(4, s, a, b) == pytest.approx(6e-6 + 8e-3)
    assert send_recv(s, a, b) == pytest.approx(2e-6 + 8e-3)
    for fn in (ring_all_reduce, tree_all_reduce, ring_all_gather, switch_all_to_all):
        assert fn(1, s, a, b) == 0.0  # one rank moves nothing


def test_nvl72_topology_constants():
    t = topology("nvl72")
    assert (t.n_gpus, t.links_per_gpu, t.link_bw) == (72, 18, 50 * GB)
    assert t.line_bw == 900 * GB  # 18 links x 100 GB/s bidirectional = 900 GB/s each way
    assert (t.compute_trays, t.gpus_per_tray, t.switch_trays, t.switch_chips) == (18, 4, 9, 18)
    assert t.aggregate_bw == pytest.approx(130e12, rel=0.01)  # NVIDIA's "130 TB/s"
    assert [t.tray_of(g) for g in (0, 3, 4, 71)] == [0, 0, 1, 17]
    assert t.device is B200 and t.hop_latency == 1 * US
    h = topology("h100")
    assert (h.n_gpus, h.line_bw, h.bus_bw, h.nvls_bw) == (8, 450 * GB, 370 * GB, 480 * GB)


def test_nvl72_calibration_reproduces_the_measured_bus_bandwidth():
    # fit_ring solves two equations; check its algebra on a made-up ring first.
    alpha, bw = 3 * US, 800 * GB
    pts = [(s, 2 * 71 / 72 * s / ring_all_reduce(72, s, alpha, bw)) for s in (1e8, 1e10)]
    assert fit_ring(72, pts) == pytest.approx((alpha, bw))
    m = CostModel("nvl72")
    assert NVL72.alpha == pytest.approx(4.18 * US) and NVL72.bus_bw == pytest.approx(872.9 * GB)
    for size, measured in NVL72_ALLREDUCE_MEASURED:
        got = m.collective("all_reduce", size, 72)
        assert got.algorithm == "ring"
        assert got.busbw == pytest.approx(measured, rel=0.02)


def test_h100_node_bus_bandwidths():
    m = CostModel("h100")
    big = 8 * 2**30
    assert m.collective("all_reduce", big, 8).algorithm == "nvls"
    assert m.collective("all_reduce", big, 8).busbw == pytest.approx(480 * GB, rel=0.01)
    assert m.collective("all_gather", big, 8).busbw == pytest.approx(370 * GB, rel=0.01)
    assert m.collective("all_reduce", big, 8, "ring").busbw == pytest.approx(370 * GB,
                                                                              rel=0.01)
    # small messages are latency bound: ring 2*7*1us = 14us, NVLS 2 hops = 2us
    assert m.collective("all_reduce", 8, 8, "ring").seconds == pytest.approx(14 * US, rel=1e-3)
    assert m.collective("all_reduce", 8, 8, "best").algorithm == "nvls"


def test_bandwidth_conventions():
    c = CostModel("h100").collective("all_gather", 1e9, 8)
    assert c.algbw == pytest.approx(1e9 / c.seconds)
    assert c.busbw == pytest.approx(7 / 8 * c.algbw)
    assert CostModel("h100").collective("ppermute", 1e6, 2).kind == "send_recv"


def test_roofline():
    m = CostModel("h100")
    # 1 TFLOP of bf16 matmul moving 1 GB: 1e12/989e12 = 1.011 ms > 1e9/3.35e12 = 0.299 ms
    c = m.compute(1e12, 1e9, "bf16", tensor_flops=1e12)
    assert c.bound == "compute" and c.seconds == pytest.approx(1e12 / 989e12)
    # fp8 doubles the tensor rate; f32 falls back to the 67 TFLOP/s non-tensor rate
    assert m.compute(1e12, 0, "fp8", 1e12).seconds == pytest.approx(1e12 / 1979e12)
    assert m.compute(1e12, 0, "fp32", 1e12).seconds == pytest.approx(1e12 / 67e12)
    # elementwise: 1e9 FLOPs over 12 GB is memory bound: 12e9/3.35e12 = 3.58 ms
    e = m.compute(1e9, 12e9)
    assert e.bound == "memory" and e.seconds == pytest.approx(12e9 / 3.35e12)
    assert H100_SXM.ridge == pytest.approx(989 / 3.35)  # about 295 FLOP/byte
    # FP6 runs at the FP8 rate on Blackwell; Hopper has no FP4, so FP8's rate
    assert B200.peak_for("fp6") == 5_000e12 and B200.peak_for("fp4") == 10_000e12
    assert H100_SXM.peak_for("fp4") == 1979e12
    assert CostModel("nvl72").compute(2.5e15, 0, "bf16", 2.5e15).seconds == pytest.approx(1)


def test_work_of_a_graph_function():
    @ts.jit
    def f(x, w, b):
        return ts.tanh(x @ w + b)

    x = np.zeros((8, 16), np.float32)
    w = np.zeros((16, 32), np.float32)
    b = np.zeros(32, np.float32)
    got = call_work(f, x, w, b)
    # matmul 2*8*32*16 = 8192; add and tanh 256 each; bytes (128+512+32+256)*4
    assert got == Work(8192 + 512, 8192, (128 + 512 + 32 + 256) * 4, "fp32")
    g = ts.jit(lambda x, w: x @ w)
    import ml_dtypes

    xb = x.astype(ml_dtypes.bfloat16)
    assert call_work(g, xb, w[:, :16].T.astype(ml_dtypes.bfloat16).T).family == "bf16"
    assert call_work(lambda a: a, x).nbytes == x.nbytes  # opaque: bytes only
    assert got.scaled(2).flops == 2 * got.flops


def test_errors():
    raises_here(ts.TesseraError, lambda: topology("dgx9000"), "unknown topology")
    raises_here(ts.TesseraError, lambda: CostModel().collective("gossip", 1, 2), "gossip")
    raises_here(ts.TesseraError, lambda: CostModel().collective("all_reduce", 1, 2, "nvls"),
                "no algorithm")
    raises_here(ts.TesseraError, lambda: NVL72.tray_of(72), "GPU 72")
    raises_here(ts.TesseraError, lambda: B200.peak_for("fp2"), "fp2")
    assert isinstance(H100_NODE, Topology) and math.isfinite(H100_NODE.aggregate_bw)
