"""Running cases: each in isolation, with its time and outcome.

An ``AssertionError`` is a failure (Tessera disagrees with the reference); any other
exception is an error (the case could not run to its check); :class:`Skip` is a skip
with its reason. Nothing a case raises stops the run.
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tessera.conformance.context import Context
from tessera.conformance.registry import RULE, Case, Skip, check_backend
from tessera.errors import UNKNOWN_LOC, Loc, TesseraError

#: the outcomes, in the order reports list their counts
OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass(frozen=True)
class Result:
    """The outcome of one case on one backend."""

    case: Case
    outcome: str
    seconds: float
    message: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Report:
    """The results of one run, in the order the cases ran."""

    backend: str
    results: tuple[Result, ...]
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No case failed or raised."""
        return not (self.counts.get("failed") or self.counts.get("error"))

    def summary(self) -> str:
        """``N passed, N failed, N errors, N skipped in T s (backend B)``."""
        parts = [f"{self.counts.get(k, 0)} {k if k != 'error' else 'errors'}"
                 for k in OUTCOMES]
        return f"{', '.join(parts)} in {self.seconds:.1f} s (backend {self.backend})"


def run_case(entry: Case, ctx: Context, *, slow: bool = False) -> Result:
    """Run one case on ``ctx.backend``; never raises."""
    if ctx.backend not in entry.backends:
        reason = ("a rule of the definition: checked on backend 'interp'"
                  if entry.backends == RULE else
                  f"applies to backends {', '.join(entry.backends)} only")
        return Result(entry, "skipped", 0.0, reason)
    if entry.slow and not slow:
        return Result(entry, "skipped", 0.0, "slow case: run with --slow")
    start = time.perf_counter()
    known = dict(entry.xfail).get(ctx.backend)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            entry.fn(ctx)
    except Skip as skip:
        return Result(entry, "skipped", time.perf_counter() - start, str(skip))
    except Exception as err:  # the run goes on; the report says what broke
        seconds = time.perf_counter() - start
        if known:
            return Result(entry, "skipped", seconds, f"known failure on {ctx.backend}: "
                          f"{known} ({type(err).__name__}: {_message(err)[:200]})")
        # an assertion of the case is a failure; any other exception (an internal
        # assertion of the library included) is an error
        outcome = "failed" if isinstance(err, AssertionError) and _in_case(err) else "error"
        text = _message(_at_case_line(err)) or "assertion failed"
        if outcome == "error":
            text = f"{type(err).__name__}: {text}"
        return Result(entry, outcome, seconds, text, traceback.format_exc())
    if known:
        return Result(entry, "failed", time.perf_counter() - start,
                      f"passed on {ctx.backend}, which is listed as a known failure "
                      f"({known}): remove the entry")
    return Result(entry, "passed", time.perf_counter() - start)


def _in_case(err: BaseException) -> bool:
    """Whether ``err`` was raised by conformance code (a case's own check)."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and f"{os.sep}conformance{os.sep}" in frames[-1].filename


def run(cases: Iterable[Case], backend: str = "interp", *, slow: bool = False,
        progress: Callable[[Result], None] | None = None) -> Report:
    """Run ``cases`` on ``backend`` in order; ``progress`` sees each result."""
    ctx = Context(check_backend(backend))
    start = time.perf_counter()
    results = []
    for entry in cases:
        result = run_case(entry, ctx, slow=slow)
        results.append(result)
        if progress is not None:
            progress(result)
    counts = {k: sum(r.outcome == k for r in results) for k in OUTCOMES}
    return Report(backend, tuple(results), time.perf_counter() - start, counts)


def _at_case_line(err: BaseException) -> BaseException:
    """``err`` placed at the case's line that raised it where it names no line of its
    own (every frame of a case is inside tessera, so the stack has no user's line)."""
    if not isinstance(err, TesseraError) or err.loc != UNKNOWN_LOC:
        return err
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if f"{os.sep}conformance{os.sep}" in f.filename]
    return err.relocated(Loc(frames[-1].filename, frames[-1].lineno or 0)) if frames else err


def _message(err: BaseException) -> str:
    text = str(err).strip()
    return text if len(text) <= 2000 else text[:2000] + " ..."


__all__ = ["OUTCOMES", "Report", "Result", "run", "run_case"]
