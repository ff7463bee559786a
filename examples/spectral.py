"""A spectral operator graph: the heat equation solved with fft, a filter and ifft.

Seed: guide-ch1-introduction-operator-graphs.md (operator algebra with explicit
adjoints; "compose operators: matmul, fft, softmax, PDE solvers"; spectral workloads).

On a periodic grid the heat equation ``u_t = nu * u_xx`` is solved exactly in Fourier
space: ``u(t) = ifft(fft(u0) * exp(-nu * k**2 * t))``. As a graph that is
``graph.fft -> graph.mul -> graph.ifft -> graph.real``. Autodiff uses the adjoints of
the spectral operators (the adjoint of ``fft`` is ``n * ifft``), so the gradient of a
misfit with respect to the diffusivity ``nu`` and to the initial state ``u0`` is
again a spectral graph.

Run: ``python examples/spectral.py``
"""

import numpy as np

import tessera as ts
from tessera import graph, op


@graph.module("heat")
def heat(u0: ts.Tensor["N", ts.f32], nu: ts.Tensor[ts.f32],
         k2t: ts.Tensor["N", ts.f32]) -> ts.Tensor["N", ts.f32]:
    """The exact heat-equation solution after time t (``k2t`` holds ``k**2 * t``)."""
    U = op.fft(u0)
    decay = op.exp(-nu * k2t)
    return op.real(op.ifft(U * decay))


@ts.jit
def misfit(u0: ts.Tensor["N", ts.f32], nu: ts.Tensor[ts.f32], k2t: ts.Tensor["N", ts.f32],
           target: ts.Tensor["N", ts.f32]) -> ts.Tensor[ts.f32]:
    """Mean squared distance between the evolved state and an observation."""
    return ts.mse(heat(u0, nu, k2t), target)


def main() -> None:
    n, t = 64, 0.05
    xs = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    k = np.fft.fftfreq(n, d=1.0 / n)  # integer wavenumbers on [0, 2*pi)
    k2t = (k**2 * t).astype(np.float32)
    u0 = (np.sign(np.sin(xs)) + 0.3 * np.cos(5 * xs)).astype(np.float32)  # a square wave
    nu = np.float32(0.8)

    u = heat(u0, np.asarray(nu), k2t)
    print(ts.inspect_ir(heat), end="")
    decay = np.exp(-np.float64(nu) * k2t.astype(np.float64))
    u_ref = np.real(np.fft.ifft(np.fft.fft(u0.astype(np.float64)) * decay))
    err = float(np.max(np.abs(np.asarray(u) - u_ref)))
    print(f"u(t={t}): max |tessera - numpy| = {err:.1e}")
    assert err < 1e-5

    target = np.real(np.fft.ifft(np.fft.fft(u0.astype(np.float64)) * np.exp(-0.5 * k**2 * t)))
    target = target.astype(np.float32)  # what a diffusivity of 0.5 would give
    g_nu = ts.grad(misfit, wrt="nu")(u0, np.asarray(nu), k2t, target)
    g_u0 = ts.grad(misfit, wrt="u0")(u0, np.asarray(nu), k2t, target)

    r = 2.0 * (u_ref - target) / n  # d misfit / d u
    du_dnu = np.real(np.fft.ifft(np.fft.fft(u0.astype(np.float64)) * -k2t * decay))
    want_nu = float(np.sum(r * du_dnu))
    want_u0 = np.real(np.fft.ifft(np.fft.fft(r) * decay))  # the filter is self-adjoint
    print(f"d misfit / d nu = {float(g_nu):.6e} (numpy {want_nu:.6e}); "
          f"positive: nu is too large")
    assert abs(float(g_nu) - want_nu) <= 1e-4 * abs(want_nu)
    np.testing.assert_allclose(np.asarray(g_u0), want_u0, rtol=1e-4, atol=1e-7)
    print("OK: solution and gradients match the NumPy float64 reference")


if __name__ == "__main__":
    main()
