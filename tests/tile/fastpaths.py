"""Helpers for the tests of the simulator's loop fast paths (``tile_flow.strided_sum``,
``tile_flow.tree_sum``): the shipped block reduction, freshly loaded, and a spy that
records what each fast-path runner returned."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

import tessera.interp.tile.flow as flow

ROOT = Path(__file__).resolve().parents[2]


def block_reduction() -> Any:
    """``examples/kernels/cooperative_reduction.py``'s kernel, from a fresh module: a
    new kernel object, so nothing compiled is shared with other tests."""
    spec = importlib.util.spec_from_file_location(
        "_fast_path_reduction", ROOT / "examples" / "kernels" / "cooperative_reduction.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.block_reduction


def record_runs(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Wrap the fast-path factory ``tile_flow.<name>``; the returned list gets the
    result of every run of a runner it made (None: the general loop ran instead)."""
    runs: list[Any] = []
    original = getattr(flow, name)

    def spy(c, instr):  # type: ignore[no-untyped-def]
        runner = original(c, instr)
        if runner is None:
            return None
        return lambda *a: runs.append(runner(*a)) or runs[-1]
    monkeypatch.setattr(flow, name, spy)
    return runs
