"""The tolerance of a fast-mode kernel against the tile interpreter's checked result.

A kernel compiled with ``mode="fast"`` differs from its checked meaning in three ways,
each with a bound:

1. each approximate instruction's own error (:data:`tessera.interp.target.approx.BOUNDS`
   composed through its instruction sequence: :func:`tessera.lower.fastmath.exp_error`
   for ``exp``, with the shift ``|b| <= SHIFT_MAX`` for an ``exp(a - b)`` that the
   lowering fuses (:func:`tessera.lower.fastmath.shifted_exp`),
   :func:`~tessera.lower.fastmath.log_error` for ``log``, ``div.full`` for float
   division), relative ``eps_i`` (for ``log``, relative to ``|ln x| + 1``), plus at
   most 2^-126 absolute for each ``exp`` result the ``.ftz`` flushes;
2. reductions in f32 instead of float64 rounded once: at most ``gamma_K`` over the
   kernel's longest reduction ``K`` (Higham, sec. 3.1), as for a GPU's f32
   accumulation (:func:`tessera.frontend.kernel.backends.check.tolerance`);
3. a value that carries an error and is then rounded to a narrower format (a ``bf16``
   cast of flash attention's ``P``) may round to the neighbouring value: at most one
   ulp of that format, ``2 u_fmt`` relative, for every narrowing op that an
   approximate op can reach (it follows one in program order, or shares a loop with
   one, whose next trip carries its error around).

**Composition.** To first order, the relative errors along one chain of operations
add; an op inside loops runs once per trip, so its ``eps`` counts ``trips`` times
(the product of the enclosing loops' trip counts, as for ``gamma_K``). With ``n_i``
such counts, ``E = prod (1 + eps_i)^n_i - 1`` bounds the relative error of any
chain, and the tolerance of an output element whose reference is ``ref`` is

    2 u_out |ref| + (1 + 2 u_out) ((1 + gamma_K)(1 + E) - 1) (|ref| + 1) + A

with ``u_out`` the unit roundoff of the output format (both results are rounded to
it, so they may be one ulp apart) and ``A`` the flushed ``exp`` results' absolute
error (2^-126 per ``exp`` count). Like the GPU tolerance, errors are measured against
``|ref| + 1``: the magnitudes of a kernel's intermediate values are not known here,
and a kernel whose intermediates cancel far below its inputs (or exceed ``|ref| + 1``
by much) can exceed this bound while every instruction meets its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.interp.target.approx import BOUNDS
from tessera.ir.core import Instr
from tessera.lower.fastmath import (
    SHIFT_MAX,
    element_name,
    exp_error,
    folded_scale,
    log_error,
    shifted_exp,
)

#: unit roundoff of the formats a value may be narrowed to
_NARROW_U = {"bf16": 2.0**-8, "f16": 2.0**-11, "e4m3": 2.0**-4, "e5m2": 2.0**-3}


@dataclass
class FastBudget:
    """The counts of :func:`fast_budget`: ``(relative error, count)`` per op kind."""

    terms: dict[str, tuple[float, int]] = field(default_factory=dict)
    exp_count: int = 0

    def add(self, name: str, eps: float, count: int) -> None:
        old = self.terms.get(name, (eps, 0))[1]
        self.terms[name] = (eps, old + count)

    @property
    def relative(self) -> float:
        """``E = prod (1 + eps_i)^n_i - 1``."""
        total = 1.0
        for eps, n in self.terms.values():
            total *= (1.0 + eps) ** n
        return total - 1.0


def fast_budget(fn: Any) -> FastBudget:
    """Walk a specialised ``tile.kernel`` and count its approximate ops and the narrowing
    ops they can reach, each weighted by its loops' trip counts."""
    from tessera.ir.core import uses
    from tessera.ir.dialects import tile as tile_ir
    from tessera.ir.dialects.tile import compute as tile_compute

    approx = {tile_compute.Exp: ("exp", exp_error()), tile_compute.Log: ("log", log_error()),
              tile_compute.Div: ("div", BOUNDS["div.full.f32"].relative)}
    shifted = ("exp(a - b)", exp_error(SHIFT_MAX))
    scaled = ("exp(a c - b)", exp_error(SHIFT_MAX, scaled=True))
    users = uses(fn.body)
    rounding = (tile_compute.Cast, tile_compute.Binary, tile_compute.Unary)
    budget = FastBudget()
    consts: dict[Any, int] = {}
    seen_approx = False
    narrowing: list[tuple[str, int, bool, tuple[int, ...]]] = []
    loops_with_approx: set[int] = set()

    def walk(block: Any, trips: int, loops: tuple[int, ...]) -> None:
        nonlocal seen_approx
        for instr in block.instrs:
            op = instr.op
            if isinstance(op, tile_ir.Constant) and isinstance(op.value, int):
                consts[instr.results[0]] = op.value
            kind = approx.get(type(op))
            sub = shifted_exp(instr, users) if kind is not None else None
            if sub is not None:
                owner = sub.operands[0].owner
                kind = scaled if isinstance(owner, Instr) and folded_scale(
                    owner, users) is not None else shifted
            is_float = bool(instr.results) and element_name(instr.results[0].type) in (
                "f32", "bf16", "f16")
            if kind is not None and is_float:
                budget.add(kind[0], kind[1], trips)
                if kind[0].startswith("exp"):
                    budget.exp_count += trips
                seen_approx = True
                loops_with_approx.update(loops)
            if isinstance(op, rounding):  # loads and views of narrow memory do not round
                name = element_name(instr.results[0].type)
                if name in _NARROW_U:
                    narrowing.append((name, trips, seen_approx, loops))
            inner, inner_loops = trips, loops
            if isinstance(op, tile_ir.For):
                lo, hi, step = (consts.get(v) for v in instr.operands[:3])
                inner = trips * (len(range(lo, hi, step)) if None not in (lo, hi, step) else 1)
                inner_loops = (*loops, id(instr))
            for region in instr.regions:
                walk(region.block, inner, inner_loops)

    walk(fn.body, 1, ())
    for name, trips, after, loops in narrowing:
        if after or loops_with_approx.intersection(loops):
            budget.add(f"round to {name}", 2 * _NARROW_U[name], trips)
    return budget


def _unit_roundoff(dtype: np.dtype) -> float:
    """Half the machine epsilon of a float format (bf16 and fp8 included); 0 for others."""
    import ml_dtypes

    try:
        return float(ml_dtypes.finfo(dtype).eps) / 2
    except (TypeError, ValueError):
        return 0.0


def fast_tolerance(kernel: Any, reference: np.ndarray, args: tuple[Any, ...],
                   launch_kw: dict[str, Any]) -> np.ndarray:
    """The elementwise bound of the module docstring for one output."""
    from tessera.frontend.kernel.backends.check import longest_reduction

    fn = kernel.compile(*args, **launch_kw).functions[kernel.name]
    budget = fast_budget(fn)
    k = longest_reduction(fn)
    u = 2.0**-24
    gamma = k * u / (1 - k * u)
    u_out = _unit_roundoff(reference.dtype)
    rel = (1 + gamma) * (1 + budget.relative) - 1
    ref = np.abs(reference.astype(np.float64))
    flushed = budget.exp_count * BOUNDS["ex2.approx.ftz.f32"].absolute
    return 2 * u_out * ref + (1 + 2 * u_out) * rel * (ref + 1.0) + flushed


def within_fast_bound(reference: np.ndarray, got: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Where ``got`` meets the bound: within it, equal (infinities included), both NaN,
    or an infinity of the reference's sign where the reference plus the bound reaches
    the format's overflow threshold (an approximate result near the largest finite
    value may overflow where the exact one does not)."""
    r64, g64 = reference.astype(np.float64), got.astype(np.float64)
    u = _unit_roundoff(reference.dtype)
    top = float(ml_finfo_max(reference.dtype)) * (1 + u) if u else np.inf
    with np.errstate(invalid="ignore"):
        ok = (np.abs(r64 - g64) <= bound) | (r64 == g64) | (np.isnan(r64) & np.isnan(g64))
        ok |= np.isinf(g64) & (np.sign(g64) == np.sign(r64)) & (np.abs(r64) + bound >= top)
    return ok


def ml_finfo_max(dtype: np.dtype) -> float:
    """The largest finite value of a float format (bf16 and fp8 included)."""
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).max)


__all__ = ["FastBudget", "fast_budget", "fast_tolerance", "within_fast_bound"]
