"""Each pass against text goldens, and the pass manager's verify/print/timing behaviour."""

from __future__ import annotations

import io
import os
from pathlib import Path

import networkx as nx
import pytest

from tessera.errors import IRVerifyError, StageError
from tessera.ir import PassManager, dependence_graph, get_pass, parse_module, print_module
from tessera.ir.core import Module
from tessera.ir.dialects import graph as graph_ir

GOLDEN = Path(__file__).parent.parent / "golden" / "passes"
CASES = sorted(p.name.removesuffix(".before.tir") for p in GOLDEN.glob("*.before.tir"))


@pytest.mark.parametrize("case", CASES)
def test_pass_golden(case: str) -> None:
    before = (GOLDEN / f"{case}.before.tir").read_text()
    header = before.splitlines()[0]
    assert header.startswith("// passes: ")
    passes = header.removeprefix("// passes: ").split(",")
    module = PassManager.from_names(passes).run(parse_module(before))
    got = print_module(module)
    after = GOLDEN / f"{case}.after.tir"
    if os.environ.get("TESSERA_UPDATE_GOLDENS"):
        after.write_text(got)
    assert got == after.read_text()


def test_print_after_and_timing() -> None:
    module = parse_module((GOLDEN / "cse_duplicates.before.tir").read_text())
    out = io.StringIO()
    pm = PassManager.from_names(["cse", "dce"], print_after={"cse"}, stream=out)
    pm.run(module)
    text = out.getvalue()
    assert text.startswith("// ----- IR after cse ----- //")
    assert "IR after dce" not in text
    assert set(pm.timings) == {"cse", "dce"}
    assert all(t >= 0 for t in pm.timings.values())
    assert "cse" in pm.timing_report()


class BreaksTypes:
    """A deliberately wrong pass: changes a result type without changing its users."""

    name = "break-types"

    def apply(self, module: Module) -> Module:
        fn = next(iter(module.functions.values()))
        instr = fn.body.instrs[0]
        instr.op = graph_ir.Transpose((1, 0))
        return module


def test_verify_after_each_pass_catches_a_broken_pass() -> None:
    module = parse_module((GOLDEN / "canonicalize_identities.before.tir").read_text())
    with pytest.raises(IRVerifyError, match=r"graph\.transpose"):
        PassManager([BreaksTypes()]).run(module)


def test_unknown_pass_is_a_stage_error() -> None:
    with pytest.raises(StageError, match="known passes"):
        get_pass("no-such-pass")


def test_dependence_graph_is_a_dag_of_def_use_edges() -> None:
    module = parse_module((GOLDEN / "cse_duplicates.before.tir").read_text())
    fn = module.functions["f"]
    dag = dependence_graph(fn.body)
    assert nx.is_directed_acyclic_graph(dag)
    order = list(nx.topological_sort(dag))
    instrs = fn.body.instrs
    # exp(%x) must come before the mul that uses it, which comes before the add
    assert order.index(instrs[0]) < order.index(instrs[4]) < order.index(instrs[6])
    assert dag.has_edge(fn.args[0], instrs[0])
