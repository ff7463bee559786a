"""Bitwise determinism: results depend on the exact values only, never on the order,
blocking, transposition, BLAS threads or the float64 approximation used."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import tessera.numerics as ts
from tessera.numerics.reductions.matmul import dots as matmul_dots
from tests.numerics.reductions.test_rounding import expected_value

RNG = np.random.default_rng(7)


def _operands(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    scale_a = np.exp2(RNG.integers(-20, 20, (m, k)))
    scale_b = np.exp2(RNG.integers(-20, 20, (k, n)))
    a = (RNG.standard_normal((m, k)) * scale_a).astype(np.float32)
    b = (RNG.standard_normal((k, n)) * scale_b).astype(np.float32)
    return a, b


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


def test_invariant_under_permuting_k_and_transposing() -> None:
    a, b = _operands(40, 300, 30)
    ref = ts.matmul_rounded(a, b, ts.f32)
    perm = RNG.permutation(300)
    assert _bits(ts.matmul_rounded(a[:, perm], b[perm], ts.f32)) == _bits(ref)
    assert _bits(ts.matmul_rounded(b.T, a.T, ts.f32).T) == _bits(ref)
    assert _bits(ts.matmul_rounded(np.asfortranarray(a), b, ts.f32)) == _bits(ref)
    # Not true of a float32 BLAS product: the split of K changes its bits.
    halves = a[:, :150] @ b[:150] + a[:, 150:] @ b[150:]
    assert _bits(halves) != _bits(a @ b)


def test_blocked_exact_partial_sums_give_the_same_bits() -> None:
    a, b = _operands(4, 96, 3)
    got = ts.matmul_rounded(a, b, ts.bf16)
    for i in range(4):
        for j in range(3):
            # exact chunk sums, added exactly, rounded once
            chunks = [sum((Fraction(float(x)) * Fraction(float(y))
                           for x, y in zip(a[i, s:s + 32], b[s:s + 32, j])), Fraction(0))
                      for s in range(0, 96, 32)]
            total = float(ts.round_fraction(sum(chunks, Fraction(0)), ts.bf16))
            assert float(got[i, j]) == total
            terms = list(zip(a[i].astype(float), b[:, j].astype(float)))
            assert float(got[i, j]) == expected_value(terms, "bf16")


def test_independent_of_the_approximation() -> None:
    # Any approximation within the bound gives the same bits (rounding is monotone).
    exact = RNG.standard_normal(20_000) * np.exp2(RNG.integers(-30, 30, 20_000))
    want = ts.convert(exact, ts.f32)
    bound = np.abs(exact) * 2.0**-30
    for _ in range(3):
        approx = exact + RNG.uniform(-1, 1, exact.size) * bound
        got = ts.round_verified(approx, bound, ts.f32,
                                lambda idx: ts.convert(exact[idx], ts.f32))
        assert _bits(got) == _bits(want)


def test_sum_independent_of_order() -> None:
    x = (RNG.standard_normal((7, 5000)) * np.exp2(RNG.integers(-40, 40, (7, 5000))))
    ref = ts.sum_rounded(x, 1, False, ts.f32)
    perm = RNG.permutation(5000)
    assert _bits(ts.sum_rounded(x[:, perm], 1, False, ts.f32)) == _bits(ref)
    assert _bits(ts.sum_rounded(x.T, 0, False, ts.f32)) == _bits(ref)
    rows = [expected_value([(v, 1.0) for v in r], "f32") for r in x[:, :200]]
    assert _bits(ts.sum_rounded(x[:, :200], 1, False, ts.f32)) == \
        _bits(np.array(rows, np.float32))


SCRIPT = textwrap.dedent("""
    import hashlib, numpy as np, tessera.numerics as ts
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((257, 700)) * np.exp2(rng.integers(-8, 8, (257, 700))))
    b = (rng.standard_normal((700, 129)) * np.exp2(rng.integers(-8, 8, (700, 129))))
    a, b = a.astype(np.float32), b.astype(np.float32)
    r = ts.matmul_rounded(a, b, ts.f32)
    s = ts.sum_rounded(a, 1, False, ts.bf16)
    print(hashlib.sha256(r.tobytes() + s.tobytes()).hexdigest())
""")


@pytest.mark.parametrize("threads", ["2"])
def test_same_bits_with_other_blas_thread_counts(threads: str) -> None:
    digests = set()
    root = Path(__file__).resolve().parents[2]
    for count in ("1", threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=count, OMP_NUM_THREADS=count,
                   PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                             capture_output=True, text=True, cwd=root)
        digests.add(out.stdout.strip())
    ns: dict = {}
    exec(SCRIPT.replace("print(", "result = ("), ns)  # and this process, as configured
    digests.add(ns["result"])
    assert len(digests) == 1, digests
    assert hashlib.sha256(b"").hexdigest() not in digests


def test_fast_path_decides_almost_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = {"level2": 0, "level3": 0}
    refine, dot = matmul_dots.refine_sum, matmul_dots.exact_dot

    def counting_refine(terms: np.ndarray, *args: object) -> tuple:
        counts["level2"] += terms.shape[0]
        return refine(terms, *args)

    def counting_dot(*args: object, **kwargs: object) -> object:
        counts["level3"] += 1
        return dot(*args, **kwargs)

    monkeypatch.setattr(matmul_dots, "refine_sum", counting_refine)
    monkeypatch.setattr(matmul_dots, "exact_dot", counting_dot)
    a = RNG.standard_normal((256, 512)).astype(np.float32)
    b = RNG.standard_normal((512, 256)).astype(np.float32)
    ts.matmul_rounded(a, b, ts.f32)
    assert counts["level2"] < 0.01 * 256 * 256
    assert counts["level3"] == 0


def test_float64_targets_are_decided_without_fractions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    dot = matmul_dots.exact_dot

    def counting_dot(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        return dot(*args, **kwargs)

    monkeypatch.setattr(matmul_dots, "exact_dot", counting_dot)
    a = RNG.standard_normal((48, 96))
    b = RNG.standard_normal((96, 40))
    got = ts.matmul_rounded(a, b, ts.f64)
    assert calls["n"] < 0.02 * got.size
    for i, j in [(0, 0), (5, 17), (47, 39)]:
        terms = list(zip(a[i], b[:, j]))
        assert got[i, j] == expected_value(terms, "f64")
    # ties between float64 neighbours round to even
    tie = ts.matmul_rounded(np.array([[2.0**53, 1.0], [2.0**53, 3.0]]), np.ones((2, 1)),
                            ts.f64)
    assert tie.ravel().tolist() == [2.0**53, 2.0**53 + 4]
    x = RNG.standard_normal((30, 500))
    sums = ts.sum_rounded(x, 1, False, ts.f64)
    assert sums.tolist() == [expected_value([(v, 1.0) for v in r], "f64") for r in x]
