"""A hand-written tile kernel inside a jitted, differentiated graph function.

``leaky_relu`` is a ``@ts.kernel`` that returns a tile (its result annotation gives
the output's shape); called inside ``@ts.jit`` it becomes one ``graph.kernel_call``
instruction holding its Tile IR. Autodiff cannot see through a hand-written kernel,
so ``ts.custom_vjp`` gives the call a backward rule: a second kernel,
``leaky_relu_grad``, which writes its result into an ``out_shape=`` buffer.

The same function written with ``ts.*`` operators is the reference: the kernels do
the same f32 operations, so the loss and its gradients agree bit for bit, on the graph
interpreter and in the tile simulator (``backend="tile"``, where the kernel is
launched by the generated host program next to the generated kernels).
"""

from __future__ import annotations

import numpy as np

import tessera as ts

SLOPE = 0.01
TILE = (4, 8)


@ts.kernel
def leaky_relu(x: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """``x`` where it is positive, ``SLOPE * x`` elsewhere; one (BM, BN) tile each."""
    t = x[tile_m:tile_m + BM, tile_n:tile_n + BN]
    return ts.tile.where(t > 0.0, t, SLOPE * t)


@ts.kernel
def leaky_relu_grad(x: ts.Tensor["M", "N", ts.f32], g: ts.Tensor["M", "N", ts.f32],
                    dx: ts.Tensor["M", "N", ts.f32]):
    """``dx = g`` where ``x`` is positive, ``SLOPE * g`` elsewhere."""
    t = x[tile_m:tile_m + BM, tile_n:tile_n + BN]
    c = g[tile_m:tile_m + BM, tile_n:tile_n + BN]
    dx[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.where(t > 0.0, c, SLOPE * c)


@ts.custom_vjp
def leaky(h):
    """The kernel as a differentiable graph operation."""
    return leaky_relu(h, tile_shape=TILE)


def leaky_fwd(h):
    return leaky_relu(h, tile_shape=TILE), h  # keep the input for the backward kernel


def leaky_bwd(h, g):
    return leaky_relu_grad(h, g, out_shape=h, tile_shape=TILE)


leaky.defvjp(leaky_fwd, leaky_bwd)


def loss(x, W, y_true):
    """Mean squared error of a one-layer network with the kernel as its activation."""
    return ts.mse(leaky(x @ W), y_true)


def loss_reference(x, W, y_true):
    """The same network with the activation written with ts.* operators."""
    h = x @ W
    return ts.mse(ts.where(h > 0.0, h, SLOPE * h), y_true)


def main() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    W = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((8, 8)).astype(np.float32)
    text = ts.jit(loss).inspect_ir("graph", x, W, y)
    print(next(line.strip() for line in text.splitlines() if "graph.kernel_call" in line))

    value, dW = ts.value_and_grad(ts.jit(loss))(x, W, y)
    ref_value, ref_dW = ts.value_and_grad(ts.jit(loss_reference))(x, W, y)
    assert np.asarray(value).tobytes() == np.asarray(ref_value).tobytes()
    assert np.asarray(dW).tobytes() == np.asarray(ref_dW).tobytes()

    # in the tile simulator, the host program launches the kernel between the
    # generated kernels (f32 matmuls are not generated yet, so this part has none)
    def scaled(h):
        return leaky(h * 2.0) + 1.0

    on_tiles = ts.jit(scaled, backend="tile")(y)
    assert np.asarray(on_tiles).tobytes() == np.asarray(ts.jit(scaled)(y)).tobytes()
    print(f"loss {float(np.asarray(value)):.6f}; dW equals the graph code's bit for bit "
          f"(max |dW| {float(np.abs(np.asarray(dW)).max()):.4f}): OK")


if __name__ == "__main__":
    main()
