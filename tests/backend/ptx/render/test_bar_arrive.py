"""``bar.arrive``: its verify rules, its PTX (ptxas accepts it), the PTX reader and the
Target IR text form give the same op back, and the PTX runs as a control-flow graph."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.render import render
from tessera.errors import IRVerifyError
from tessera.interp.target.barriers import BarrierDeadlock
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.core import Instr, Module, walk
from tessera.ir.dialects.target.ops import Bar, BarArrive
from tests.backend.ptx.render.test_render import ptxas
from tests.interp.target.test_barriers import TURNS, pingpong


@pytest.mark.parametrize("ident, count", [(16, 256), (-1, 256), (1, 0), (1, 100)])
def test_bad_ids_and_counts_are_refused(ident: int, count: int) -> None:
    with pytest.raises(IRVerifyError, match=r"the id is 0\.\.15 and the thread count a "
                                            r"positive multiple of 32"):
        BarArrive(ident, count).infer([])


def _barriers(instrs: Iterable[Instr]) -> list[tuple[str, int, int]]:
    return [(type(i.op).__name__, i.op.id, i.op.count) for i in instrs
            if isinstance(i.op, (Bar, BarArrive))]


def test_render_assemble_and_read_back(tmp_path: Path) -> None:
    fn = pingpong().build()
    text = render(fn)
    assert text.count("bar.arrive 1, 256;") == 2 and "bar.arrive 2, 256;" in text
    ptxas(text, "sm_80", tmp_path)
    back = ts.ptx.load(text).kernel("pingpong").ir
    want = _barriers(walk(fn.body))
    read = _barriers(i for block in back.blocks for pi in block.body for i in pi.instrs)
    assert sorted(read) == sorted(want)
    assert ("BarArrive", 2, 256) in want


def test_target_ir_text_round_trips() -> None:
    module = Module("m", {"pingpong": pingpong().build()})
    verify_module(module)
    text = print_module(module)
    assert "ptx.bar_arrive" in text
    again = parse_module(text)
    verify_module(again)
    assert print_module(again) == text
    assert _barriers(walk(again.functions["pingpong"].body)) == \
        _barriers(walk(module.functions["pingpong"].body))


def test_read_back_ptx_takes_the_same_turns() -> None:
    """The PTX runs as a control-flow graph: a bar.sync whose barrier is incomplete
    parks its threads until the other warpgroup's bar.arrive completes it."""
    out = np.full(2 * TURNS, 999, np.uint32)
    ts.ptx.load(render(pingpong().build())).kernel("pingpong").run(grid=1, block=256,
                                                                   args=[out])
    assert out.tolist() == [w * 100 + i for i in range(TURNS) for w in (0, 1)]


def test_read_back_ptx_without_the_first_arrival_deadlocks() -> None:
    text = render(pingpong(pre_arrive=False).build())
    with pytest.raises(BarrierDeadlock, match=r"bar\.sync 1, 256 never completes: 128 of "
                                              r"256 threads arrived") as err:
        ts.ptx.load(text).kernel("pingpong").run(grid=1, block=256,
                                                 args=[np.zeros(2 * TURNS, np.uint32)])
    assert err.value.op == "bar.sync 1, 256"  # the PTX instruction, at its line
    assert text.splitlines()[err.value.loc.line - 1].strip() == "bar.sync 1, 256;"
