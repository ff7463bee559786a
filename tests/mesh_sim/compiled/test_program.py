"""The per-device program of a placed function: where it is cut, what each device's
schedule holds, which devices share kernels, and how the partial sums are completed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist, op
from tessera.dist.core.tensor import DistTensor
from tessera.errors import UnsupportedError
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.types import Sharding, TensorType
from tessera.mesh_sim.compiled import MeshProgram, Segment, Step
from tessera.mesh_sim.compiled.partials import relayout
from tessera.mesh_sim.spmd.layout import relayout_dims

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
RNG = np.random.default_rng(7)


def place(shape: tuple[int, ...], *pairs: tuple[Any, Any]) -> DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(RNG.standard_normal(shape).astype(np.float32), mesh=MESH,
                           layout=spec)


def program(fn: Any, *args: Any, mode: str = "exact") -> MeshProgram:
    return ts.jit(fn, mode=mode).lower(*args).mesh  # type: ignore[no-any-return]


def tp_pair(x, w1, w2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1) @ w2


TP = (place((16, 8), ("row", "dp")), place((8, 32), ("col", "tp")),
      place((32, 8), ("row", "tp")))


def collectives(p: MeshProgram) -> list[str]:
    return [i.op.name for s in p.groups[0].steps if isinstance(s, Step)
            for i in [s.instr]]


def test_exact_partial_sums_become_gathers_then_local_contractions() -> None:
    p = program(tp_pair, *TP)
    assert collectives(p) == ["graph.all_gather", "graph.all_gather"]
    (group,) = p.groups
    assert group.devices == tuple(range(8))
    k1 = schedule_ops.kernels(group.schedule)[-1]
    # the row-parallel matmul runs on whole rows of w2: K = 32, not a device's 8
    assert [tuple(v.type.shape) for v in k1.operands] == [(8, 32), (32, 8)]
    assert not any(isinstance(r.type, TensorType) and r.type.sharding is not None
                   and r.type.sharding.partial for i in p.function.body.instrs
                   for r in i.results)


def test_fast_mode_keeps_the_all_reduce_of_the_summands() -> None:
    p = program(tp_pair, *TP, mode="fast")
    assert collectives(p) == ["graph.all_reduce"]
    k1 = schedule_ops.kernels(p.groups[0].schedule)[-1]
    assert [tuple(v.type.shape) for v in k1.operands] == [(8, 8), (8, 8)]


def test_the_schedule_alternates_kernels_and_collectives_in_program_order() -> None:
    (group,) = program(tp_pair, *TP).groups
    kinds = [type(i.op).__name__ for i in group.schedule.body.instrs[:-1]]
    assert kinds == ["ScheduledKernel", "ScheduledCollective", "ScheduledCollective",
                     "ScheduledKernel"]
    labels = [i.op.label for i in group.schedule.body.instrs[:-1]]
    assert labels == ["k0", "c0", "c1", "k1"]
    assert [type(s).__name__ for s in group.steps] == ["Segment", "Step", "Step", "Segment"]


def test_local_slices_of_broadcasts_fuse_into_the_kernel() -> None:
    """A replicated bias added to batch-sharded rows: each device broadcasts it straight
    to its own rows; nothing is cut there."""
    p = program(lambda x, b: op.exp(x + b), place((16, 8), ("row", ("dp", "tp"))),
                place((8,)))
    (group,) = p.groups
    assert collectives(p) == [] and len(group.kernels) == 1
    assert not any(isinstance(i.op, graph_ir.Shard) for i in p.function.body.instrs)


def test_devices_with_other_block_shapes_get_their_own_kernels() -> None:
    x = place((10, 13), ("row", "dp"), ("col", "tp"))  # columns 4, 3, 3, 3
    p = program(lambda a: op.tanh(a) * 2.0, x)
    assert [g.devices for g in p.groups] == [(0, 4), (1, 2, 3, 5, 6, 7)]
    shapes = [tuple(g.schedule.args[0].type.shape) for g in p.groups]
    assert shapes == [(5, 4), (5, 3)]
    assert p.group_of(6) is p.groups[1]


def test_empty_blocks_are_refused_with_a_hint() -> None:
    x = place((4, 3), ("row", ("dp", "tp")))  # eight devices, four rows
    with pytest.raises(UnsupportedError, match="empty block") as err:
        program(lambda a: a * 2.0, x)
    assert "interp" in (err.value.hint or "")


def test_reduce_scatter_of_an_exact_partial_sum() -> None:
    # the contraction sharded over tp, its result scattered over tp by rows
    x, w = place((8, 16), ("col", "tp")), place((16, 8), ("row", "tp"))

    def f(a, b):  # type: ignore[no-untyped-def]
        return op.exp(ts.reduce_scatter(a @ b, axis="tp", dim=0))

    p = program(f, x, w)
    assert collectives(p) == ["graph.all_gather", "graph.shard", "graph.all_gather"]
    k0 = schedule_ops.kernels(p.groups[0].schedule)[0]
    assert [tuple(v.type.shape) for v in k0.operands] == [(2, 16), (16, 8)]
    got = ts.jit(f, backend="tile")(x, w)
    want = ts.jit(f)(x, w)
    assert got.dim_axes == want.dim_axes == (("tp",), ())
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize(("have", "want"), [
    ((("dp", "tp"), ()), ((), ("tp",))),
    ((("dp",), ("tp",)), (("dp", "tp"), ())),
    (((), ()), (("tp",), ("dp",))),
])
def test_relayout_steps_give_the_simulators_layout(have: Any, want: Any) -> None:
    """The gathers and slices written into the program move a value where the
    simulator's relayout_dims does, with the same values."""
    from tessera.ir.core import Block, Instr, Value
    from tessera.mesh_sim.spmd.collect import run_collective

    pairs = (("dp", 2), ("tp", 4))
    t = TensorType((8, 8), ts.f32, Sharding(pairs, have))
    body = Block()
    v = body.add_arg(t, "x")
    anchor = Instr(graph_ir.Return(), [], [], [])
    anchor.results = [Value(t, anchor)]
    out = relayout(body, v, want, anchor)
    assert out.type.sharding.dims == want
    value = dist.from_numpy(RNG.standard_normal((8, 8)).astype(np.float32), mesh=MESH,
                            layout=dist.ShardSpec.from_dim_axes(have))
    moved = value
    for instr in body.instrs:
        moved = run_collective(instr.op, moved, instr.results[0].type)
    reference = relayout_dims(value, want)
    assert moved.dim_axes == reference.dim_axes
    for d in range(MESH.size):
        assert np.array_equal(moved.shard(d), reference.shard(d))


def test_segments_read_and_write_placed_values() -> None:
    p = program(tp_pair, *TP)
    first = p.groups[0].steps[0]
    assert isinstance(first, Segment)
    assert [v.hint for v in first.inputs] == ["x", "w1"]
    assert all(v.type.sharding is not None for v in first.inputs + first.outputs)
    assert all(a.type.sharding is None for a in first.graph.args)
