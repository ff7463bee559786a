"""Reports and bits that do not depend on the schedule.

Every planted bug (both suites) is reported identically — kind, line, tile, element,
lane and text — by the ``auto``, ``vectorized`` and ``sequential`` schedules, and a
failed launch leaves every argument as it was. Every tricky correct kernel runs clean
with the same bits as a NumPy reference in every schedule. Hypothesis then draws
scatters, gathers and overlapping arguments and checks each schedule's report against
a small model of the group order written here in plain Python.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile import SCHEDULES
from tests.tile import bugs, bugs_order, correct_order

SUITES = [(bugs, k) for k in range(1, len(bugs.BUGS) + 1)] + \
    [(bugs_order, k) for k in range(1, len(bugs_order.BUGS) + 1)]


def _marks(module: Any) -> dict[int, tuple[int, str]]:
    lines = Path(module.__file__).read_text().splitlines()
    return {int(m.group(1)): (n + 1, m.group(2).strip()) for n, line in enumerate(lines)
            if (m := re.search(r"# BUG (\d+): (.*)$", line))}


MARKS = {bugs: _marks(bugs), bugs_order: _marks(bugs_order)}
REFUSED = "cannot keep this launch's order"


def _report(kernel: Any, args: tuple[Any, ...], **launch: Any) -> tuple[Any, ...]:
    """What a launch reports, as a comparable tuple (``None`` when it runs clean)."""
    try:
        kernel(*args, **launch)
    except ts.tile.SanitizerError as err:
        return (err.kind, err.loc.line, err.tile, err.index, err.lane, str(err))
    return None  # type: ignore[return-value]


@pytest.mark.parametrize("suite, k", SUITES,
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}-{k}" for m, k in SUITES])
def test_every_schedule_reports_the_planted_bug_alike(suite: Any, k: int) -> None:
    _name, bad, _good, launch, make = suite.BUGS[k - 1]
    line, kind = MARKS[suite][k]
    seen = {}
    for schedule in SCHEDULES:
        args = make()
        before = [np.array(a, copy=True) for a in args]
        seen[schedule] = _report(bad, args, schedule=schedule, **launch)
        for a, b in zip(args, before):  # a failed launch writes nothing
            assert np.array_equal(a, b, equal_nan=True), schedule
    first = seen["auto"]
    assert first is not None and first[:2] == (kind, line)
    assert all(r == first for r in seen.values()), seen


@pytest.mark.parametrize("suite, k", SUITES,
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}-{k}" for m, k in SUITES])
def test_every_schedule_runs_the_fix_to_the_same_bits(suite: Any, k: int) -> None:
    _name, _bad, good, launch, make = suite.BUGS[k - 1]
    outs = []
    for schedule in SCHEDULES:
        args = make()
        try:
            good(*args, schedule=schedule, **launch)
        except ts.UnsupportedError as err:
            assert schedule == "vectorized" and REFUSED in str(err)
            continue
        outs.append([np.array(a) for a in args])
    for out in outs[1:]:
        for a, b in zip(out, outs[0]):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("case", correct_order.CASES, ids=[c[0] for c in correct_order.CASES])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_tricky_correct_kernel_runs_clean(case: Any, schedule: str) -> None:
    _name, kernel, launch, make, reference = case
    args = make()
    try:
        kernel(*args, schedule=schedule, **launch)
    except ts.UnsupportedError as err:  # reductions from every group: group order only
        assert schedule == "vectorized" and REFUSED in str(err)
        return
    expected = reference(*make())
    assert np.array_equal(args[-1].view(np.uint32), expected.view(np.uint32))


# -- drawn launches, checked against a model of the group order ---------------------------

GEOMETRY = st.sampled_from([(8, 1), (4, 2), (2, 4), (1, 8), (6, 1), (3, 2), (2, 3)])


def _groups(n_tiles: int, group_size: int) -> list[range]:
    return [range(g, g + group_size) for g in range(0, n_tiles, group_size)]


def scatter_model(idx: list[int], group_size: int) -> tuple[str, int, int] | None:
    """``out[idx[i]] = ...`` in group order: the view checks bounds for the whole
    group, then the store finds repeated indices inside the group (the first tile
    whose element an earlier tile of the group also names), then elements stored by
    earlier groups."""
    n = len(idx)
    owner: dict[int, int] = {}
    for group in _groups(n, group_size):
        for t in group:
            if not 0 <= idx[t] < n:
                return ("out of bounds", t, idx[t])
        firsts: dict[int, int] = {}
        for t in group:
            if idx[t] in firsts:
                return ("global write conflict", t, idx[t])
            firsts[idx[t]] = t
        for t in group:
            if idx[t] in owner:
                return ("global write conflict", t, idx[t])
        owner.update(firsts)
    return None


def alias_model(n: int, shift: int, x0: int, out0: int, group_size: int
                ) -> tuple[str, int, int] | None:
    """``out[i] = x[(i + shift) % n] + 1`` where ``x`` and ``out`` are the views
    ``a[x0:x0 + n]`` and ``a[out0:out0 + n]`` of one array: a group's tiles all read,
    then all write; a read of another tile's write, or a write of what another tile
    read, is a race (no barrier orders tiles of two groups, and a group's read and
    write share a phase). Returns (kind, tile, element of the accessed view)."""
    writer: dict[int, int] = {}
    readers: dict[int, set[int]] = {}
    for group in _groups(n, group_size):
        for t in group:
            e = x0 + (t + shift) % n
            if writer.get(e, t) != t:
                return ("race", t, e - x0)
            readers.setdefault(e, set()).add(t)
        for t in group:
            if readers.get(out0 + t, {t}) - {t}:
                return ("race", t, t)
            writer[out0 + t] = t
    return None


@ts.kernel
def shift_by(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32], s: int):
    i = ts.tile.linear_id()
    out[i] = x[(i + s) % N] + 1.0  # the line every drawn race names


SHIFT_LINE = next(n + 1 for n, line in enumerate(Path(__file__).read_text().splitlines())
                  if line.endswith("# the line every drawn race names"))

def _launches(kernel: Any, make: Any, grid: int, group_size: int) -> list[Any]:
    out = []
    for schedule in SCHEDULES:
        args = make()
        out.append((_report(kernel, args, grid=grid, group_size=group_size,
                            schedule=schedule), args))
    return out


@settings(max_examples=40, deadline=None)
@given(GEOMETRY, st.data())
def test_drawn_scatters_report_the_model_in_every_schedule(geometry: Any, data: Any) -> None:
    grid, group_size = geometry
    n = grid * group_size
    idx = data.draw(st.lists(st.integers(-2, n + 2), min_size=n, max_size=n))
    runs = _launches(bugs_order.scatter_repeat,
                     lambda: (np.array(idx, np.int64), np.zeros(n, np.float32)), grid,
                     group_size)
    reports = [r for r, _ in runs]
    assert all(r == reports[0] for r in reports)
    expected = scatter_model(idx, group_size)
    if expected is None:
        assert reports[0] is None
        want = np.zeros(n, np.float32)
        want[idx] = np.arange(n, dtype=np.float32)
        assert all(np.array_equal(args[1], want) for _, args in runs)
    else:
        kind, tile, element = expected
        assert reports[0][:4] == (kind, _line(bugs_order.scatter_repeat), tile, (element,))
        assert all(not args[1].any() for _, args in runs)  # nothing written


@settings(max_examples=40, deadline=None)
@given(GEOMETRY, st.data())
def test_drawn_gathers_name_the_bad_index(geometry: Any, data: Any) -> None:
    grid, group_size = geometry
    n = grid * group_size
    idx = data.draw(st.lists(st.integers(-3, n + 3), min_size=n, max_size=n))
    x = np.arange(n, dtype=np.float32) + 10
    runs = _launches(bugs_order.gather, lambda: (x.copy(), np.array(idx, np.int64),
                                                 np.zeros(n, np.float32)), grid, group_size)
    reports = [r for r, _ in runs]
    assert all(r == reports[0] for r in reports)
    bad = [t for t in range(n) if not 0 <= idx[t] < n]
    if not bad:
        assert reports[0] is None
        assert all(np.array_equal(args[2], x[idx]) for _, args in runs)
    else:
        t = bad[0]  # the first group with a bad index, its first such tile
        assert reports[0][:5] == ("out of bounds", _line(bugs_order.gather), t,
                                  (idx[t],), 0)


@settings(max_examples=60, deadline=None)
@given(GEOMETRY, st.integers(0, 7), st.integers(0, 3), st.integers(0, 3))
def test_drawn_overlapping_arguments_race_as_the_model_says(
        geometry: Any, shift: int, x0: int, out0: int) -> None:
    grid, group_size = geometry
    n = grid * group_size
    base = np.arange(n + 3, dtype=np.float32)

    def make() -> tuple[Any, ...]:
        a = base.copy()
        return a[x0:x0 + n], a[out0:out0 + n], shift

    runs = _launches(shift_by, make, grid, group_size)
    reports = [r for r, _ in runs]
    assert all(r == reports[0] for r in reports)
    expected = alias_model(n, shift % n, x0, out0, group_size)
    if expected is None:
        assert reports[0] is None
        want = base.copy()
        want[out0:out0 + n] = np.roll(base[x0:x0 + n], -shift) + 1
        assert all(np.array_equal(args[1].base, want) for _, args in runs)
    else:
        kind, tile, element = expected
        assert reports[0][:4] == (kind, SHIFT_LINE, tile, (element,))
        assert all(np.array_equal(args[1].base, base) for _, args in runs)


def _line(kernel: Any) -> int:
    """The line of the kernel's marked statement (the one the drawn cases exercise)."""
    suite = bugs_order
    for k, entry in enumerate(suite.BUGS, 1):
        if entry[1] is kernel:
            return MARKS[suite][k][0]
    raise LookupError(kernel)
