"""Under ``profile()``, a compiled placed program's kernels are named slices on each
device's compute track, between the collectives on its comm track."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import tessera as ts
from tessera import dist, op
from tessera.mesh_sim.profile import profile

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))


def tp_pair(x, w1, w2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1) @ w2


def _args() -> tuple[ts.DistTensor, ...]:
    rng = np.random.default_rng(9)
    layouts = [((16, 8), "row", "dp"), ((8, 32), "col", "tp"), ((32, 8), "row", "tp")]
    return tuple(dist.from_numpy(rng.standard_normal(s).astype(np.float32), mesh=MESH,
                                 layout=dist.ShardSpec((d,), (a,))) for s, d, a in layouts)


def test_kernels_are_slices_on_every_device_between_the_collectives(tmp_path: Path) -> None:
    args = _args()
    with profile("h100", trace=tmp_path / "run.json") as prof:
        ts.jit(tp_pair, backend="tile", mode="fast")(*args)
    for d in range(MESH.size):
        mine = sorted((e for e in prof.events if e.device == d), key=lambda e: e.start)
        assert [(e.stream, e.name) for e in mine] == [
            ("compute", "tp_pair_k0"), ("compute", "tp_pair_k1"), ("comm", "all_reduce(tp)")]
        k1, reduce = mine[1], mine[2]
        assert reduce.start >= k1.end  # the all-reduce reads what k1 wrote
        assert k1.args["tensor_flops"] == 2 * 8 * 8 * 8  # its local 8 x 8 x 8 matmul
    trace = json.loads((tmp_path / "run.json").read_text())
    slices = {(e["pid"], e["name"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {(d, "tp_pair_k0") for d in range(8)} <= slices


def test_exact_mode_gathers_before_the_second_kernel() -> None:
    args = _args()
    with profile("h100") as prof:
        ts.jit(tp_pair, backend="tile")(*args)
    for d in range(MESH.size):
        mine = sorted((e for e in prof.events if e.device == d), key=lambda e: e.start)
        names = [e.name for e in mine]
        assert names == ["tp_pair_k0", "all_gather(tp)", "all_gather(tp)", "tp_pair_k1"]
        assert mine[3].start >= mine[2].end
