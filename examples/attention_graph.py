"""An operator graph: attention captured by ``@graph.module`` and printed as Graph IR.

Seeds: guide-ch2-programming-model.md, section 2.2 "Operator Graphs" (the
``@graph.module("attention")`` example) and section 2.3 "Tiles"
(``op.matmul(A, B, tile_shape=(128, 128, 64))``).

``@graph.module("attention")`` is ``@ts.jit`` with a module name: the first call traces
the function into Graph IR, which the exact interpreter then runs. ``tile_shape`` is
kept on the ``graph.matmul`` op as a schedule hint; it does not change the result.

Run: ``python examples/attention_graph.py``
"""

import numpy as np

import tessera as ts
from tessera import graph, op


# --- guide-ch2-programming-model.md, 2.2 (as written) ----------------------------------
@graph.module("attention")
def attention(Q, K, V):
    S = op.matmul(Q, K.T)
    A = op.softmax(S)
    return op.matmul(A, V)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The same graph in float64, rounding to f32 after each operator as the graph does."""
    s = (q.astype(np.float64) @ k.astype(np.float64).T).astype(np.float32).astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    a = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64)
    return (a @ v.astype(np.float64)).astype(np.float32)


def main() -> None:
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((6, 8)).astype(np.float32) for _ in range(3))
    out = attention(Q, K, V)
    print(ts.inspect_ir(attention), end="")
    want = attention_reference(Q, K, V)
    err = float(np.max(np.abs(np.asarray(out) - want)))
    print(f"attention output {out.shape} {out.element}; max |tessera - numpy| = {err:.2e}")
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-7)

    # --- guide-ch2-programming-model.md, 2.3 (as written, with inputs added) ----------
    A = rng.standard_normal((256, 192)).astype(np.float32)
    B = rng.standard_normal((192, 128)).astype(np.float32)
    Y = op.matmul(A, B, tile_shape=(128, 128, 64))
    plain = op.matmul(A, B)
    assert np.array_equal(np.asarray(Y), np.asarray(plain))  # a hint, not a semantics
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(Y), ref, rtol=1e-6, atol=1e-6)

    tiled = ts.jit(lambda a, b: op.matmul(a, b, tile_shape=(128, 128, 64)), name="tiled")
    tiled(A, B)
    line = next(s for s in ts.inspect_ir(tiled).splitlines() if "graph.matmul" in s)
    print("tile hint in the IR:", line.strip().split(" : ")[0])
    print("OK: attention and the tiled matmul match the NumPy float64 reference")


if __name__ == "__main__":
    main()
