"""The conformance suite passes on the backends CI runs (the slow cases excluded), and
its registry holds what the package promises: enough cases, each with a specification
reference, every area present."""

from __future__ import annotations

import pytest

from tessera import conformance
from tessera.conformance import BACKENDS, registry
from tessera.conformance.cases import AREAS


@pytest.fixture(scope="module")
def cases() -> list[conformance.Case]:
    return conformance.select()


@pytest.mark.parametrize("backend", ["interp", "tile", "target", "cuda"])
def test_suite_passes(backend: str, cases: list[conformance.Case]) -> None:
    report = conformance.run(cases, backend)
    bad = [f"{r.case.id}: {r.outcome}: {r.message}" for r in report.results
           if r.outcome in ("failed", "error")]
    assert not bad, "\n".join(bad)
    assert report.ok and len(report.results) == len(cases)
    if backend != "cuda":  # without a GPU every cuda case is a skip
        assert report.counts["passed"] >= 25


def test_interp_runs_nearly_every_case(cases: list[conformance.Case]) -> None:
    report = conformance.run(cases, "interp")
    skipped = [r for r in report.results if r.outcome == "skipped"]
    assert all(r.message == "slow case: run with --slow" for r in skipped), skipped
    assert report.counts["passed"] >= 150


def test_registry_shape(cases: list[conformance.Case]) -> None:
    assert len(cases) >= 150
    assert len({c.id for c in cases}) == len(cases)
    assert {c.area for c in cases} >= {"numerics", "policy", "graph", "seeds", "autodiff",
                                       "kernels", "tile", "sanitizer", "mesh"}
    for c in cases:
        assert c.spec and c.doc, c.id
        assert set(c.backends) <= set(BACKENDS)
    assert AREAS[0] == "numerics"


def test_every_format_has_each_numerics_family(cases: list[conformance.Case]) -> None:
    ids = {c.id for c in cases}
    for fmt in ("bf16", "f16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2",
                "fp4_e2m1"):
        for family in ("ties", "near-ties", "overflow", "nan", "subnormal"):
            assert f"numerics.{family}.{fmt}" in ids


def test_every_planted_bug_kind_is_covered(cases: list[conformance.Case]) -> None:
    kinds = {c.id.split(".")[1] for c in cases if c.area == "sanitizer"}
    assert kinds >= {"race", "out-of-bounds", "uninitialised-read", "async-not-waited",
                     "divergent-barrier", "global-write-conflict", "misaligned-access"}


def test_duplicate_or_bad_ids_are_refused(cases: list[conformance.Case]) -> None:
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("numerics.ties.bf16", lambda ctx: None, spec="x")
    with pytest.raises(ValueError, match="dotted"):
        registry.register("NoDots", lambda ctx: None, spec="x")
    with pytest.raises(ValueError, match="unknown backends"):
        registry.register("numerics.new-case", lambda ctx: None, spec="x", backends=("gpu",))
