"""The looped rounding of a long accumulator in memory (``round_words_at``) against
exact rational arithmetic, as ``test_longacc`` checks the unrolled ``round_words``.

Thread ``i`` of a small ``ptx.kernel`` (run on the Target IR interpreter) rounds the
words of row ``i`` in global memory: to float64 to odd, or to nearest even with
``nearest``, divided by ``divisor``; the results must be the rounding of the exact
``fractions.Fraction``, and the first pass must leave the row's carries normalised.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tessera.ir.core import Value
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import SUM_QUANTUM, round_words_at
from tests.lower.exact.test_longacc import (
    THREADS,
    D,
    _at,
    _edge_values,
    _kernel,
    _odd,
    _words_of,
)

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")


def _rows(seed: int) -> np.ndarray:
    """Edge integers as words with carries moved between words, then random signed
    words (the top word small, as a sum of fewer than 2**43 terms keeps it)."""
    rng = np.random.default_rng(seed)
    ints = _edge_values()
    words = np.zeros((THREADS, D), np.int64)
    for t in range(THREADS):
        if t < len(ints):
            w = _words_of(ints[t])
            if t % 2:
                w[2] -= 3 << 32
                w[3] += 3
        else:
            w = [int(v) for v in rng.integers(-(2**40), 2**40, D)]
            w[-1] >>= 32
            w[rng.integers(0, D)] = 0
        words[t] = w
    return words


def _run(words: np.ndarray, divisor: int, nearest: bool) -> tuple[np.ndarray, np.ndarray]:
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        row = _at(e, p[0], i, 8 * D)
        flags = e.const(0, "u32")
        value = round_words_at(e, D, "global", row, flags, SUM_QUANTUM, divisor, nearest)
        e.st("global", _at(e, p[1], i, 8), value, "f64")

    mem = words.view(np.uint64).copy()
    out = np.zeros(THREADS, np.float64)
    target.run_target(_kernel("round_words_at", 2, body), [mem, out])
    return out, mem.view(np.int64)


@pytest.mark.parametrize(("divisor", "nearest"), [(1, False), (37, False), (2**31 - 1, False),
                                                  (1, True), (3, True)])
def test_looped_rounding_is_the_correct_rounding(divisor: int, nearest: bool) -> None:
    words = _rows(divisor)
    got, left = _run(words, divisor, nearest)
    for t in range(THREADS):
        n = sum(int(v) << (32 * k) for k, v in enumerate(words[t]))
        q = Fraction(n, (1 << SUM_QUANTUM) * divisor)
        want = float(q) if nearest else _odd(q)
        assert got[t] == want and (n != 0 or math.copysign(1, got[t]) > 0), (t, n)
        # the first pass normalised the carries: 32-bit digits below a signed top word
        assert all(0 <= int(v) < 2**32 for v in left[t, :-1]), t
        assert sum(int(v) << (32 * k) for k, v in enumerate(left[t])) == n, t
