"""Reverse-mode autodiff of a small regression loss.

Seed: programming-model-guide.md, "Basic Autodiff" (``loss_function``).

``ts.grad(loss_function)`` with no ``argnums`` differentiates every argument except
the *data* arguments (named ``x``, ``y``, ``inputs``, ``targets``, ``labels``,
``batch``, or ending in ``_true``/``_target``/``_label``). For
``loss_function(x, W, b, y_true)`` that is ``(W, b)``, exactly the two gradients the
seed unpacks. The gradient is itself Graph IR (a backward pass built from per-op
rules), run by the same exact interpreter.

Run: ``python examples/basic_autodiff.py``
"""

import numpy as np

import tessera as ts


# --- programming-model-guide.md (as written) -------------------------------------------
@ts.jit
@ts.autodiff
def loss_function(x, W, b, y_true):
    """Automatic differentiation example"""
    # Forward pass
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    loss = ts.mse(y_pred, y_true)
    return loss


def analytic_gradients(x: np.ndarray, W: np.ndarray, b: np.ndarray,
                       y_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d/dW and d/db of mean((relu(xW + b) - y)**2), in float64."""
    x64, W64, b64, y64 = (a.astype(np.float64) for a in (x, W, b, y_true))
    z = x64 @ W64 + b64
    d = 2.0 * (np.maximum(z, 0.0) - y64) / z.size * (z > 0)
    return x64.T @ d, d.sum(axis=0)


def main() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 5)).astype(np.float32)
    W = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    y_true = rng.standard_normal((16, 3)).astype(np.float32)

    # --- the seed's call (as written) -------------------------------------------------
    # Compute gradients
    grad_fn = ts.grad(loss_function)
    grad_W, grad_b = grad_fn(x, W, b, y_true)

    print(f"loss = {float(loss_function(x, W, b, y_true)):.6f}")
    print(f"grad_W: {grad_W.shape} {grad_W.element}, grad_b: {grad_b.shape} {grad_b.element}")
    want_W, want_b = analytic_gradients(x, W, b, y_true)
    np.testing.assert_allclose(np.asarray(grad_W), want_W, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad_b), want_b, rtol=1e-5, atol=1e-6)

    # A central finite difference on one weight, in float64 NumPy, agrees as well.
    def loss64(Wm: np.ndarray) -> float:
        z = x.astype(np.float64) @ Wm + b
        return float(np.mean((np.maximum(z, 0.0) - y_true) ** 2))

    h, W64 = 1e-6, W.astype(np.float64)
    step = np.zeros_like(W64)
    step[1, 2] = h
    fd = (loss64(W64 + step) - loss64(W64 - step)) / (2 * h)
    print(f"dL/dW[1,2]: tessera {float(np.asarray(grad_W)[1, 2]):.6f}, "
          f"finite difference {fd:.6f}")
    assert abs(float(np.asarray(grad_W)[1, 2]) - fd) < 1e-4
    print("OK: gradients match the analytic float64 gradients")


if __name__ == "__main__":
    main()
