"""Region privileges: ``Region[read]``, ``Region[write]``, ``Region[reduce]``.

Parameters of a function launched with ``ts.index_launch`` may declare what the
function does to the data they name::

    def step(W: ts.Region[ts.read], G: ts.Region[ts.reduce], Y: ts.Region[ts.write]):
        Y[...] = ts.gemm(X, W)     # Y is written; W only read
        G += ts.sum(W)             # each index adds its contribution to G

* ``read``: the body may only read the region (an unannotated array parameter is read
  too); assigning to it (``W[...] = v``, ``W += v``) is a :class:`RegionError` at the
  assigning line.
* ``write``: the body reads and overwrites the region; after the launch the region (a
  DistTensor or NumPy array argument) holds what the body left in it. Two indices may
  not write overlapping parts (a write region replicated over the launch axis is an
  error: use ``reduce``).
* ``reduce`` (``reduce("max")``, ``reduce("min")``; default sum): the body sees its own
  contribution, zeros at entry, and adds to it; after the launch the region is its old
  value combined with the contributions of all indices *in index order* (in the
  accumulation format, rounded once).

The same privileges drive the dependence analysis of a sequence of launches
(:mod:`tessera.mesh_sim.spmd.depend`).
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import Loc, TesseraError, user_api, user_location
from tessera.frontend.graph import ops
from tessera.frontend.graph.trace import Tracer
from tessera.ir.dialects import graph as graph_ir

READ, WRITE, REDUCE = "read", "write", "reduce"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tessera/


class RegionError(TesseraError):
    """A launch body that breaks a region privilege (a write to a read region)."""

    kind = "region privilege error"


class RegionConflictError(TesseraError):
    """Accesses to one region that no order resolves (overlapping writes of the
    indices of one launch, or of launches declared concurrent)."""

    kind = "region conflict"


@dataclass(frozen=True)
class Privilege:
    """What a launch body may do to a region: ``read``, ``write`` or ``reduce(op)``."""

    mode: str
    op: str = "sum"

    @user_api
    def __call__(self, op: str = "sum") -> Privilege:
        """``reduce("max")``: a reduce privilege with another combining op."""
        if self.mode != REDUCE or not isinstance(op, str) or op not in ("sum", "max", "min"):
            raise RegionError(f"{self.mode}({op!r}) is not a privilege",
                              hint='write reduce, reduce("max") or reduce("min")')
        return Privilege(REDUCE, op)

    def __repr__(self) -> str:
        return self.mode if self.op == "sum" else f"reduce({self.op!r})"

    @property
    def writes(self) -> bool:
        return self.mode != READ


read = Privilege(READ)
write = Privilege(WRITE)
reduce = Privilege(REDUCE)


@dataclass(frozen=True)
class RegionSpec:
    """The annotation ``Region[privilege]``."""

    privilege: Privilege


class Region:
    """``Region[read]``, ``Region[write]``, ``Region[reduce]``: a parameter annotation."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Region:
        raise RegionError("Region is an annotation, not a value to build",
                          hint="annotate a parameter: def f(Y: Region[write]): ...")

    def __class_getitem__(cls, privilege: Any) -> RegionSpec:
        if not isinstance(privilege, Privilege):
            raise RegionError(f"Region[{privilege!r}] names no privilege",
                              hint="write Region[read], Region[write] or Region[reduce]")
        return RegionSpec(privilege)


def privileges_of(fn: Any) -> dict[str, Privilege]:
    """The privilege of every parameter of ``fn`` annotated ``Region[...]``.

    Annotations that are strings (a module with ``from __future__ import annotations``)
    are evaluated one by one against the names ``fn`` sees: its module's globals, its
    closure and, for a function defined inside another, the locals of the frame that
    launches it (where such a function is usually defined). An annotation that cannot
    be evaluated is no region, unless it names ``Region``: then it is a RegionError at
    the ``def`` line.
    """
    code = getattr(fn, "__code__", None)
    loc = Loc(code.co_filename, code.co_firstlineno) if code is not None else None
    out: dict[str, Privilege] = {}
    namespace: dict[str, Any] | None = None
    for name, hint in inspect.get_annotations(fn).items():
        if isinstance(hint, str):
            namespace = namespace if namespace is not None else _names_seen_by(fn)
            try:
                hint = eval(hint, namespace)  # the user's own annotation, as Python would
            except RegionError as err:
                raise RegionError(err.message, hint=err.hint, loc=loc) from None
            except Exception as err:  # any failure: the annotation is not ours to read
                if "Region" in hint:
                    raise RegionError(f"the annotation {hint!r} of parameter {name!r} "
                                      f"cannot be evaluated: {err}", loc=loc,
                                      hint="write Region[read], Region[write] or "
                                           "Region[reduce], with names the function's "
                                           "module (or enclosing function) defines") from None
                continue
        if isinstance(hint, RegionSpec):
            out[name] = hint.privilege
    return out


def _names_seen_by(fn: Any) -> dict[str, Any]:
    names: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    if "<locals>" in getattr(fn, "__qualname__", ""):
        frame = sys._getframe(1)
        while frame is not None and _in_tessera(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None:
            names.update(frame.f_locals)
    cells = getattr(fn, "__closure__", None) or ()
    for var, cell in zip(fn.__code__.co_freevars, cells):
        try:
            names[var] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    return names


def _in_tessera(filename: str) -> bool:
    # tessera's own frames, and eval'd or generated code, are not where the user is
    return filename.startswith("<") or os.path.abspath(filename).startswith(_PACKAGE)


class RegionView(Tracer):
    """A launch body's view of a region parameter: a traced value that enforces the
    privilege and, for write and reduce regions, can be assigned to."""

    __slots__ = ("name", "privilege")

    def __init__(self, inner: Tracer, name: str, privilege: Privilege) -> None:
        super().__init__(inner.trace, inner.value)
        self.name = name
        self.privilege = privilege

    def _check_write(self, what: str) -> None:
        if self.privilege.mode == READ:
            raise RegionError(f"{what} region {self.name!r}, which the body may only read",
                              loc=user_location(), hint=f"annotate it {self.name}: "
                                                        "Region[write] (or Region[reduce])")

    def current(self) -> Tracer:
        """The region's value at this point of the body."""
        return Tracer(self.trace, self.value)

    def _assign(self, new: Any) -> None:
        x = ops.cast(ops.broadcast_to(ops.operand(new, self), tuple(self.shape)), self.element)
        if not isinstance(x, Tracer):
            x = Tracer(self.trace, ops.constant(x))
        self.value = x.value

    def __setitem__(self, index: Any, v: Any) -> None:
        self._check_write("assignment to")
        starts, steps, block, picked = _box(index, tuple(self.shape))  # type: ignore[arg-type]
        part = ops.reshape(ops.broadcast_to(ops.operand(v, self), picked), block)
        placed = ops.bind(graph_ir.Embed(tuple(self.shape), starts, steps),  # type: ignore[arg-type]
                          ops.cast(part, self.element))[0]
        mask = np.zeros(self.shape, bool)
        mask[_slices(starts, steps, block)] = True
        self._assign(ops.where(mask, placed, self.current()))

    def _update(self, fn: Any, v: Any) -> RegionView:
        self._check_write("in-place update of")
        self._assign(fn(self.current(), v))
        return self

    def __iadd__(self, v: Any) -> RegionView:
        return self._update(ops.add, v)

    def __isub__(self, v: Any) -> RegionView:
        return self._update(ops.sub, v)

    def __imul__(self, v: Any) -> RegionView:
        return self._update(ops.mul, v)


def _slices(starts: tuple[int, ...], steps: tuple[int, ...], block: tuple[int, ...]
            ) -> tuple[slice, ...]:
    return tuple(slice(lo, lo + (n - 1) * st + 1 if n else lo, st)
                 for lo, st, n in zip(starts, steps, block))


def _box(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...],
                                                      tuple[int, ...], tuple[int, ...]]:
    """Starts, steps and block shape of a basic index (ints and slices), and the shape
    the indexed part has in NumPy (ints dropped)."""
    idx = index if isinstance(index, tuple) else (index,)
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[k + 1:]
    idx = idx + (slice(None),) * (len(shape) - len(idx))
    if len(idx) != len(shape) or not all(isinstance(i, (int, slice)) for i in idx):
        raise RegionError(f"a region is assigned with ints and slices, not {index!r}",
                          loc=user_location(), hint="write Y[...] = v or Y[a:b, c] = v")
    starts, steps, block, picked = [], [], [], []
    for i, n in zip(idx, shape):
        if isinstance(i, int):
            starts.append(i % n)
            steps.append(1)
            block.append(1)
            continue
        lo, hi, st = i.indices(n)
        if st <= 0:
            raise RegionError("a region is assigned with positive slice steps only",
                              loc=user_location(), hint="slice forwards")
        starts.append(lo)
        steps.append(st)
        block.append(len(range(lo, hi, st)))
        picked.append(block[-1])
    return tuple(starts), tuple(steps), tuple(block), tuple(picked)


__all__ = ["READ", "REDUCE", "WRITE", "Privilege", "Region", "RegionConflictError",
           "RegionError", "RegionSpec", "RegionView", "privileges_of", "read", "reduce",
           "write"]
