"""The quick-start training step, on one device.

Seed: overview-and-quickstart.md, "Example 3: Distributed Training on Multiple GPUs".

As written, the seed cannot run: ``x`` and ``y`` are never defined (a ``NameError``).
With them given, the whole seed, mesh and sharded weight included, runs on the mesh
simulator (``ts.dist``; tests/examples/test_seeds.py). This script is the graph part on
one device. Corrected here: ``x`` and ``y`` are given, and
``W`` is an ordinary tensor with the seed's element type ``"bf16 @accum(f32)"``.
``ts.grad(train_step)`` with no ``argnums`` differentiates ``W`` only (``x`` and ``y``
are data arguments) and returns that one gradient bare, as the seed's
``grad_W = ...`` expects. The gradient has W's element type.

Run: ``python examples/training_step.py``
"""

import numpy as np

import tessera as ts


# --- overview-and-quickstart.md, Example 3 (the graph part, as written) ----------------
@ts.jit
@ts.autodiff
def train_step(x, y, W):
    """Training step with automatic gradient computation"""
    pred = ts.gemm(x, W)  # Automatically handles TP sharding
    loss = ts.mse(pred, y)
    return loss


def main() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    W = ts.as_tensor(rng.standard_normal((64, 16)).astype(np.float32) * 0.1,
                     "bf16 @accum(f32)")  # BF16 storage, FP32 accumulation

    # Gradients automatically handle distributed communication
    grad_W = ts.grad(train_step)(x, y, W)

    print(f"loss = {float(train_step(x, y, W)):.6f}")
    print(f"grad_W: {grad_W.shape} {grad_W.element}")
    assert grad_W.element == W.element
    W64 = np.asarray(W).astype(np.float64)
    pred = x.astype(np.float64) @ W64
    want = x.astype(np.float64).T @ (2.0 * (pred - y) / pred.size)
    got = np.asarray(grad_W).astype(np.float64)
    # bf16 keeps 8 significant bits: the stored gradient is within 2**-8 relative.
    np.testing.assert_allclose(got, want, rtol=2.0**-7, atol=1e-6)
    print("OK: grad_W matches the float64 gradient within bf16 rounding")


if __name__ == "__main__":
    main()
