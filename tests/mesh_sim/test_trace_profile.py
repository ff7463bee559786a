"""``profile()``: what it records, its summary, its trace, and the recording hook."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.moe import MoE
from tessera.dist.pipeline.run import Pipeline, Stage
from tessera.mesh_sim.cost import ring_all_reduce
from tessera.mesh_sim.profile import current, observe_collective, profile, quiet
from tessera.mesh_sim.topology import NVL72

from .test_trace import problems

all_reduce = observe_collective(dist.all_reduce)
all_gather = observe_collective(dist.all_gather)
ppermute = observe_collective(dist.ppermute)


@ts.jit
def layer(x, W):
    return ts.tanh(x @ W)


def nvl72_mesh():
    return dist.mesh(axes=("dp", "tp", "pp"), devices=range(72))


def test_a_direct_all_reduce_by_hand():
    mesh = nvl72_mesh()
    part = np.ones((256, 1024), np.float32)  # 1 MiB per device
    t = dist.from_shards([part] * 72, mesh=mesh, partial="tp")
    with profile("nvl72") as prof:
        out = all_reduce(t, "tp")
    assert np.array_equal(np.asarray(out), part * 9)
    s = prof.summary()["all_reduce"]
    want_us = ring_all_reduce(9, 2**20, NVL72.alpha, NVL72.bus_bw) * 1e6
    assert s.calls == 1 and s.total_us == pytest.approx(want_us)
    assert s.nbytes == 2**20 and s.algbw == pytest.approx(2**20 / (want_us * 1e-6))
    assert s.busbw == pytest.approx(2 * 8 / 9 * s.algbw)
    assert len(prof.events) == 72  # every GPU takes part (8 groups of 9)
    assert prof.total_us == pytest.approx(want_us)


def test_gather_and_permute_sizes():
    mesh = dist.mesh(axes=("tp",), shape=(4,))
    t = dist.from_numpy(np.zeros((8, 4), np.float32), mesh=mesh,
                        layout=dist.ShardSpec(("row",), ("tp",)))
    full = dist.all_gather(t, "tp")
    with profile("h100") as prof:
        all_gather(t, "tp")             # the output, 128 bytes, counts
        ppermute(t, "tp", [(0, 1), (1, 2)])
        all_gather(full, "tp")          # already replicated: nothing moves
    s = prof.summary()
    assert s["all_gather"].calls == 1 and s["all_gather"].nbytes == 128
    assert s["send_recv"].calls == 1 and s["send_recv"].nbytes == 32
    assert {e.device for e in prof.events if e.kind == "send_recv"} == {0, 1, 2}


def test_pipeline_moe_and_collectives_in_one_profile(tmp_path):
    rng = np.random.default_rng(0)
    mesh = dist.mesh(axes=("pp",), shape=(2,))
    pipe = Pipeline([Stage(layer, (rng.standard_normal((4, 4)).astype(np.float32),))
                     for _ in range(2)], mesh, loss=lambda y: ts.sum(y * y))
    x = rng.standard_normal((6, 4)).astype(np.float32)
    path = tmp_path / "run.json"
    with profile("nvl72", trace=path) as prof:
        res = pipe.run(x, micro_batches=3, schedule="1f1b")
        moe = MoE(rng.standard_normal((4, 2)).astype(np.float32),
                  [(np.eye(4, dtype=np.float32),)] * 2, layer, k=1)
        moe.forward(x, mesh=mesh, axis="pp")
        t = dist.from_shards([x[:3], x[3:]], mesh=mesh, partial="pp")
        all_reduce(t, "pp")
    s = prof.summary()
    assert (s["forward"].calls, s["backward"].calls) == (6, 6)
    assert s["send_recv"].calls == 2 * 3  # one activation and one gradient per micro-batch
    assert s["forward"].flops_per_s > 0 and s["forward"].stream == "compute"
    assert s["all_reduce"].calls == 1 and s["all_to_all"].calls == 2
    assert res.timeline is prof.timeline
    for d in (0, 1):  # each GPU's clock: the MoE layer runs after its pipeline work
        mine = [e for e in prof.events if e.device == d and e.stream == "compute"]
        first_moe = min(e.start for e in mine if e.kind.startswith("moe"))
        assert first_moe >= max(e.end for e in mine if e.kind == "backward")
    trace = json.loads(path.read_text())
    assert problems(trace) == []
    assert trace["otherData"]["topology"] == "GB200 NVL72"
    table = prof.table()
    assert table.splitlines()[0].split()[:3] == ["kind", "stream", "calls"]
    assert "simulated time" in table and "all_to_all" in table


def test_record_call_counts_graph_work():
    x = np.ones((8, 16), np.float32)
    w = np.ones((16, 16), np.float32)
    with profile("h100") as prof:
        y = prof.record_call(layer, x, w, devices=[0, 1])
    assert np.asarray(y).shape == (8, 16)
    s = prof.summary()["layer"]
    assert s.flops == 2 * 8 * 16 * 16 + 8 * 16 and s.calls == 1
    assert len(prof.events) == 2


def test_quiet_and_no_profile_record_nothing():
    mesh = dist.mesh(axes=("tp",), shape=(2,))
    t = dist.from_shards([np.ones(4, np.float32)] * 2, mesh=mesh, partial="tp")
    assert current() is None
    assert np.array_equal(np.asarray(all_reduce(t, "tp")), [2, 2, 2, 2])
    with profile() as prof:
        with quiet():
            all_reduce(t, "tp")
        all_reduce([t, t], "tp")  # a list: one record per tensor
    assert prof.summary()["all_reduce"].calls == 2


def test_profiles_are_context_local():
    mesh = dist.mesh(axes=("tp",), shape=(2,))
    t = dist.from_shards([np.ones(4, np.float32)] * 2, mesh=mesh, partial="tp")
    seen = []

    def other():
        seen.append(current())
        all_reduce(t, "tp")

    with profile() as prof:
        th = threading.Thread(target=other)
        th.start()
        th.join()
    assert seen == [None] and prof.events == []


def test_direct_collectives_through_the_hook():
    mesh = dist.mesh(axes=("tp",), shape=(2,))
    t = dist.from_shards([np.ones(4, np.float32)] * 2, mesh=mesh, partial="tp")
    with profile() as prof:
        dist.all_reduce(t, "tp")
    if not prof.events:
        pytest.skip("blocks.collective does not apply profile.observe_collective yet")
    assert prof.summary()["all_reduce"].calls == 1
