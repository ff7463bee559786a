"""Python operators on DistTensors: placed by shard propagation, run on the mesh, with
the bits of one device.

References are NumPy float64 results rounded once to the storage format. The inputs
are small multiples of 1/8, so every float64 sum, difference and product of them is
exact, and a float64 quotient rounded to f32 (or bf16) is the correctly rounded
quotient (53 >= 2 * 24 + 2 bits: double rounding is innocuous for + - * /).
"""

from __future__ import annotations

import operator

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tests.mesh_sim.util import raises_here

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 2))
RNG = np.random.default_rng(7)


def dyadic(*shape: int, nonzero: bool = False) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8], exactly representable in f32 and bf16."""
    x = RNG.integers(-64, 65, size=shape)
    if nonzero:
        x = np.where(x == 0, 3, x)
    return (x / 8).astype(np.float32)


def summands(a: np.ndarray) -> list[np.ndarray]:
    """Four f32 arrays whose exact sum is ``a`` (one per device of MESH)."""
    q = [dyadic(*a.shape) for _ in range(3)]
    return [(a.astype(np.float64) - sum(x.astype(np.float64) for x in q)).astype(np.float32),
            *q]


def place(a: np.ndarray, layout: str) -> dist.DistTensor:
    """``a`` on MESH: replicated, split by rows, columns or both, or partial."""
    if layout == "partial":
        t = dist.from_shards(summands(a), mesh=MESH, partial=("dp", "tp"))
        assert t.partial_axes == ("dp", "tp")
        return t
    spec = {"replicated": dist.ShardSpec((), ()),
            "rows": dist.ShardSpec(("row",), ("dp",)),
            "cols": dist.ShardSpec(("col",), ("tp",)),
            "both": dist.ShardSpec(("row", "col"), ("dp", "tp"))}[layout]
    return dist.from_numpy(a, mesh=MESH, layout=spec)


LAYOUTS = ["replicated", "rows", "cols", "both", "partial"]
ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "==": operator.eq, "!=": operator.ne}


@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("la", LAYOUTS)
def test_arithmetic_and_comparisons_over_every_pair_of_placements(la: str, lb: str) -> None:
    a, b = dyadic(6, 5, nonzero=True), dyadic(6, 5, nonzero=True)
    b[0, :2] = a[0, :2]  # some equal elements, so == and != see both answers
    da, db = place(a, la), place(b, lb)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for name, fn in ARITH.items():
        got = fn(da, db)
        assert isinstance(got, dist.DistTensor) and got.mesh is MESH, name
        assert got.dtype == ts.f32
        want = fn(a64, b64).astype(np.float32)
        assert np.array_equal(np.asarray(got), want), (name, la, lb)
    for name, fn in COMPARE.items():
        got = fn(da, db)
        assert isinstance(got, dist.DistTensor), name
        assert np.array_equal(np.asarray(got), fn(a64, b64)), (name, la, lb)
        assert np.asarray(got).dtype == np.bool_


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unary_operators(layout: str) -> None:
    a = dyadic(4, 6)
    da = place(a, layout)
    assert np.array_equal(np.asarray(-da), (-a.astype(np.float64)).astype(np.float32))
    assert np.array_equal(np.asarray(abs(da)), np.abs(a.astype(np.float64)))
    assert np.array_equal(np.asarray(da ** 2), np.square(a.astype(np.float64)))
    assert +da is da


def test_a_result_keeps_the_operands_placement_where_no_data_must_move() -> None:
    a, b = dyadic(6, 5), dyadic(6, 5)
    got = place(a, "both") + place(b, "both")
    assert got.placements == (dist.SHARDED, dist.SHARDED)
    assert got.sharded_dim("dp") == 0 and got.sharded_dim("tp") == 1
    # each device added its own blocks: its shard is the sum of the operands' shards
    for d in range(4):
        assert np.array_equal(got.shard(d), place(a, "both").shard(d)
                              + place(b, "both").shard(d))
    # and the same program under jit places its result the same way
    jitted = ts.jit(lambda x, y: x + y)(place(a, "both"), place(b, "both"))
    assert jitted.placements == got.placements


@pytest.mark.parametrize(("la", "lb"), [
    ("rows", "cols"),          # no contraction split: each device one output block
    ("cols", "replicated"),    # contraction split over tp: partial sums, then combined
    ("both", "replicated"),
    ("replicated", "partial"),
    ("partial", "partial"),
    ("replicated", "replicated"),
])
def test_matmul_has_the_bits_of_one_device(la: str, lb: str) -> None:
    a, b = dyadic(6, 8), dyadic(8, 5)
    got = place(a, la) @ place(b, lb)
    assert isinstance(got, dist.DistTensor)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # exact
    assert np.array_equal(np.asarray(got), want)
    # with values whose sums round, the bits are still those of one device
    x = RNG.standard_normal((6, 40)).astype(np.float32)
    y = RNG.standard_normal((40, 5)).astype(np.float32)
    one = np.asarray(ts.matmul(ts.tensor(x), ts.tensor(y)))
    got = place(x, la.replace("partial", "cols")) @ place(y, lb.replace("partial", "rows"))
    assert np.asarray(got).tobytes() == one.tobytes()
    assert np.allclose(np.asarray(got), x.astype(np.float64) @ y.astype(np.float64),
                       rtol=1e-5, atol=1e-5)


def test_mixed_operands_numpy_scalars_and_tensors_on_either_side() -> None:
    a, row = dyadic(4, 3), dyadic(3, nonzero=True)
    da = place(a, "rows")
    a64, r64 = a.astype(np.float64), row.astype(np.float64)
    cases = [
        (a + da, a64 + a64), (da + a, a64 + a64),            # ndarray on either side
        (row * da, r64 * a64), (da / row, a64 / r64),        # broadcast (3,) over rows
        (2 - da, 2 - a64), (da * 0.5, a64 * 0.5),            # Python scalars, weakly typed
        (ts.tensor(a) - da, a64 - a64), (da @ ts.tensor(a.T), a64 @ a64.T),
    ]
    for got, want in cases:
        assert isinstance(got, dist.DistTensor)
        assert got.dtype == ts.f32
        assert np.array_equal(np.asarray(got), want.astype(np.float32))
    assert np.array_equal(np.asarray(da > 0), a64 > 0)


def test_bf16_operands_round_once() -> None:
    a, b = dyadic(4, 6), dyadic(4, 6, nonzero=True)
    bf = ml_dtypes.bfloat16
    da = dist.from_numpy(a.astype(bf), mesh=MESH, layout=dist.ShardSpec(("row",), ("dp",)))
    db = dist.from_numpy(b.astype(bf), mesh=MESH, layout=dist.ShardSpec(("col",), ("tp",)))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for name, fn in ARITH.items():
        got = np.asarray(fn(da, db))
        assert got.dtype == bf, name
        want = fn(a64, b64).astype(bf)
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), name


def test_truth_of_one_element_and_refusal_of_more() -> None:
    one = place(np.array([[1.5]], np.float32), "replicated")
    assert bool(one > 1) and not bool(one < 1)
    many = place(dyadic(4, 2), "rows")
    raises_here(ts.ShapeError, lambda: bool(many == many), "bool()", "(4, 2)")
    with pytest.raises(TypeError):
        hash(many)


def test_operands_on_different_meshes_are_refused_at_the_callers_line() -> None:
    other = dist.mesh(axes=("dp", "tp"), shape=(4, 1))
    a = dyadic(4, 2)
    da = place(a, "rows")
    db = dist.from_numpy(a, mesh=other, layout=dist.ShardSpec(("row",), ("dp",)))
    raises_here(ts.MeshError, lambda: da + db, "different meshes")
    raises_here(ts.ShapeError, lambda: da @ da, "(4, 2)")
