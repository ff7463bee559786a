"""Shared code of the mesh simulator tests: an error checker and independent references.

The references here are written from NumPy primitives (``np.unravel_index``,
``np.array_split``, ``np.ravel_multi_index``), not from tessera's own functions.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import tessera as ts


def raises_here(exc: type[BaseException], fn: Callable[[], Any], *words: str) -> str:
    """Call ``fn`` (a lambda written on the caller's line); check that it raises ``exc``,
    a TesseraError whose message names the caller's file:line, a hint, and ``words``."""
    caller = inspect.currentframe().f_back  # type: ignore[union-attr]
    where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
    with pytest.raises(exc) as info:
        fn()
    text = str(info.value)
    assert isinstance(info.value, ts.TesseraError), text
    assert os.path.basename(info.value.loc.file) + f":{info.value.loc.line}" == where, text
    assert "hint:" in text, text
    for w in words:
        assert w in text, (w, text)
    return text


def ref_coords(index: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major coordinates of a device index."""
    return tuple(int(c) for c in np.unravel_index(index, tuple(shape)))


def ref_region(global_shape: Sequence[int], mesh_shape: Sequence[int],
               mesh_axes: Sequence[str], dim_axes: Sequence[Sequence[str]],
               index: int) -> tuple[slice, ...]:
    """The region device ``index`` holds, from ``np.array_split`` of index ranges."""
    c = ref_coords(index, mesh_shape)
    out = []
    for n, axes in zip(global_shape, dim_axes):
        if not axes:
            out.append(slice(0, n))
            continue
        pos = [list(mesh_axes).index(a) for a in axes]
        sizes = [mesh_shape[p] for p in pos]
        rank = int(np.ravel_multi_index([c[p] for p in pos], sizes))
        sizes = [len(p) for p in np.array_split(np.arange(n), int(np.prod(sizes)))]
        out.append(slice(sum(sizes[:rank]), sum(sizes[:rank + 1])))
    return tuple(out)
