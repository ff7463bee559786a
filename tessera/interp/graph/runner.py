"""The Graph IR interpreter: the definition of what a Graph IR program computes.

Values
    Every value is a NumPy array in the *storage* format of its ``TensorType`` element
    (``float32`` for f32 and tf32, ``ml_dtypes`` arrays for bf16, fp8, fp6 and fp4).
    Arguments are checked against the function's argument types; nothing is converted.

Rounding (exact mode, the default)
    Each rule widens its operands exactly to float64 (complex128 for complex), computes,
    and rounds the result *once* to the result element with ``numerics.convert``: round
    to nearest even with the format's saturation, or stochastic rounding when the
    element's policy says ``@stochastic_round``. Every op application gets a
    deterministic stochastic-rounding counter: the number of elements produced by the
    instructions executed before it (nested regions included), so stochastic results
    are reproducible run to run.

    * ``+ - * /`` and ``sqrt`` computed in float64 and rounded once are *correctly
      rounded* for every format of at most 24 significand bits (f32, tf32, bf16, f16,
      fp8, fp6, fp4): float64 has 53 >= 2p + 2 bits, so the double rounding is
      innocuous (Figueroa, "When is double rounding innocuous?", 1995). For f64 they
      are IEEE float64 operations, also correctly rounded.
    * Transcendentals (sin, cos, pow, f64 exp, complex log and tanh) are NumPy's float64
      functions followed by one rounding: deterministic for a given NumPy build and
      platform, and faithful for narrow formats in practice, but not guaranteed
      correctly rounded. ``exp`` of formats up to 32 bits, ``erf``, real ``log``
      and ``tanh`` and both forms of ``gelu`` are specified algorithms
      (``numerics.transcendental``), the same bits on every machine and on a GPU.
    * Selections (max, min, maximum, minimum, relu, where, abs and neg of reals, real,
      imag, data movement) are exact.
    * Reductions and contractions are exact then rounded once; see
      :mod:`tessera.interp.graph.reduce`. Their bits do not depend on BLAS, thread count
      or how a reduction is split.
    * Integers are computed exactly and saturated to the result format (``convert``);
      integer division truncates toward zero and raises on a zero divisor.

Fast mode (``mode="fast"``, labelled non-bitwise)
    matmul uses ``np.matmul`` (BLAS) in the accumulator's dtype, sum and mean use
    ``np.sum`` / ``np.mean`` in that dtype, then one rounding to the result element.
    Results depend on the BLAS build, thread count and blocking.

Errors
    An op without a rule, an argument of the wrong shape or dtype, and a failure at run
    time (integer division by zero, a shape the verifier let through, a conversion that
    ``convert`` refuses) raise :class:`~tessera.errors.InterpretError` at the
    instruction's source location. IEEE exceptions are not errors: ``sqrt(-1)`` is NaN,
    ``1/0`` is inf, and NumPy's warnings for them are silenced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.errors import UNKNOWN_LOC, InterpretError, Loc, TesseraError, user_location
from tessera.interp.apply import IMPL, MODES, Apply, Rule
from tessera.interp.check import check_arrays, check_results
from tessera.interp.graph import (  # noqa: F401 - the rule modules register themselves
    collective,
    elementwise,
    kernel,
    reduce,
    structure,
)
from tessera.ir.core import Block, Function, Instr, IRRegion, Op, Type, Value, walk

__all__ = ["IMPL", "MODES", "Apply", "Rule", "run_function", "run_op"]


@dataclass
class _Run:
    """State of one function run: the mode and the stochastic-rounding counter."""

    mode: str
    counter: int = 0


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InterpretError(f"unknown interpreter mode {mode!r}",
                             hint="use mode='exact' (bitwise, the default) or mode='fast'")


def run_function(fn: Function, args: Sequence[np.ndarray], *, mode: str = "exact"
                 ) -> list[np.ndarray]:
    """Run a Graph IR function on NumPy arrays; return the operands of its return.

    ``args`` must have the shapes and storage dtypes of the function's argument types
    (symbolic dims are bound from the arrays and must agree). ``mode`` is ``"exact"``
    (the definition, bitwise reproducible) or ``"fast"`` (BLAS matmul and NumPy sums).
    The returned arrays are fresh: none aliases an argument or another result.
    """
    _check_mode(mode)
    arrays = check_arrays([a.type for a in fn.args], args, f"@{fn.name}",
                          names=[a.hint for a in fn.args])
    results = _run_block(fn.body, arrays, _Run(mode), {})
    return _fresh(results, arrays)


def run_op(op: Op, operands: Sequence[np.ndarray], operand_types: Sequence[Type],
           result_types: Sequence[Type] | None = None, *, mode: str = "exact",
           counter_offset: int = 0, regions: Sequence[IRRegion] = (),
           loc: Loc | None = None) -> list[np.ndarray]:
    """Run one op eagerly on arrays (the front end's eager calls outside ``jit``).

    ``result_types`` default to ``op.infer(operand_types)``. ``counter_offset`` is the
    stochastic-rounding counter of the first result element; ``regions`` are the op's
    regions (``graph.custom``). Errors are reported at ``loc``, or at the caller's line.
    """
    _check_mode(mode)
    arrays = check_arrays(operand_types, operands, op.name)
    if result_types is None:
        try:
            result_types = op.infer(list(operand_types))
        except TesseraError as err:
            raise InterpretError(err.message, hint=err.hint, loc=loc) from None
    instr = Instr(op, [Value(t) for t in operand_types], [Value(t) for t in result_types],
                  list(regions), loc if loc is not None else user_location(2))
    run = _Run(mode, counter_offset)
    return _fresh(_apply(instr, arrays, run, {}), arrays)


def _run_block(block: Block, args: Sequence[np.ndarray], run: _Run,
               outer: dict[Value, np.ndarray]) -> list[np.ndarray]:
    """Run ``block`` with its arguments bound to ``args``; return its terminator's operands."""
    env = dict(outer)
    env.update(zip(block.args, args))
    dead = _dead_after(block)
    for k, instr in enumerate(block.instrs):
        try:
            operands = [env[v] for v in instr.operands]
        except KeyError:
            raise InterpretError(f"{instr.op.name} uses a value that has not been computed",
                                 loc=_loc(instr),
                                 hint="verify the function: operands must be defined "
                                      "before use") from None
        results = _apply(instr, operands, run, env)
        if instr.op.terminator:
            return results
        env.update(zip(instr.results, results))
        for v in dead.get(k, ()):
            del env[v]  # free intermediates as soon as nothing later reads them
    raise InterpretError("a block ends without graph.return or graph.yield",
                         loc=block.instrs[-1].loc if block.instrs else None,
                         hint="end every function and region with a terminator")


def _dead_after(block: Block) -> dict[int, list[Value]]:
    """For each instruction index, the values of this block last read there (or, for
    unused results, defined there). Values of enclosing blocks are never listed."""
    last: dict[Value, int] = {}
    for k, instr in enumerate(block.instrs):
        for v in instr.results:
            last[v] = k
        for inner in walk(instr):
            for v in inner.operands:
                if v in last:
                    last[v] = k
    dead: dict[int, list[Value]] = {}
    for v, k in last.items():
        dead.setdefault(k, []).append(v)
    return dead


def _loc(instr: Instr) -> Loc | None:
    """The instruction's location; None (the user's current line) for IR built without."""
    return None if instr.loc == UNKNOWN_LOC else instr.loc


def _apply(instr: Instr, operands: list[np.ndarray], run: _Run,
           env: dict[Value, np.ndarray]) -> list[np.ndarray]:
    """Run one instruction's rule, turning any failure into an InterpretError."""
    op = instr.op
    impl = IMPL.get(type(op))
    if impl is None:
        raise InterpretError(f"the interpreter has no rule for {op.name}",
                             loc=_loc(instr),
                             hint="register one in tessera.interp.IMPL")
    loc = _loc(instr)
    ap = Apply(op, [v.type for v in instr.operands], [v.type for v in instr.results],
               run.mode, run.counter, loc, instr.regions,
               lambda block, values: _run_block(block, values, run, env))
    try:
        with np.errstate(all="ignore"):
            results = impl(ap, list(operands))
    except InterpretError:
        raise
    except TesseraError as err:
        raise InterpretError(f"{op.name}: {err.message}", hint=err.hint, loc=loc) from None
    except (ArithmeticError, ValueError, TypeError, IndexError) as err:
        raise InterpretError(f"{op.name} failed: {err}", loc=loc,
                             hint="the operands do not fit the op at run time") from None
    if op.terminator:
        return results
    results = check_results(ap, results)
    run.counter += sum(int(r.size) for r in results)
    return results


def _fresh(results: list[np.ndarray], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copy results that are views, arguments or repeated, so callers own them."""
    out: list[np.ndarray] = []
    for r in results:
        if (not r.flags.owndata or not r.flags.writeable or any(r is x for x in inputs)
                or any(r is o for o in out)):
            r = r.copy()
        out.append(r)
    return out
