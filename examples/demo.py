"""A short tour of Tessera (the graph level, then a tile kernel): ``make demo`` runs this file.

1. a traced graph program and its Graph IR,
2. its result, checked against NumPy in float64,
3. its gradient,
4. a numerics policy at work (bf16 @accum(f32) and fp8 against f32),
5. determinism: the same SHA-256 twice and in a fresh process with one BLAS thread, and
   the same bits however a matmul is split.

Run: ``python examples/demo.py`` (a few seconds).
"""

import hashlib
import math
import os
import subprocess
import sys
import time

import numpy as np

import tessera as ts

#: the same f32 matmul in a fresh process (run with one BLAS thread)
CHILD = """
import hashlib, numpy as np, tessera as ts
rng = np.random.default_rng(7)
A = rng.standard_normal((64, 512)).astype(np.float32)
B = rng.standard_normal((512, 64)).astype(np.float32)
C = np.asarray(ts.jit(lambda a, b: a @ b)(A, B))
print(hashlib.sha256(C.tobytes()).hexdigest()[:16])
"""


def heading(title: str) -> None:
    """Print a section heading."""
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


@ts.jit
def mlp(x: ts.Tensor["B", "D", ts.f32], W1: ts.Tensor["D", "H", ts.f32],
        W2: ts.Tensor["H", "C", ts.f32]) -> ts.Tensor["B", "C", ts.f32]:
    """A two-layer perceptron with a softmax head."""
    return ts.softmax(ts.gelu(x @ W1) @ W2, axis=-1)


@ts.jit
def loss(x: ts.Tensor["B", "D", ts.f32], W1: ts.Tensor["D", "H", ts.f32],
         W2: ts.Tensor["H", "C", ts.f32], y: ts.Tensor["B", "C", ts.f32]) -> ts.Tensor[ts.f32]:
    """Mean squared error of the perceptron's output."""
    return ts.mse(mlp(x, W1, W2), y)


def mlp_reference(x: np.ndarray, W1: np.ndarray, W2: np.ndarray) -> np.ndarray:
    """The same network in float64 NumPy (tanh-form GELU)."""
    z = x @ W1
    h = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    s = h @ W2
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sha(t: object) -> str:
    """The SHA-256 of a tensor's stored bytes (first 16 hex digits)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(t)).tobytes()).hexdigest()[:16]


def main() -> None:
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    W1 = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
    W2 = (rng.standard_normal((32, 4)) / 4).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)]

    heading("1. A graph program, traced into Graph IR")
    out = mlp(x, W1, W2)
    print(ts.inspect_ir(mlp), end="")

    heading("2. Its result, against NumPy float64")
    ref = mlp_reference(*(a.astype(np.float64) for a in (x, W1, W2)))
    err = float(np.max(np.abs(np.asarray(out) - ref)))
    print(f"mlp(x): {out.shape} {out.element}; max |tessera - numpy| = {err:.1e}")
    assert err < 1e-6

    heading("3. Its gradient (reverse mode, itself Graph IR)")
    dW1, dW2 = ts.grad(loss)(x, W1, W2, y)  # x and y are data: the gradient is (dW1, dW2)
    print(f"grad(loss) -> dW1 {dW1.shape}, dW2 {dW2.shape}")
    h = 1e-6
    W2p, W2m = W2.astype(np.float64), W2.astype(np.float64)
    W2p[3, 1] += h
    W2m[3, 1] -= h
    x64, W1_64 = x.astype(np.float64), W1.astype(np.float64)
    fd = (np.mean((mlp_reference(x64, W1_64, W2p) - y) ** 2)
          - np.mean((mlp_reference(x64, W1_64, W2m) - y) ** 2)) / (2 * h)
    print(f"dL/dW2[3,1]: tessera {float(np.asarray(dW2)[3, 1]):+.7f}, "
          f"finite difference {fd:+.7f}")
    assert abs(float(np.asarray(dW2)[3, 1]) - fd) < 1e-6
    backward = ts.inspect_ir(ts.grad(loss), "graph", x, W1, W2, y)
    print(f"the backward graph has {backward.count(' = graph.')} ops")

    heading("4. A numerics policy at work")
    mat = np.random.default_rng(7)
    A = mat.standard_normal((64, 512)).astype(np.float32)
    B = mat.standard_normal((512, 64)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    for spelling in ("f32", "bf16 @accum(f32)", "fp8_e4m3 @accum(f32)"):
        pol = ts.parse_policy(spelling)
        gemm = ts.jit(lambda a, b: ts.gemm(a, b), name="gemm")
        C = gemm(ts.as_tensor(A, pol), ts.as_tensor(B, pol))
        rel = np.max(np.abs(np.asarray(C) - exact)) / np.max(np.abs(exact))
        print(f"inputs {spelling:<22} -> result {C.element!s:<4} max rel. error {rel:.1e}")
    print("(inputs are rounded into storage; products are summed exactly, rounded once)")

    heading("5. Determinism")
    f32_gemm = ts.jit(lambda a, b: a @ b, name="f32_gemm")
    first, second = sha(f32_gemm(A, B)), sha(f32_gemm(A, B))
    print(f"sha256, run 1: {first}\nsha256, run 2: {second}")
    assert first == second
    other = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                           env={**os.environ, "OPENBLAS_NUM_THREADS": "1",
                                "OMP_NUM_THREADS": "1"}, check=True).stdout.strip()
    print(f"sha256, new process with one BLAS thread: {other}")
    assert other == first
    whole = np.asarray(f32_gemm(A, B))
    rows = np.concatenate([np.asarray(f32_gemm(A[i:i + 16], B)) for i in range(0, 64, 16)])
    print(f"tessera: whole vs 16-row blocks -> {int(np.sum(whole != rows))} elements differ")
    assert np.array_equal(whole, rows)
    np_whole = A @ B
    np_rows = np.concatenate([A[i:i + 1] @ B for i in range(64)])
    print(f"numpy float32: whole vs row by row -> {int(np.sum(np_whole != np_rows))} of "
          f"{np_whole.size} elements differ")
    fast = ts.jit(lambda a, b: a @ b, mode="fast", name="fast_gemm")
    changed = int(np.sum(np.asarray(fast(A, B)) != whole))
    print(f"mode='fast' (BLAS, labelled non-bitwise): {changed} elements differ from the "
          "exact result")

    heading("A graph function down the stack: Graph -> Schedule -> Tile -> Target IR")
    def gated(u: object, v: object, b: object) -> object:  # an elementwise chain
        return ts.relu(u * v + b) / (ts.abs(v) + 1.0)
    u, v, bias = (mat.standard_normal(s).astype(np.float32) for s in ((64, 48), (64, 48), (48,)))
    lowered = ts.jit(gated).lower(u, v, bias)
    print(f"{lowered.ir('graph').count(' = graph.')} graph ops -> "
          f"{lowered.ir('schedule').count('schedule.kernel(')} fused kernel -> "
          f"{len(lowered.kernels)} tile.kernel, grid {lowered.kernels[0].grid}:")
    print("\n".join(lowered.kernels[0].text.splitlines()[1:8]) + "\n    ...")
    ptx = lowered.ptx("sm_90a")
    name, text = next(iter(ptx.items()))
    print(f"-> Target IR ({lowered.ir('target').count(chr(10))} lines) -> PTX of {name}: "
          f"{text.count(chr(10))} lines, e.g.")
    print("\n".join([line for line in text.splitlines() if "ld.global" in line][:3]))
    want = sha(lowered.run(u, v, bias))
    for backend in ("tile", "target"):
        same = sha(lowered.run(u, v, bias, backend=backend)) == want
        print(f"backend={backend!r} vs 'interp': bitwise equal: {same}")
        assert same
    softmax_rows = ts.jit(lambda x: ts.softmax(x, axis=-1)).lower(u)
    same = sha(softmax_rows.run(u, backend="tile")) == sha(softmax_rows.run(u))
    print(f"row softmax: {len(softmax_rows.kernels)} kernel with an exact row sum; "
          f"backend='tile' bitwise equal to 'interp': {same}")
    assert same

    heading("A tile kernel")
    import runpy  # the tile-level GEMM of examples/kernels/gemm.py, on bf16 tiles
    here = os.path.dirname(os.path.abspath(__file__))
    gemm_kernel = runpy.run_path(os.path.join(here, "kernels", "gemm.py"))["gemm"]
    a = mat.standard_normal((128, 256)).astype(ts.bf16.np_dtype)
    b = mat.standard_normal((256, 128)).astype(ts.bf16.np_dtype)
    tiles = {}
    for tile in ((64, 64, 32), (32, 128, 64)):
        c = np.zeros((128, 128), np.float32)
        tiles[tile] = gemm_kernel(a, b, c, tile_shape=tile)
    one, two = tiles.values()
    same = np.array_equal(one, two)
    exact = np.array_equal(one, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))
    print(f"@ts.kernel gemm, tiles (64, 64, 32) vs (32, 128, 64): bitwise equal: {same}; "
          f"equal to the exact product rounded once: {exact}")
    assert same and exact

    heading("The same kernel as PTX")
    c = np.zeros((128, 128), np.float32)
    for target, tile in (("sm_80", (64, 64, 32)), ("sm_90a", (64, 64, 64))):
        compiled = ts.compile_kernel(gemm_kernel, a, b, c, tile_shape=tile, target=target)
        stats = compiled.assemble().stats["gemm"]  # ptxas from the nvidia-cuda-nvcc wheel
        ts.check_against_reference(gemm_kernel, a, b, c, backend="target", target=target,
                                   tile_shape=tile)
        wgmma = "wgmma + TMA" if "wgmma" in compiled.ptx else "mma.sync + ldmatrix"
        print(f"{target}: {compiled.ptx.count(chr(10))} lines of PTX ({wgmma}), ptxas: "
              f"{stats.registers} registers, {stats.spill_stores} bytes spilled; the "
              "Target IR interpreter gives the tile interpreter's bits")
    print("Built: the graph level (examples/*.py, docs/user-guide.md), the Schedule IR that "
          "fuses graph\nprograms into kernels (docs/schedule.md), tile kernels with "
          "sanitizers and autotuning\n(examples/kernels/*.py, docs/kernels.md), the NVL72 "
          "mesh simulator ts.dist (docs/distributed.md),\nthe PTX backend and a PTX "
          "checker for anyone's PTX (docs/ptx-backend.md), and the conformance\nsuite "
          "(tessera conformance).")
    print(f"\ndemo finished in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
