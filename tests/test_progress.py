"""Progress bars: silent off a terminal, drawn on one once the work outlasts the delay,
and used by the Target IR interpreter, autotuning, the mesh simulator and the
conformance command."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

import tessera as ts
from tessera import progress as progress_mod
from tessera.progress import progress


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_silent_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()
    with progress("work", 10, file=out, delay=0) as bar:
        assert not bar.shown
        for _ in range(10):
            bar.update(1)
        bar.write("a line")
    assert out.getvalue() == "a line\n"  # lines still printed, no bar


def test_drawn_on_a_terminal() -> None:
    out = FakeTerminal()
    with progress("work", 4, unit="case", file=out, delay=0) as bar:
        assert bar.shown
        for _ in range(4):
            bar.update(1)
            bar.describe("case-id")
        bar.write("area line")
    text = out.getvalue()
    assert "work" in text and "4/4" in text and "area line" in text


def test_hidden_until_the_delay_passes() -> None:
    quick = FakeTerminal()
    with progress("quick", 3, file=quick, delay=30) as bar:
        bar.update(3)
    assert "quick" not in quick.getvalue()
    slow = FakeTerminal()
    with progress("slow", 3, file=slow, delay=0.05) as bar:
        time.sleep(0.3)  # past the delay and the refresh interval
        bar.update(3)
    assert "slow" in slow.getvalue()


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_PROGRESS", "0")
    out = FakeTerminal()
    with progress("work", 2, file=out, delay=0) as bar:
        bar.update(2)
    assert out.getvalue() == ""


def _recording(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[str, int]]:
    """Make ``module``'s ``progress`` draw on a fake terminal at once and record
    (description, units counted) of each bar."""
    seen: list[tuple[str, int]] = []
    real = progress_mod.progress

    class CountingBar:
        def __init__(self, bar: progress_mod.ProgressBar) -> None:
            self.bar, self.count = bar, 0

        def update(self, n: int = 1) -> None:
            self.count += n
            self.bar.update(n)

        def __getattr__(self, name: str) -> object:
            return getattr(self.bar, name)

    class Counting:
        def __init__(self, desc: str, total: int | None = None, **kw: object) -> None:
            self.desc, self.kw, self.total = desc, kw, total

        def __enter__(self) -> CountingBar:
            self.ctx = real(self.desc, self.total, unit=str(self.kw.get("unit", "it")),
                            file=FakeTerminal(), delay=0)
            self.bar = CountingBar(self.ctx.__enter__())
            return self.bar

        def __exit__(self, *exc: object) -> None:
            seen.append((self.desc, self.bar.count))
            self.ctx.__exit__(*exc)

    monkeypatch.setattr(module, "progress", Counting)
    return seen


def test_the_target_interpreter_counts_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.interp.target import runner
    from tests.interp.target.kit import run_map

    seen = _recording(monkeypatch, runner)
    x = np.arange(128, dtype=np.float32)
    assert np.array_equal(run_map(lambda k, xs: xs[0], [x], ["f32"], "f32"), x)
    assert len(seen) == 1 and seen[0][0] == "Target IR @map" and seen[0][1] > 5


@ts.kernel.autotune(space=dict(BLOCK_M=[16, 32], num_warps=[4, 8]))
def double(x: ts.Tensor["M", "N", ts.f32], y: ts.Tensor["M", "N", ts.f32]):
    ctx = ts.tile.context()
    y[tile_m:tile_m + ctx.BLOCK_M] = x[tile_m:tile_m + BM] * 2.0


def test_autotuning_counts_its_configurations(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.frontend.kernel.tuning import search

    seen = _recording(monkeypatch, search)
    x = np.ones((64, 8), np.float32)
    y = np.zeros_like(x)
    double(x, y)
    assert np.array_equal(y, 2 * x)
    assert seen == [("autotune double", 4)]


def test_the_mesh_simulator_counts_its_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera import dist
    from tessera.mesh_sim.spmd import execute

    seen = _recording(monkeypatch, execute)
    mesh = dist.mesh(axes=("tp",), shape=(2,))
    x = dist.from_numpy(np.arange(8, dtype=np.float32).reshape(4, 2), mesh=mesh,
                        layout=dist.ShardSpec(("row",), ("tp",)))
    out = ts.jit(lambda v: ts.tanh(v) * 2.0)(x)
    assert np.allclose(np.asarray(out), np.tanh(np.arange(8.0).reshape(4, 2)) * 2)
    assert len(seen) == 1 and seen[0][0].startswith("mesh simulation @") and seen[0][1] >= 2


def test_conformance_area_lines_print_around_the_bar() -> None:
    from types import SimpleNamespace

    from tessera.conformance.command import Progress

    out, term = io.StringIO(), FakeTerminal()
    with progress("conformance", 3, file=term, delay=0) as bar:
        p = Progress(out, bar)
        for area, outcome in [("numerics", "passed"), ("numerics", "failed"), ("ir", "passed")]:
            p(SimpleNamespace(case=SimpleNamespace(area=area, id=f"{area}-case"),
                              outcome=outcome))
        p.flush()
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["numerics", "1", "passed", "1", "failed", "0", "skipped"]
    assert lines[1].split()[:2] == ["ir", "1"]
    assert "conformance" in term.getvalue()  # the bar, on the terminal stream
