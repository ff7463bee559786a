"""Placements in Graph IR types: text form, round trip, collective ops and the checks
the verifier makes on placed values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.errors import IRParseError, IRVerifyError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import Sharding, TensorType, parse_tensor_type

MESH = (("dp", 2), ("tp", 3), ("pp", 2))


@st.composite
def shardings(draw: st.DrawFn) -> tuple[tuple[int, ...], Sharding]:
    """A shape and a random valid placement on MESH."""
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    axes = [a for a, _ in MESH]
    dims: list[tuple[str, ...]] = [() for _ in range(rank)]
    partial = []
    for a in draw(st.permutations(axes)):
        where = draw(st.integers(-2, rank - 1))
        if where >= 0:
            dims[where] += (a,)
        elif where == -2:
            partial.append((a, draw(st.sampled_from(["sum", "max", "min"]))))
    return shape, Sharding(MESH, tuple(dims), tuple(partial))


def test_text_form() -> None:
    s = Sharding(MESH, (("dp",), ("pp",)), (("tp", "max"),))
    t = TensorType((8, 4), "bf16 @accum(f32)", s)
    assert str(t) == "tensor<8x4xbf16@accum(f32), mesh<dp=2, tp=3, pp=2>[dp, pp] partial(tp:max)>"
    assert str(TensorType((8,), "f32", Sharding(MESH, (("dp", "tp"),)))) == \
        "tensor<8xf32, mesh<dp=2, tp=3, pp=2>[(dp, tp)]>"
    assert str(TensorType((), "f32", Sharding(MESH, (), (("dp", "sum"),)))) == \
        "tensor<f32, mesh<dp=2, tp=3, pp=2>[] partial(dp)>"
    assert str(TensorType((2,), "f32")) == "tensor<2xf32>"  # unplaced: printed as before


@given(shardings())
def test_placed_types_round_trip(case: tuple[tuple[int, ...], Sharding]) -> None:
    shape, s = case
    t = TensorType(shape, "f32", s)
    assert parse_tensor_type(str(t)[len("tensor<"):-1]) == t
    assert t != t.unplaced() and t.unplaced().placed(s) == t


def test_states_of_each_axis() -> None:
    s = Sharding(MESH, ((), ("tp",)), (("pp", "sum"),))
    assert [s.state(a) for a in ("dp", "tp", "pp")] == ["replicated", "sharded", "partial"]
    assert s.dim_of("tp") == 1 and s.partial_op("pp") == "sum" and s.size(("dp", "tp")) == 6


@pytest.mark.parametrize("text", [
    "4xf32, mesh<dp=2>[dp, dp]",          # rank mismatch
    "4x4xf32, mesh<dp=2>[dp, dp]",        # an axis that splits two dims
    "4xf32, mesh<dp=2>[tp]",              # an axis the mesh lacks
    "4xf32, mesh<dp=2>[_] partial(dp:prod)",
    "4xf32, mesh<dp=2>[dp] partial(dp)",  # sharded and partial at once
    "4xf32, mesh<dp>[_]",
])
def test_invalid_placements_do_not_parse(text: str) -> None:
    with pytest.raises(IRParseError):
        parse_tensor_type(text)


SHARDED = "tensor<6x4xf32, mesh<dp=2, tp=2>[dp, tp]>"
ROWS = "tensor<6x4xf32, mesh<dp=2, tp=2>[dp, _]>"
MODULE = f"""\
module @m {{
  graph.func @f(%x: {SHARDED}) -> ({ROWS}) {{
    %0 = graph.all_gather(%x) {{axis = "tp"}} : ({SHARDED}) -> {ROWS}
    %1 = graph.ppermute(%0) {{axis = "dp", perm = [[0, 1], [1, 0]]}} : ({ROWS}) -> {ROWS}
    graph.return(%1) : ({ROWS}) -> ()
  }}
}}
"""


def test_placed_module_round_trips_and_verifies() -> None:
    module = parse_module(MODULE)
    verify_module(module)
    assert print_module(module) == MODULE


def test_verifier_rejects_a_missing_collective() -> None:
    bad = MODULE.replace("graph.all_gather(%x) {axis = \"tp\"}", "graph.neg(%x)")
    with pytest.raises(IRVerifyError, match=r"graph\.neg: result 0 should be placed"):
        verify_module(parse_module(bad))
    wrong = MODULE.replace('{axis = "tp"}', '{axis = "dp"}')
    with pytest.raises(IRVerifyError, match="all_gather"):
        verify_module(parse_module(wrong))


def test_collective_ops_on_one_device_are_identities() -> None:
    t = TensorType((4, 6), "f32")
    for op in (
        graph_ir.AllGather("tp"),
        graph_ir.ReduceScatter("tp", 1),
        graph_ir.AllReduce(("dp", "tp"), "max"),
        graph_ir.AllToAll("tp", 0, 1),
        graph_ir.MeshBroadcast("tp", 1),
        graph_ir.Ppermute("tp", [(0, 1)]),
        graph_ir.Shard("tp", 0),
    ):
        assert op.infer([t]) == (t,)
    with pytest.raises(IRVerifyError, match="split_dim equals concat_dim"):
        graph_ir.AllToAll("tp", 1, 1).infer([t])
    with pytest.raises(IRVerifyError, match="unknown reduction"):
        graph_ir.AllReduce("tp", "prod").infer([t])
    with pytest.raises(IRVerifyError, match="axis must name"):
        graph_ir.AllGather("")
