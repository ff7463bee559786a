"""Helpers the case modules share: running a seed snippet as written, and float64
views of results."""

from __future__ import annotations

from typing import Any

import numpy as np


def run_seed(source: str, **inputs: Any) -> dict[str, Any]:
    """Execute a seed snippet as written, in a fresh module namespace holding ``inputs``;
    compiled on its own (``dont_inherit``), so no flag of this module changes it."""
    namespace: dict[str, Any] = {"__name__": "seed", **inputs}
    exec(compile(source, "<seed>", "exec", dont_inherit=True), namespace)
    return namespace


def star_namespace() -> dict[str, Any]:
    """A namespace after ``from tessera import *``."""
    return run_seed("from tessera import *")


def f64(x: Any) -> np.ndarray:
    """A tensor's (or array's) values as float64."""
    return np.asarray(x).astype(np.float64)


def raises(kind: type[BaseException], fn: Any, *args: Any, **kwargs: Any) -> BaseException:
    """The exception of type ``kind`` that ``fn(*args, **kwargs)`` raises; an
    AssertionError when it raises nothing."""
    try:
        fn(*args, **kwargs)
    except kind as err:
        return err
    raise AssertionError(f"{getattr(fn, '__name__', fn)} raised no {kind.__name__}")


__all__ = ["f64", "raises", "run_seed", "star_namespace"]
