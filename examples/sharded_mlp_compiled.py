"""A sharded MLP compiled per device on a 2 x 4 mesh: each device's fused kernels, with
the collectives between them.

The batch is split over ``dp`` (2 devices); the first weight is column-parallel and the
second row-parallel over ``tp`` (4 devices), so the second matmul's contraction is
split and shard propagation puts an all-reduce after it. ``ts.jit(mlp).lower(*args)``
cuts the placed Graph IR at its collectives and schedules each piece on one device's
blocks (docs/schedule.md, "On a mesh"): ``.kernels`` are the kernels every device runs,
``.ir("schedule")`` the per-device schedule. ``backend="tile"`` runs all eight devices'
kernels in the tile simulator and the collectives in the mesh simulator, with the bits
of the graph interpreter's sharded run.

In fast mode each device computes its summand of the second matmul and the all-reduce
adds them in rank order; in exact mode (the default) no device rounds a summand: the
all-reduce of the exact partial sum becomes gathers of the matmul's operands, and each
device computes its rows whole.

Run: ``python examples/sharded_mlp_compiled.py``
"""

import numpy as np

import tessera as ts
from tessera import dist, op


def mlp(x, w1, b1, w2, b2):
    return op.gelu(x @ w1 + b1) @ w2 + b2


def reference(x, w1, b1, w2, b2):
    """The same MLP in float64, rounding to f32 after each operator as the graph does."""
    f = np.float32

    def r(a):
        return np.asarray(a, np.float64).astype(f).astype(np.float64)

    h = r(r(x.astype(np.float64) @ w1) + b1)
    g = r(0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3))))
    return r(r(g @ w2) + b2).astype(f)


def main() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
    rng = np.random.default_rng(0)
    x, w1, b1, w2, b2 = (rng.standard_normal(s).astype(np.float32)
                         for s in [(32, 16), (16, 64), (64,), (64, 16), (16,)])

    def on(a, *pairs):
        spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
        return dist.from_numpy(a, mesh=mesh, layout=spec)

    args = (on(x, ("row", "dp")), on(w1, ("col", "tp")), on(b1, (0, "tp")),
            on(w2, ("row", "tp")), on(b2))
    for mode in ("fast", "exact"):
        lowered = ts.jit(mlp, mode=mode).lower(*args)
        print(f"--- mode={mode}: {lowered}")
        print(lowered.kernels)
        print(lowered.ir("schedule"))
        got = lowered.run(*args, backend="tile")
        assert isinstance(got, ts.DistTensor) and got.mesh is mesh
        want = lowered.run(*args)  # the graph interpreter's sharded run
        if mode == "exact":
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
            print("tile == interp bit for bit on all 8 devices")
        ref = reference(x, w1, b1, w2, b2)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
    print("OK: the per-device kernels match the interpreter and the NumPy float64 reference")


if __name__ == "__main__":
    main()
