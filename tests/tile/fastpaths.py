"""Helpers for the tests of the simulator's fast paths: the shipped block reduction,
freshly loaded, and the count of the times a fast path replaced the reference
computation (``fastpaths.REGISTRY[name].taken``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tessera.interp.tile import fastpaths

ROOT = Path(__file__).resolve().parents[2]


def block_reduction() -> Any:
    """``tessera/conformance/kernels/cooperative_reduction.py``'s kernel, from a fresh module: a
    new kernel object, so nothing compiled is shared with other tests."""
    spec = importlib.util.spec_from_file_location(
        "_fast_path_reduction",
        ROOT / "tessera" / "conformance" / "kernels" / "cooperative_reduction.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.block_reduction


def taken(name: str) -> int:
    """How often fast path ``name`` has replaced the reference computation so far."""
    return fastpaths.path(name).taken
