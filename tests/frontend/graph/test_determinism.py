"""Bitwise determinism: the same graph program gives the same bits in fresh processes,
whatever BLAS's thread count, and whatever way the product is split."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

import tessera as ts

PROGRAM = textwrap.dedent("""
    import hashlib
    import numpy as np
    import tessera as ts

    @ts.jit
    def model(x, w1, w2):
        h = ts.gelu(ts.matmul(x, w1))
        y = ts.matmul(ts.softmax(h, axis=-1), w2)
        return y, ts.sum(y, axis=0), ts.mean(y * y)

    rng = np.random.default_rng(1234)
    x = rng.standard_normal((192, 256)).astype(np.float32)
    w1 = rng.standard_normal((256, 320)).astype(np.float32)
    w2 = rng.standard_normal((320, 96)).astype(np.float32)
    digest = hashlib.sha256()
    for out in model(x, w1, w2):
        digest.update(np.ascontiguousarray(np.asarray(out)).tobytes())
    g = ts.grad(lambda w1: ts.mean(model(x, w1, w2)[0] ** 2))(w1)
    digest.update(np.asarray(g).tobytes())
    print(digest.hexdigest())
""")


def run_fresh(threads: int) -> str:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    return out.stdout.strip()


def test_same_sha256_across_processes_and_blas_thread_counts() -> None:
    one, two, again = run_fresh(1), run_fresh(2), run_fresh(1)
    assert len(one) == 64
    assert one == two == again


def test_matmul_result_does_not_depend_on_how_the_product_is_split() -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((33, 700)).astype(np.float32)
    b = rng.standard_normal((700, 17)).astype(np.float32)
    whole = np.asarray(ts.matmul(a, b))

    # Row by row, and with the operands transposed: each a different BLAS call shape.
    rows = np.stack([np.asarray(ts.matmul(a[i:i + 1], b))[0] for i in range(a.shape[0])])
    transposed = np.asarray(ts.matmul(b.T, a.T)).T
    np.testing.assert_array_equal(whole, rows)
    np.testing.assert_array_equal(whole, transposed)
    # And it is the correctly rounded product: the float64 product of these sizes is
    # exact to within far less than half an f32 ulp except in rare ties, so compare bits.
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert np.mean(whole == exact) > 0.999
