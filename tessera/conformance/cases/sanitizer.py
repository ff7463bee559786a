"""The sanitizers: each planted bug (``planted.py``) is reported with its kind, at the
marked line, under both simulator schedules; each fix runs clean and computes the
expected values; a report leaves the user's arrays unchanged."""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

import numpy as np

import tessera as ts
from tessera.conformance.planted import PLANTED, Planted
from tessera.conformance.registry import KERNEL, register

SPEC = "decisions.md Call conventions: sanitizer reports name their kind; kernels.md §8"
_MARK = re.compile(r"# BUG: (.*)$")


def marked(kernel: Any) -> tuple[int, str]:
    """The line of the ``# BUG:`` mark in ``kernel``'s source and the kind it names."""
    lines, first = inspect.getsourcelines(kernel.fn)
    for k, line in enumerate(lines):
        if m := _MARK.search(line):
            return first + k, m.group(1).strip()
    raise AssertionError(f"kernel {kernel.name} has no '# BUG:' mark")


def reported(bug: Planted, schedule: str) -> Any:
    def run(ctx: Any) -> None:
        line, kind = marked(bug.buggy)
        args = bug.args()
        before = copy.deepcopy(args)
        try:
            bug.buggy(*args, schedule=schedule, **bug.launch)
        except ts.tile.SanitizerError as err:
            assert err.kind == kind, f"reported {err.kind!r}, planted {kind!r}: {err}"
            assert err.loc.line == line and err.loc.file.endswith("planted.py"), \
                f"reported at {err.loc}, planted at line {line}"
            text = str(err)
            assert f"planted.py:{line}: {kind}: kernel '{bug.buggy.name}'" in text, text
            assert err.tile is not None and err.hint
        else:
            raise AssertionError(f"{bug.buggy.name}: the {kind} went unreported")
        for a, b in zip(args, before):  # a launch that raises changes no user array
            assert np.array_equal(a, b, equal_nan=True)

    run.__doc__ = (f"Planted {bug.name.replace('.', ' (')}): reported with its kind at the "
                   f"marked line of {bug.buggy.name}, {schedule} schedule.")
    return run


def fixed(bug: Planted) -> Any:
    def run(ctx: Any) -> None:
        args = bug.args()
        inputs = copy.deepcopy(args)
        ctx.launch(bug.fixed, *args, **bug.launch)
        want = bug.want(inputs)
        assert np.array_equal(args[bug.out], want), (args[bug.out], want)

    run.__doc__ = f"The fix of the planted {bug.name} runs clean and computes its values."
    return run


for _bug in PLANTED:
    for _schedule in ("vectorized", "sequential"):
        register(f"sanitizer.{_bug.name}.reported.{_schedule}", reported(_bug, _schedule),
                 spec=SPEC)
    register(f"sanitizer.{_bug.name}.fixed", fixed(_bug), spec=SPEC, backends=KERNEL)


def _fast_mode(ctx: Any) -> None:
    """``mode="fast"`` turns the sanitizers off (the race goes unreported) but still
    checks bounds."""
    from tessera.conformance import planted

    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    planted.reverse_no_barrier(x, out, grid=2, group_size=4, mode="fast")
    try:
        planted.diff_oob(x, out, mode="fast")
    except ts.tile.SanitizerError as err:
        assert err.kind == "out of bounds"
    else:
        raise AssertionError("an out-of-bounds read went unreported in fast mode")


register("sanitizer.fast-mode.bounds-only", _fast_mode,
         spec="decisions.md Kernel modes: mode='fast' is float32 without sanitizers")


def _never_launched(ctx: Any) -> None:
    """The planted stencil that reads ``x[-1]`` at tile 0: the interpreters report the
    read at its line; a backend that compiles refuses the kernel there before any PTX
    exists (it would read another allocation on a GPU). Either way, no array changes."""
    from tessera.conformance import planted

    line, kind = marked(planted.diff_oob)
    x, out = np.arange(8, dtype=np.float32), np.full(8, 5.0, np.float32)
    try:
        ctx.launch(planted.diff_oob, x, out)
    except ts.TesseraError as err:
        assert err.kind == kind, f"reported {err.kind!r}: {err}"
        assert err.loc.line == line and err.loc.file.endswith("planted.py"), err.loc
    else:
        raise AssertionError(f"the {kind} went unreported on {ctx.backend}")
    assert np.array_equal(out, np.full(8, 5.0, np.float32)), out


register("sanitizer.out-of-bounds.never-launched", _never_launched, backends=KERNEL,
         spec="ptx-backend.md Masked accesses: an unmasked access past a tensor is refused "
              "before PTX exists")
