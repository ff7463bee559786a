"""A custom VJP rule: GELU with a hand-written backward pass.

Seed: programming-model-guide.md, "Custom VJP/JVP Rules" (``custom_gelu``).

The forward pass is the tanh approximation of GELU. The seed's backward rule uses
``cdf + x * pdf`` with the tanh-form ``cdf`` but the *Gaussian* ``pdf``: a common
shortcut, and not the exact derivative of the forward function (they differ by up to
about 1e-3). So the check here is that tessera uses the rule it was given: the
gradient equals the custom formula, and visibly differs from the exact derivative.

Run: ``python examples/custom_gelu_vjp.py``
"""

import numpy as np

import tessera as ts


# --- programming-model-guide.md (as written) -------------------------------------------
@ts.custom_vjp
def custom_gelu(x):
    """GELU with custom backward pass"""
    return 0.5 * x * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))

def custom_gelu_fwd(x):
    y = custom_gelu(x)
    return y, (x, y)  # Save for backward

def custom_gelu_bwd(saved, grad_output):
    x, y = saved  # noqa: RUF059 - the seed saves y and does not use it
    # Custom gradient computation
    cdf = 0.5 * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = ts.exp(-0.5 * x**2) / ts.sqrt(2 * ts.pi)
    grad_input = grad_output * (cdf + x * pdf)
    return grad_input

custom_gelu.defvjp(custom_gelu_fwd, custom_gelu_bwd)


@ts.jit
def total(x: ts.Tensor["N", ts.f32]) -> ts.Tensor[ts.f32]:
    """A scalar to differentiate: the sum of GELU over a vector."""
    return ts.sum(custom_gelu(x))


def custom_rule(x: np.ndarray) -> np.ndarray:
    """The seed's backward formula in float64."""
    cdf = 0.5 * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi)
    return cdf + x * pdf


def exact_derivative(x: np.ndarray) -> np.ndarray:
    """The true derivative of the forward (tanh) formula in float64."""
    c, a = 0.79788456, 0.044715
    t = np.tanh(c * (x + a * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x)


def main() -> None:
    x = np.linspace(-4.0, 4.0, 33).astype(np.float32)
    y = custom_gelu(x)
    fwd_ref = 0.5 * x.astype(np.float64) * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3.0)))
    np.testing.assert_allclose(np.asarray(y), fwd_ref, rtol=1e-5, atol=1e-6)

    g = np.asarray(ts.grad(total)(x)).astype(np.float64)
    x64 = x.astype(np.float64)
    to_rule = float(np.max(np.abs(g - custom_rule(x64))))
    to_exact = float(np.max(np.abs(g - exact_derivative(x64))))
    print(f"max |grad - custom rule|      = {to_rule:.2e}")
    print(f"max |grad - exact derivative| = {to_exact:.2e}")
    assert to_rule < 1e-6, "the gradient must come from the custom rule"
    assert to_exact > 1e-4, "the custom rule is not the exact derivative"

    # The same rule serves vjp (and, transposed, jvp).
    _, pullback = ts.vjp(custom_gelu, x)
    (ct,) = pullback(np.ones_like(x))
    assert np.array_equal(np.asarray(ct), np.asarray(ts.grad(total)(x)))
    print("OK: the gradient is the custom rule, not the exact derivative")


if __name__ == "__main__":
    main()
