"""Bitwise determinism: across processes and BLAS thread counts, and across K splits."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tessera.interp import run_function
from tessera.ir.core import Block, Builder, Function
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tests.interp.graph.util import ref_round_fraction, same

ROOT = Path(__file__).resolve().parents[3]
N = 256


def model() -> Function:
    """Two matmuls and reductions over 256x256 f32 tensors."""
    t = TensorType((N, N), "f32")
    block = Block()
    x, w1, w2 = (block.add_arg(t, name) for name in ("x", "w1", "w2"))
    b = Builder(block)
    (h,) = b.create(graph_ir.MatMul(), [x, w1])
    (r,) = b.create(graph_ir.Relu(), [h])
    (y,) = b.create(graph_ir.MatMul(), [r, w2])
    (rows,) = b.create(graph_ir.Sum((1,)), [y])
    (mean,) = b.create(graph_ir.Mean(()), [y])
    (probs,) = b.create(graph_ir.Softmax(-1), [y])
    (loss,) = b.create(graph_ir.Mse(), [y, x])
    outs = [h, y, rows, mean, probs, loss]
    b.create(graph_ir.Return(), outs)
    return Function("model", block, [v.type for v in outs])


def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(2024)
    return [rng.standard_normal((N, N)).astype(np.float32) for _ in range(3)]


def digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


_SCRIPT = """
from tests.interp.graph.test_determinism import digest, inputs, model
from tessera.interp import run_function
print(digest(run_function(model(), inputs())))
"""


def _digest_in_subprocess(threads: int) -> str:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    return done.stdout.strip()


def test_same_bits_in_fresh_processes_with_1_and_2_blas_threads() -> None:
    here = digest(run_function(model(), inputs()))
    assert _digest_in_subprocess(1) == here
    assert _digest_in_subprocess(2) == here


def _expansion(terms: list[float]) -> list[float]:
    """Float64 components whose exact sum is the exact sum of ``terms`` (repeated fsum)."""
    parts, rest = [], list(terms)
    while (s := math.fsum(rest)) != 0.0:
        parts.append(s)
        rest.append(-s)
    return parts


def _blocked_reference(a: np.ndarray, b: np.ndarray, rows: int, splits: list[int]
                       ) -> np.ndarray:
    """The exact product for ``rows`` rows, K summed block by block, rounded once."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    edges = np.cumsum([0, *splits])
    out = np.empty((rows, b.shape[1]), np.float32)
    for i in range(rows):
        prods = a64[i][:, None] * b64  # exact: f32 x f32 fits in float64
        for j in range(b.shape[1]):
            parts = [p for lo, hi in itertools.pairwise(edges)
                     for p in _expansion(prods[lo:hi, j].tolist())]
            out[i, j] = ref_round_fraction(sum(map(Fraction, parts), Fraction(0)), "f32")
    return out


@pytest.mark.parametrize("splits", [[N], [64] * 4, [100, 156], [1] * 3 + [N - 3]])
def test_exact_matmul_is_independent_of_the_k_split(splits) -> None:
    x, w1, _ = inputs()
    h = run_function(model(), inputs())[0]
    rows = 16
    assert same(h[:rows], _blocked_reference(x, w1, rows, splits))


def test_fast_mode_runs_and_stays_close() -> None:
    exact = run_function(model(), inputs())
    fast = run_function(model(), inputs(), mode="fast")
    for e, f in zip(exact, fast):
        np.testing.assert_allclose(f, e, rtol=1e-3, atol=1e-3)
