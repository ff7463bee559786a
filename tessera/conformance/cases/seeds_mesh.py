"""The distribution seeds (``seeds.py``, verbatim) on the mesh simulator: meshes,
sharded tensors, the NVL72 teaser, the distributed training step and the
effect-aware loss, with their inputs added; results equal one device's bits."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance import seeds
from tessera.conformance.cases.common import f64, run_seed
from tessera.conformance.registry import case

NAMES = "decisions.md Names: dist.mesh and dist.Mesh are one thing"


@case("seeds.mesh72.nvl72-factors", spec="guide-ch2-programming-model.md §2.4 Meshes; " + NAMES)
def _mesh72(ctx: Any) -> None:
    """``dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))`` infers the NVL72
    factors in the order the axes are given: tp=9, pp=2, dp=4."""
    mesh = run_seed(seeds.MESH_72)["mesh"]
    assert mesh.axes == ("tp", "pp", "dp") and mesh.shape == (9, 2, 4) and mesh.size == 72


@case("seeds.shard-1m.metadata-only", spec="guide-ch2-programming-model.md §2.5 Shard "
      "Specifications; decisions.md Distribution: dist.tensor allocates lazily")
def _shard_1m(ctx: Any) -> None:
    """A 10^6 x 10^6 bf16 tensor over tp x pp exists as metadata: uneven shards follow
    numpy.array_split, and no byte is materialised."""
    w = run_seed(seeds.MESH_72 + seeds.SHARD_1M)["W"]
    assert w.shape == (1_000_000, 1_000_000) and w.element == ts.bf16
    assert (w.sharded_dim("tp"), w.sharded_dim("pp"), w.placement("dp")) == (0, 1, "replicated")
    rows = len(np.array_split(np.arange(1_000_000), 9)[0])
    assert w.local_shape(0) == (rows, 500_000) and w.materialized_nbytes == 0


@case("seeds.meshes.as-written", spec="programming-model-guide.md Mesh Construction")
def _meshes(ctx: Any) -> None:
    """The data-, tensor- and hybrid-parallel meshes have the shapes written."""
    ns = run_seed(seeds.MESHES, ts=ts)
    assert ns["dp_mesh"].shape == (4,) and ns["tp_mesh"].shape == (2,)
    assert ns["hybrid_mesh"].axes == ("dp", "tp", "pp") and ns["hybrid_mesh"].shape == (4, 2, 2)


@case("seeds.teaser-nvl72.as-written", spec="guide-ch1-introduction-updated.md §1.4 Teaser "
      "Example", slow=True)
def _teaser(ctx: Any) -> None:
    """As written W has no data (lazy zeros) in fp8_e4m3, column-sharded over tp=9 in
    911/910 columns; with X sharded (dp, tp) the gemm gathers X over tp and Y is zero."""
    mesh = run_seed(seeds.TEASER_NVL72.split("# Shard weights")[0])["mesh"]
    x = np.random.default_rng(19).standard_normal((16, 8192)).astype(np.float32)
    xd = ts.dist.from_numpy(x, mesh=mesh, layout=ts.ShardSpec(("row", "col"), ("dp", "tp")))
    ns = run_seed(seeds.TEASER_NVL72, gemm=ts.gemm, X=xd)
    w, y = ns["W"], ns["Y"]
    assert w.element == ts.fp8_e4m3 and w.is_lazy
    assert [w.local_shape(i)[1] for i in range(0, 18, 2)] == [911] * 2 + [910] * 7
    assert y.shape == (16, 8192) and not np.asarray(y).any()
    text = ts.inspect_ir(ts.jit(lambda a, b: ts.gemm(a, b)), "graph", xd, w)
    assert 'graph.all_gather(%a) {axis = "tp"}' in text, text


@case("seeds.training-step.on-mesh", spec="overview-and-quickstart.md Example 3: "
      "Distributed Training", slow=True)
def _training(ctx: Any) -> None:
    """The quick start's step as written with x and y supplied: grad_W is placed like W
    (columns over tp) and equals d mse(0, y)/dW (W has no data: zeros)."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((4, 8192)).astype(np.float32)
    y = rng.standard_normal((4, 8192)).astype(np.float32)
    ns = run_seed(seeds.TRAINING_STEP, ts=ts, x=x, y=y)
    w, g = ns["W"], ns["grad_W"]
    assert isinstance(g, ts.DistTensor) and g.dim_axes == w.dim_axes == ((), ("tp",))
    want = f64(x).T @ (-2.0 * f64(y) / y.size)
    assert np.allclose(f64(g), want, rtol=2.0**-8, atol=1e-30)


@case("seeds.distributed-loss.on-mesh", spec="programming-model-guide.md Effect-Aware "
      "Autodiff; decisions.md Autodiff: distributed gradients equal single-device ones")
def _dist_loss(ctx: Any) -> None:
    """As written with W column-sharded over tp: grad_W is placed like W and has the
    bits of the same program's gradient on one device."""
    rng = np.random.default_rng(22)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 12)).astype(np.float32)
    mesh = ts.dist.mesh(axes=("dp", "tp"), shape=(2, 3))
    wd = ts.dist.from_numpy(w, mesh=mesh, layout=ts.ShardSpec(("col",), ("tp",)))
    g = run_seed(seeds.DISTRIBUTED_LOSS, ts=ts, x=x, W=wd)["grad_W"]
    one = run_seed(seeds.DISTRIBUTED_LOSS, ts=ts, x=x, W=w)["grad_W"]
    assert isinstance(g, ts.DistTensor) and g.dim_axes == ((), ("tp",))
    assert np.array_equal(np.asarray(g), np.asarray(one))


@case("seeds.teaser-nvl72.with-data", spec="guide-ch1-introduction-updated.md §1.4 Teaser "
      "Example (corrected: W with data)")
def _teaser_data(ctx: Any) -> None:
    """With data (a smaller W, same layout) each tp column block of Y has the bits of
    the same gemm on one device, W rounded to fp8_e4m3 with satfinite."""
    mesh = run_seed(seeds.TEASER_NVL72.split("# Shard weights")[0])["mesh"]
    source = seeds.TEASER_NVL72.replace("shape=(8192, 8192)", "shape=(64, 100)").replace(
        'dtype="fp8_e4m3"\n', 'dtype="fp8_e4m3",\n    data=w\n')
    assert source.count("data=w") == 1 and "(64, 100)" in source
    rng = np.random.default_rng(20)
    w = (rng.standard_normal((64, 100)) * 300).astype(np.float32)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    xd = ts.dist.from_numpy(x, mesh=mesh, layout=ts.ShardSpec(("row",), ("dp",)))
    ns = run_seed(source, gemm=ts.gemm, X=xd, w=w)
    w8 = np.clip(w, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(np.asarray(ns["W"]).view(np.uint8), w8.view(np.uint8))
    assert np.array_equal(np.asarray(ns["Y"]), np.asarray(ts.gemm(x, w8)))
