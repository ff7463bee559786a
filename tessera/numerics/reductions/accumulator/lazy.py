"""Exact accumulators held as the sums that make them, rounded by the correctly rounded
matrix product.

An :class:`ExactSum` is ``sum(bases) + sum(a @ b for a, b in terms)``, unevaluated:
``bases`` are arrays of exact values (float formats up to f32, or the integer counts
of :mod:`.reference`), ``terms`` pairs of operand arrays (formats up to f32) whose
products are summed over the last two axes, leading axes broadcasting. Adding two
sums concatenates their lists; nothing is computed until the sum is rounded, once.

Rounding (:meth:`ExactSum.rounded`) writes the whole sum as one matrix product,
``[a_1 .. a_J, c_1 .. c_L] @ [b_1; ..; b_J; I; ..; I]`` (K concatenated; each base
``c`` times an identity contributes ``c`` exactly, ``c * 0`` being an exact zero for
finite ``c``), and rounds it with :func:`~tessera.numerics.reductions.matmul
.matmul_rounded`: a float64 product with a proof of exactness or an error bound,
settling exactly only the elements it leaves undecided. That is the one correct
rounding of the exact value, as :func:`.reference.round_exact` computes it with Python
integers; the two are compared bit for bit by the tests. Leading (program) axes along
which only one operand varies are folded into its rows or columns first, so a tiled
product is one large product, not one per tile.

Non-finite entries are taken out of the product (their products are not finite, so
they do not touch a finite element's sum) and their elements get the class of the
order-independent rule of :mod:`.reference`, read from the float64 sum of the same
products: a NaN (the default one) if a NaN, an ``inf * 0`` or infinities of both signs
occur, else the infinity. What this form cannot take (integer-count bases, targets
other than floats, fewer than two axes) is rounded by the reference.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np

from tessera.numerics.formats.convert import convert
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.accumulator import reference
from tessera.numerics.reductions.matmul.operands import precision
from tessera.numerics.reductions.matmul.product import matmul_rounded
from tessera.numerics.reductions.rounding import target

EXACT = reference.EXACT


def exact_dtype(dt: np.dtype) -> bool:
    """Whether arrays of ``dt`` can be terms or bases of an :class:`ExactSum` as they
    are: real formats of at most 32 bits whose values have at most 26 significant bits
    (NumPy's f32, f16 and small ints, ml_dtypes' formats), so that every product of two
    of them is exact in float64."""
    return dt != EXACT and dt.kind in "fiubV" and dt.itemsize <= 4 and precision(dt) <= 26


class ExactSum:
    """``sum(bases) + sum(a @ b for (a, b) in terms)``, exactly, until rounded.

    Behaves as an exact accumulator array of shape :attr:`shape` (``dtype`` is
    :data:`EXACT`): :func:`numpy.asarray` gives the reference form (Python integer
    counts, :mod:`.reference`), and ndarray attributes read from it; the simulator's
    own operations use :meth:`plus`, :meth:`negated`, :meth:`map_arrays` and
    :meth:`rounded`, which stay lazy. Its arrays are never modified."""

    __slots__ = ("bases", "shape", "terms")

    dtype = EXACT

    def __init__(self, terms: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
                 bases: tuple[np.ndarray, ...] = (),
                 shape: tuple[int, ...] | None = None) -> None:
        self.terms = terms
        self.bases = bases
        if shape is None:  # (given by plus: a K loop's sum grows by one term a trip)
            shape = np.broadcast_shapes(
                *((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
                  for a, b in terms), *(c.shape for c in bases))
        self.shape: tuple[int, ...] = shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"ExactSum(shape={self.shape}, {len(self.terms)} products, "
                f"{len(self.bases)} bases)")

    # -- the reference form, for everything else an array is asked
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        parts = [reference.exact_products(a, b) for a, b in self.terms]
        parts += [c if c.dtype == EXACT else reference.to_exact(c) for c in self.bases]
        with np.errstate(invalid="ignore"):  # inf + -inf is the NaN of the rule
            total = reduce(reference.add_exact, parts)
        out = np.empty(self.shape, dtype=EXACT)
        out[...] = total
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, index: Any) -> Any:
        return np.asarray(self)[index]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not hasattr(np.ndarray, name):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    # -- lazy operations
    def plus(self, other: ExactSum) -> ExactSum:
        """The exact sum of two accumulators."""
        return ExactSum(self.terms + other.terms, self.bases + other.bases,
                        np.broadcast_shapes(self.shape, other.shape))

    def negated(self) -> ExactSum:
        """The exact negation (every base and every left operand negated, exactly)."""
        return ExactSum(tuple((np.negative(a), b) for a, b in self.terms),
                        tuple(np.negative(c) for c in self.bases), self.shape)

    def arrays(self) -> list[np.ndarray]:
        """Every array held, in the order :meth:`map_arrays` takes them."""
        return [x for pair in self.terms for x in pair] + list(self.bases)

    def map_arrays(self, fn: Any) -> ExactSum:
        """The same sum with ``fn`` applied to every array held (a selection of leading
        axes, which must keep each product's value per position)."""
        new = [fn(x) for x in self.arrays()]
        n = 2 * len(self.terms)
        return ExactSum(tuple(zip(new[:n:2], new[1:n:2])), tuple(new[n:]))

    def same_structure(self, other: ExactSum) -> bool:
        """Whether ``other`` holds as many terms and bases with the same trailing shapes
        (so that their arrays can be merged one by one)."""
        if len(self.terms) != len(other.terms) or len(self.bases) != len(other.bases):
            return False
        return all(x.shape[-2:] == y.shape[-2:] and x.dtype == y.dtype
                   for x, y in zip(self.arrays(), other.arrays()))

    def rounded(self, to: Any) -> np.ndarray:
        """The exact value rounded once, to nearest even, to the format ``to`` (a new
        array of ``to``'s storage): the bits of :func:`.reference.round_exact`."""
        fmt = target(to)
        if fmt.kind != "float" or fmt.name == "e8m0" or len(self.shape) < 2 \
                or any(c.dtype == EXACT for c in self.bases):
            return reference.round_exact(np.asarray(self), fmt)
        return _round(self, fmt)


def _round(acc: ExactSum, fmt: DType) -> np.ndarray:
    m, n = acc.shape[-2:]
    lefts = [a for a, _ in acc.terms]
    rights = [b for _, b in acc.terms]
    # zero bases add nothing (the sum of nothing rounds to +0, as an exact zero does)
    bases = [c for c in acc.bases if c.any()]
    special = None
    if not all(np.isfinite(x).all() for x in (*lefts, *rights, *bases)):
        special = _non_finite(lefts, rights, bases, acc.shape)
        lefts, rights, bases = ([np.where(np.isfinite(x), x, x.dtype.type(0)) for x in xs]
                                for xs in (lefts, rights, bases))
    for c in bases:
        lefts.append(np.broadcast_to(c, (*c.shape[:-2], m, n)))
        rights.append(np.eye(n, dtype=c.dtype))
    if not lefts:
        out = convert(np.zeros(acc.shape), fmt)  # an exact zero rounds to +0
    else:
        a, pa = _joined(lefts, -1, m)
        b, pb = _joined(rights, -2, n)
        out = folded_rounded(a, b, fmt, (pa, pb))
        if out.shape != acc.shape:
            out = np.ascontiguousarray(np.broadcast_to(out, acc.shape))
    if special is not None:
        where = ~np.isfinite(special)
        if where.any():
            vals = special[where]
            vals[vals != vals] = np.nan  # the default NaN
            out[where] = convert(vals, fmt)
    return out


def _non_finite(lefts: list[np.ndarray], rights: list[np.ndarray], bases: list[np.ndarray],
                shape: tuple[int, ...]) -> np.ndarray:
    """The float64 sum of every product and base: non-finite exactly where the exact
    sum has a non-finite term, then of the rule's class (finite products of formats up
    to f32 cannot overflow float64)."""
    total = np.zeros(shape)
    with np.errstate(all="ignore"):
        for a, b in zip(lefts, rights):
            total = total + np.matmul(a.astype(np.float64), b.astype(np.float64))
        for c in bases:
            total = total + c.astype(np.float64)
    return total


def _joined(parts: list[np.ndarray], axis: int, size: int) -> tuple[np.ndarray, int]:
    """``parts`` side by side along ``axis`` (their leading axes broadcast, their other
    matrix axis broadcast to ``size``), and the significand bits of their values."""
    bits = max(precision(p.dtype) for p in parts)
    other = -2 if axis == -1 else -1
    if len(parts) == 1 and parts[0].shape[other] == size:
        return parts[0], bits
    lead = np.broadcast_shapes(*(p.shape[:-2] for p in parts))
    dtypes = {p.dtype for p in parts}
    dt = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float64)  # (exact widening)
    shaped = []
    for p in parts:
        want = (*lead, p.shape[-2], size) if axis == -2 else (*lead, size, p.shape[-1])
        shaped.append(np.broadcast_to(p, want))
    return np.concatenate([p.astype(dt, copy=False) for p in shaped], axis=axis), bits


def folded_rounded(a: np.ndarray, b: np.ndarray, fmt: DType,
                   precisions: tuple[int, int]) -> np.ndarray:
    """``matmul_rounded(a, b)`` with the leading axes broadcast, computed with the axes
    along which only ``a`` varies folded into its rows and those along which only ``b``
    varies into its columns (each element is still its own correctly rounded sum, so
    the bits are the same, and one large product is much cheaper than many small
    ones)."""
    nl = max(a.ndim, b.ndim) - 2
    m, k = a.shape[-2:]
    n = b.shape[-1]
    sa = (1,) * (nl + 2 - a.ndim) + a.shape[:-2]
    sb = (1,) * (nl + 2 - b.ndim) + b.shape[:-2]
    a, b = a.reshape((*sa, m, k)), b.reshape((*sb, k, n))
    batch = [i for i in range(nl) if sa[i] > 1 and sb[i] > 1]
    afold = [i for i in range(nl) if sa[i] > 1 and sb[i] == 1]
    bfold = [i for i in range(nl) if sb[i] > 1 and sa[i] == 1]
    rest_a = [i for i in range(nl) if i not in batch and i not in afold]
    rest_b = [i for i in range(nl) if i not in batch and i not in bfold]
    size = math.prod(sa[i] for i in batch)
    at = a.transpose([*batch, *afold, *rest_a, nl, nl + 1]).reshape(
        size, math.prod(sa[i] for i in afold) * m, k)
    bt = b.transpose([*batch, nl, *bfold, *rest_b, nl + 1]).reshape(
        size, k, math.prod(sb[i] for i in bfold) * n)
    r = matmul_rounded(at, bt, fmt, precisions=precisions)
    r = r.reshape([sa[i] for i in batch] + [sa[i] for i in afold] + [m]
                  + [sb[i] for i in bfold] + [n])
    pos = {i: j for j, i in enumerate(batch)}
    pos.update({i: len(batch) + j for j, i in enumerate(afold)})
    pos.update({i: len(batch) + len(afold) + 1 + j for j, i in enumerate(bfold)})
    present = sorted(pos)
    out = r.transpose([pos[i] for i in present] + [len(batch) + len(afold), r.ndim - 1])
    missing = [i for i in range(nl) if i not in pos]
    return np.ascontiguousarray(np.expand_dims(out, missing) if missing else out)


__all__ = ["ExactSum", "exact_dtype", "folded_rounded"]
