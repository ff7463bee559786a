"""Collectives on the 72-device NVL72 mesh (dp=4, tp=9, pp=2), device by device against
plain NumPy loops: reductions combine the summands in rank order (``functools.reduce``
over ranks 0, 1, ...), gathers and all-to-alls move bits unchanged, a broadcast gives
every device the root's bits; and a program on the mesh gives one device's bits."""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera import dist
from tessera.conformance.registry import register

SPEC = "decisions.md Distribution: collectives along named mesh axes, reduced in rank order"
AXES, SHAPE = ("dp", "tp", "pp"), (4, 9, 2)
UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "mean": np.add}


def nvl72() -> dist.Mesh:
    """The NVL72 mesh of the guide's teaser: 72 devices, dp=4, tp=9, pp=2."""
    return dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=AXES, shape=SHAPE)


def rank(i: int, axis: str) -> int:
    """Device ``i``'s coordinate along ``axis`` (row-major device numbering)."""
    return int(np.unravel_index(i, SHAPE)[AXES.index(axis)])


def _summands(axis: str, dtype: Any, seed: int) -> list[np.ndarray]:
    """One summand per rank of ``axis``, values spread over 2^-20 .. 2^20 so that the
    order of f32 additions shows in the bits."""
    rng = np.random.default_rng(seed)
    n = SHAPE[AXES.index(axis)]
    return [(rng.standard_normal((6, 5)) * 2.0 ** rng.integers(-20, 20, (6, 5))).astype(dtype)
            for _ in range(n)]


def _partial(axis: str, parts: list[np.ndarray], dtype: str) -> dist.DistTensor:
    shards = [parts[rank(i, axis)] for i in range(72)]
    return dist.from_shards(shards, mesh=nvl72(), dtype=dtype, partial=(axis,),
                            shape=parts[0].shape)


def _bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def all_reduce(axis: str, op: str, dtype: str = "f32") -> Any:
    def run(ctx: Any) -> None:
        store = {"f32": np.float32, "bf16 @accum(f32)": ml_dtypes.bfloat16}[dtype]
        parts = _summands(axis, store, seed=len(axis) + len(op))
        acc = [p.astype(np.float32) for p in parts]
        want = functools.reduce(UFUNC[op], acc)
        if op == "mean":
            want = want / np.float32(len(parts))
        want = want.astype(store)
        r = dist.all_reduce(_partial(axis, parts, dtype), axis, op=op)
        assert r.placement(axis) == "replicated"
        bad = [i for i in range(72) if not _bits(r.shard(i), want)]
        assert not bad, f"devices {bad[:5]} differ from the rank-order {op}"

    run.__doc__ = (f"all_reduce({op}) over {axis} of {dtype} summands: every device holds "
                   "the rank-order combination, bit for bit.")
    return run


for _axis in AXES:
    register(f"mesh.all-reduce.sum.{_axis}", all_reduce(_axis, "sum"), spec=SPEC)
for _op in ("max", "min", "mean"):
    register(f"mesh.all-reduce.{_op}.tp", all_reduce("tp", _op), spec=SPEC)
register("mesh.all-reduce.sum.bf16-accum-f32", all_reduce("tp", "sum", "bf16 @accum(f32)"),
         spec=SPEC + "; the policy's accumulator")


def _rank_order(ctx: Any) -> None:
    """Rank order, not a tree: summands 2^24, 1 (x7), -2^24 over tp sum to 0 in f32
    (each 2^24 + 1 ties back to 2^24), where the exact sum is 7."""
    parts = [np.full((2, 2), v, np.float32) for v in [2.0**24] + [1.0] * 7 + [-(2.0**24)]]
    r = dist.all_reduce(_partial("tp", parts, "f32"), "tp")
    assert all(_bits(r.shard(i), np.zeros((2, 2), np.float32)) for i in range(72))


register("mesh.all-reduce.rank-order", _rank_order, spec=SPEC)


def _global(axis: str, seed: int) -> np.ndarray:
    n = SHAPE[AXES.index(axis)]
    return np.random.default_rng(seed).standard_normal((2 * n + 1, 3 * n)).astype(np.float32)


def _region(length: int, parts: int, r: int) -> slice:
    """Rank r's slice of ``length`` split like ``numpy.array_split``."""
    edges = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(length), parts)])
    return slice(int(edges[r]), int(edges[r + 1]))


def reduce_scatter(axis: str) -> Any:
    def run(ctx: Any) -> None:
        parts = _summands(axis, np.float32, seed=7)
        n = len(parts)
        total = functools.reduce(np.add, parts)
        r = dist.reduce_scatter(_partial(axis, parts, "f32"), axis, dim=0)
        assert r.sharded_dim(axis) == 0
        for i in range(72):
            assert _bits(r.shard(i), total[_region(6, n, rank(i, axis))]), i

    run.__doc__ = (f"reduce_scatter over {axis}: rank r holds its array_split rows of the "
                   "rank-order sum.")
    return run


def all_gather(axis: str) -> Any:
    def run(ctx: Any) -> None:
        g = _global(axis, seed=8)
        t = dist.from_numpy(g, mesh=nvl72(), layout=dist.ShardSpec(("row",), (axis,)))
        n = SHAPE[AXES.index(axis)]
        assert all(_bits(t.shard(i), g[_region(len(g), n, rank(i, axis))]) for i in range(72))
        out = dist.all_gather(t, axis)
        assert out.placement(axis) == "replicated"
        assert all(_bits(out.shard(i), g) for i in range(72))

    run.__doc__ = (f"all_gather over {axis} of uneven row shards (array_split): every device "
                   "holds the whole tensor's bits.")
    return run


def all_to_all(axis: str) -> Any:
    def run(ctx: Any) -> None:
        g = _global(axis, seed=9)
        n = SHAPE[AXES.index(axis)]
        t = dist.from_numpy(g, mesh=nvl72(), layout=dist.ShardSpec(("row",), (axis,)))
        out = dist.all_to_all(t, axis, split_dim=1, concat_dim=0)
        assert out.sharded_dim(axis) == 1
        for i in range(72):
            assert _bits(out.shard(i), g[:, _region(g.shape[1], n, rank(i, axis))]), i
        assert _bits(np.asarray(out), g)

    run.__doc__ = f"all_to_all over {axis}: row shards become column shards, bits unchanged."
    return run


def broadcast(axis: str) -> Any:
    def run(ctx: Any) -> None:
        parts = _summands(axis, np.float32, seed=10)
        root = len(parts) - 1
        b = dist.broadcast(_partial(axis, parts, "f32"), axis, root=root)
        assert all(_bits(b.shard(i), parts[root]) for i in range(72))

    run.__doc__ = f"broadcast over {axis} from the last rank: every device holds its bits."
    return run


for _axis in AXES:
    register(f"mesh.reduce-scatter.{_axis}", reduce_scatter(_axis), spec=SPEC)
    register(f"mesh.all-gather.{_axis}", all_gather(_axis), spec=SPEC)
    register(f"mesh.all-to-all.{_axis}", all_to_all(_axis), spec=SPEC)
    register(f"mesh.broadcast.{_axis}", broadcast(_axis), spec=SPEC)


def _program(ctx: Any) -> None:
    """A jit program on sharded inputs (x rows over dp, W columns over tp) gives the
    bits of the same program on one device, and its gradient too."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 18)).astype(np.float32)
    mesh = nvl72()
    xd = dist.from_numpy(x, mesh=mesh, layout=dist.ShardSpec(("row",), ("dp",)))
    wd = dist.from_numpy(w, mesh=mesh, layout=dist.ShardSpec(("col",), ("tp",)))

    def f(a: Any, b: Any) -> Any:
        return ts.sum(ts.relu(ts.matmul(a, b)) ** 2)

    assert _bits(np.asarray(ts.jit(f)(xd, wd)), np.asarray(ts.jit(f)(x, w)))
    gd = ts.grad(ts.jit(f), argnums=1)(xd, wd)
    assert isinstance(gd, ts.DistTensor)
    assert _bits(np.asarray(gd), np.asarray(ts.grad(ts.jit(f), argnums=1)(x, w)))


register("mesh.program.equals-one-device", _program,
         spec="decisions.md Autodiff: distributed gradients equal the single-device ones")
