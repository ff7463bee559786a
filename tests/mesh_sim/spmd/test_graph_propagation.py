"""The shard-propagation pass: placement rules per op, the collectives it inserts (and
the ones it does not), idempotence, and conversions between placements."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.ir import PassManager, get_pass, parse_module, print_module
from tessera.ir.core import Function
from tessera.ir.transforms.sharding.convert import conversion
from tessera.ir.types import Sharding, TensorType

GOLDEN = Path(__file__).parent.parent / "golden" / "passes"
M = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
RNG = np.random.default_rng(30)


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def on(a: np.ndarray, *pairs: tuple[object, object]) -> ts.DistTensor:
    """``a`` on M, dims split as the ``(dim, axes)`` pairs say."""
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(a, mesh=M, layout=spec)


def placed(fn: object, *args: object) -> Function:
    jf = ts.jit(fn)
    jf.compile(*args)
    assert jf.last is not None
    return jf.last.function


def ops(f: Function) -> list[str]:
    return [i.op.name.removeprefix("graph.") for i in f.body.instrs]


def out(f: Function, k: int = -2) -> Sharding:
    s = f.body.instrs[k].results[0].type.sharding  # type: ignore[attr-defined]
    assert s is not None
    return s


@pytest.mark.parametrize("case", sorted(p.name.removesuffix(".before.tir")
                                        for p in GOLDEN.glob("shard_propagation_*.before.tir")))
def test_the_pass_is_idempotent(case: str) -> None:
    once = PassManager.from_names(["shard-propagation"]).run(
        parse_module((GOLDEN / f"{case}.before.tir").read_text()))
    text = print_module(once)
    assert print_module(get_pass("shard-propagation").apply(parse_module(text))) == text


def test_unplaced_functions_are_left_alone() -> None:
    text = "graph.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>) {\n" \
           "  %0 = graph.all_gather(%x) {axis = \"tp\"} : (tensor<3xf32>) -> tensor<3xf32>\n" \
           "  graph.return(%0) : (tensor<3xf32>) -> ()\n}\n"
    module = parse_module(text)
    assert print_module(get_pass("shard-propagation").apply(module)) == print_module(
        parse_module(text))


def test_elementwise_slices_replicated_operands_and_keeps_sharded_ones() -> None:
    f = placed(lambda a, b: a * b, on(arr(4, 6), ("row", "dp")), arr(4, 6))
    assert ops(f) == ["shard", "mul", "return"]
    assert out(f).dims == (("dp",), ())
    f = placed(lambda a, b: a + b, on(arr(4, 6), ("row", "dp")), on(arr(4, 6), ("col", "dp")))
    assert ops(f) == ["all_to_all", "add", "return"]  # the first operand decides


def test_matmul_partial_then_reduced_where_consumed() -> None:
    x, w = on(arr(4, 6), ("col", "tp")), on(arr(6, 5), ("row", "tp"))
    f = placed(lambda x, w: ts.exp(x @ w), x, w)
    assert ops(f) == ["matmul", "all_reduce", "exp", "return"]
    assert out(f, 0).partial == (("tp", "sum"),)
    # a sibling sharded over tp turns the all_reduce into a reduce_scatter
    r = on(arr(4, 5), ("row", "tp"))
    f = placed(lambda x, w, r: r + x @ w, x, w, r)
    assert ops(f) == ["matmul", "reduce_scatter", "add", "return"]


def test_matmul_gathers_the_smaller_operand_of_a_conflict() -> None:
    small, big = on(arr(2, 60), ("col", "tp")), on(arr(60, 50), ("col", "tp"))
    assert ops(placed(lambda a, b: a @ b, small, big))[0] == "all_gather"
    big_a, small_b = on(arr(50, 60), ("col", "tp")), on(arr(60, 2), ("col", "tp"))
    f = placed(lambda a, b: a @ b, big_a, small_b)
    assert ops(f)[0] == "all_to_all" and out(f, 1).partial == (("tp", "sum"),)


def test_reductions_make_partial_values() -> None:
    x = on(arr(6, 4), ("row", "dp"), ("col", "tp"))
    f = placed(lambda x: ts.sum(x, axis=1), x)
    assert ops(f) == ["sum", "all_reduce", "return"] and out(f, 0).dims == (("dp",),)
    f = placed(lambda x: ts.max(x), x)
    assert out(f, 0).partial == (("dp", "max"), ("tp", "max"))
    assert [(i.op.axis, i.op.op) for i in f.body.instrs if i.op.name == "graph.all_reduce"
            ] == [(("dp", "tp"), "max")]
    f = placed(lambda x: ts.softmax(x, axis=1), x)
    assert ops(f) == ["all_gather", "softmax", "return"]


def test_shape_ops_keep_what_they_leave_whole() -> None:
    x = on(arr(6, 4), ("row", "dp"), ("col", "tp"))
    assert out(placed(lambda x: x.T, x)).dims == (("tp",), ("dp",))
    f = placed(lambda x: ts.reshape(x, (6, 2, 2)), x)
    assert ops(f) == ["all_gather", "reshape", "return"] and out(f).dims == (("dp",), (), ())
    f = placed(lambda x: x[:, 1:3], x)
    assert ops(f)[0] == "all_gather" and out(f, 1).dims == (("dp",), ())
    f = placed(lambda x: ts.broadcast_to(x, (5, 6, 4)), x)
    assert ops(f) == ["broadcast", "return"] and out(f).dims == ((), ("dp",), ("tp",))


def test_user_collectives_and_the_collectives_they_need() -> None:
    x = on(arr(6, 4), ("row", "dp"), ("col", "tp"))
    f = placed(lambda x: ts.all_reduce(x, axis="tp"), x)
    assert ops(f) == ["all_gather", "all_reduce", "return"]  # sharded: gathered first
    # gathering over dp leaves the summands over tp alone; the return reduces them
    f = placed(lambda x: ts.all_gather(ts.sum(x, axis=1), axis="dp"), x)
    assert ops(f) == ["sum", "all_gather", "all_reduce", "return"]


def test_conversions_between_placements() -> None:
    mesh = (("dp", 2), ("tp", 3))
    t = TensorType((6, 6), "f32", Sharding(mesh, ((), ()), (("tp", "sum"),)))
    names = [op.name for op in conversion(t, Sharding(mesh, (("tp",), ())))]
    assert names == ["graph.reduce_scatter"]
    t = TensorType((6, 6), "f32", Sharding(mesh, (("tp",), ("dp",))))
    names = [op.name for op in conversion(t, Sharding(mesh, (("dp",), ("tp",))))]
    assert names == ["graph.all_gather", "graph.all_gather", "graph.shard", "graph.shard"]
    t = TensorType((6, 6), "f32", Sharding(mesh, (("tp",), ())))
    names = [op.name for op in conversion(t, Sharding(mesh, ((), ("tp",))))]
    assert names == ["graph.all_to_all"]
    t = TensorType((6, 6), "f32", Sharding(mesh, (("tp", "dp"), ())))
    names = [op.name for op in conversion(t, Sharding(mesh, (("dp", "tp"), ())))]
    assert names == ["graph.all_gather", "graph.shard"]
    t = TensorType((6,), "f32", Sharding(mesh, ((),), (("dp", "max"),)))
    names = [op.name for op in conversion(t, Sharding(mesh, (("dp",),)))]
    assert names == ["graph.all_reduce", "graph.shard"]


def test_collectives_are_inserted_once_per_value_and_placement() -> None:
    x, y = on(arr(4, 6), ("row", "dp")), arr(4, 6)
    f = placed(lambda x, y: (x * y, x + y, y * 2.0), x, y)
    assert ops(f).count("shard") == 1  # y is sliced once for both of its sharded users
