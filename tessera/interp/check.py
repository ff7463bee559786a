"""Checks at the interpreter's boundaries: arguments against types, results of rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import InterpretError
from tessera.interp.apply import Apply
from tessera.ir.core import Type
from tessera.ir.types import TensorType
from tessera.numerics.formats.convert import convert
from tessera.numerics.policy.modifiers import storage_of


def _dtype_name(dt: np.dtype) -> str:
    # ml_dtypes types print as e.g. "bfloat16"; say where they come from.
    return f"ml_dtypes.{dt.name}" if dt.type.__module__.startswith("ml_dtypes") \
        else f"np.{dt.name}"


def check_arrays(types: Sequence[Type], arrays: Sequence[Any], what: str,
                 names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Check each array's dtype and shape against its tensor type; convert nothing.

    Symbolic dims (``{N}``) are bound by the first array that has them and must agree
    across all arrays. Returns the arrays (NumPy scalars as 0-d arrays).
    """
    if len(arrays) != len(types):
        raise InterpretError(f"{what} takes {len(types)} arguments, got {len(arrays)}",
                             hint="pass one NumPy array per argument")
    bound: dict[str, int] = {}
    out: list[np.ndarray] = []
    for i, (t, x) in enumerate(zip(types, arrays)):
        label = f"argument {i}" + (f" (%{names[i]})" if names and names[i] else "")
        if not isinstance(t, TensorType):
            raise InterpretError(f"{what}: {label} has type {t}, which is not a tensor type")
        if not isinstance(x, (np.ndarray, np.generic)):
            raise InterpretError(
                f"{what}: {label} is a {type(x).__name__}, not a NumPy array",
                hint=f"pass np.asarray(x, dtype={_dtype_name(storage_of(t.element).np_dtype)})")
        arr = np.asarray(x)
        want = storage_of(t.element).np_dtype
        if arr.dtype != want:
            raise InterpretError(
                f"{what}: {label} has dtype {arr.dtype}, but {t} is stored as {want}",
                hint=f"convert it explicitly, e.g. x.astype({_dtype_name(want)}) or "
                     f"tessera.numerics.convert(x, {storage_of(t.element).name!r})")
        _check_shape(t, arr, bound, what, label)
        if storage_of(t.element).name == "tf32":
            _check_tf32(arr, what, label)
        out.append(arr)
    return out


def _check_shape(t: TensorType, arr: np.ndarray, bound: dict[str, int], what: str,
                 label: str) -> None:
    ok = arr.ndim == t.rank
    for want, got in zip(t.shape, arr.shape):
        if isinstance(want, str):
            ok = ok and bound.setdefault(want, got) == got
        else:
            ok = ok and want == got
    if not ok:
        symbols = ", ".join(f"{k}={v}" for k, v in bound.items())
        raise InterpretError(f"{what}: {label} has shape {arr.shape}, but its type is {t}",
                             hint="pass an array of the declared shape"
                                  + (f" (bound so far: {symbols})" if symbols else ""))


def _check_tf32(arr: np.ndarray, what: str, label: str) -> None:
    # tf32 lives in float32 storage; a float32 with more than 10 mantissa bits is not a
    # tf32 value, and rounding it here would be a silent conversion.
    if not np.array_equal(convert(arr, "tf32").view(np.uint32), arr.view(np.uint32)):
        raise InterpretError(f"{what}: {label} holds float32 values that are not tf32 values",
                             hint="round them first: tessera.numerics.convert(x, 'tf32')")


def check_results(ap: Apply, results: Sequence[Any]) -> list[np.ndarray]:
    """Check a rule's results against the result types (an interpreter self-check that
    also catches shapes a verifier let through)."""
    if len(results) != len(ap.result_types):
        raise ap.fail(f"produced {len(results)} results, its type says "
                      f"{len(ap.result_types)}")
    out = []
    for k, (t, r) in enumerate(zip(ap.result_types, results)):
        arr = np.asarray(r)
        want = storage_of(t.element).np_dtype
        if arr.dtype != want:
            raise ap.fail(f"result {k} came out as {arr.dtype}, not {want} ({t})",
                          hint="this is an interpreter bug; please report it")
        if arr.ndim != t.rank or any(isinstance(d, int) and d != n
                                     for d, n in zip(t.shape, arr.shape)):
            raise ap.fail(f"result {k} has shape {arr.shape}, but its type is {t}",
                          hint="the IR's types disagree with the values; verify the function")
        out.append(arr)
    return out
