"""Which arguments a transformation differentiates: binding a call to argument slots.

A call is bound to the function's signature and spread into *slots*, one per argument
as the caller sees it: each ordinary parameter is a slot, each element of ``*args``
is a slot (labelled ``args[0]``, ``args[1]``, ...), keyword-only parameters follow, then
each ``**kwargs`` entry (labelled by its keyword, in sorted order, the order in which
tensors are flattened). ``argnums`` counts slots, so ``grad(f, argnums=1)`` of
``def f(*xs)`` called as ``f(a, b)`` differentiates ``b``; ``wrt`` names slots.

Which slots ``grad`` differentiates when neither ``argnums`` nor ``wrt`` is given
(documented in docs/autodiff.md): every slot except *data* arguments, whose names are
``x``, ``X``, ``y``, ``Y``, ``input(s)``, ``target(s)``, ``label(s)``, ``batch`` or end in
``_true`` / ``_target`` / ``_label``, and except *static* arguments: those the caller
left at their default, and those holding no float or complex value (strings, flags,
ints, None); if that leaves nothing, the first slot (JAX's default).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, GradError, TesseraError
from tessera.frontend.graph.jit import Compiled, JitFunction, tensors_in
from tessera.frontend.graph.pytree import TreeDef, flatten, unflatten
from tessera.frontend.graph.tensor import Tensor, as_tensor
from tessera.frontend.graph.trace import Tracer
from tessera.numerics import storage_of

_DATA_NAMES = re.compile(r"^(x|X|y|Y|inputs?|targets?|labels?|batch|.*_(true|target|label))$")


def default_wrt(names: Sequence[str], static: Collection[str] = ()) -> list[int]:
    """The slot positions ``grad`` differentiates by default (see module docstring).

    ``static`` names the slots that are static at this call (left at their default,
    or holding no float or complex value).
    """
    params = [k for k, n in enumerate(names) if not _DATA_NAMES.match(n) and n not in static]
    return params or [0]


def holds_float(value: Any) -> bool:
    """Whether an argument holds a float or complex leaf (a tensor, array or number)."""
    for leaf in flatten(value)[0]:
        if isinstance(leaf, (float, complex)) and not isinstance(leaf, np.generic):
            return True
        if isinstance(leaf, (np.ndarray, np.generic)):
            try:
                leaf = as_tensor(leaf)
            except TesseraError:  # an array of strings or objects: static, not a tensor
                continue
        if isinstance(leaf, (Tensor, Tracer)) and \
                storage_of(leaf.type.element).kind in ("float", "complex"):
            return True
    return False


@dataclass(frozen=True)
class Slot:
    """One argument as the caller passed it: parameter ``param``, and ``key`` (an index
    of ``*args``, a keyword of ``**kwargs``, or None for an ordinary parameter)."""

    label: str
    param: str
    key: int | str | None = None

    def get(self, arguments: dict[str, Any]) -> Any:
        value = arguments[self.param]
        return value if self.key is None else value[self.key]

    def set(self, arguments: dict[str, Any], value: Any) -> None:
        if self.key is None:
            arguments[self.param] = value
        elif isinstance(self.key, int):
            items = list(arguments[self.param])
            items[self.key] = value
            arguments[self.param] = tuple(items)
        else:
            arguments[self.param] = {**arguments[self.param], self.key: value}


def slots_of(signature: inspect.Signature, arguments: dict[str, Any]) -> list[Slot]:
    """The slots of bound ``arguments``, in the order their tensors are flattened."""
    out = []
    for name, value in arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out += [Slot(f"{name}[{k}]", name, k) for k in range(len(value))]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out += [Slot(str(k), name, k) for k in sorted(value, key=repr)]
        else:
            out.append(Slot(name, name))
    return out


class Transformed:
    """Shared machinery: bind arguments, trace the function, pick the wrt leaves."""

    def __init__(self, fn: Callable[..., Any], argnums: Any, wrt: Any) -> None:
        functools.update_wrapper(self, fn)
        self.jit = fn if isinstance(fn, JitFunction) else JitFunction(fn)
        self.argnums, self.wrt = argnums, wrt
        self.cache: dict[Any, Any] = {}
        # A @ts.jit function bakes the values it closes over into its trace (as jit
        # does); a plain Python function is traced afresh on every call, so a closure
        # over a variable that changes between calls sees the new value (as in JAX).
        self.cacheable = isinstance(fn, JitFunction)

    def positions(self, names: list[str],
                  static: Collection[str] = ()) -> tuple[list[int], bool]:
        """The differentiated slot positions, and whether one comes back bare."""
        if self.argnums is not None and self.wrt is not None:
            raise ArgumentError("pass argnums or wrt, not both")
        if self.wrt is not None:
            wanted = [self.wrt] if isinstance(self.wrt, str) else list(self.wrt)
            for w in wanted:
                if w not in names:
                    raise ArgumentError(f"wrt={w!r} is not an argument of this call of "
                                        f"{self.jit.name}({', '.join(names)})",
                                        hint="name one of the arguments listed")
            return [names.index(w) for w in wanted], isinstance(self.wrt, str)
        if self.argnums is not None:
            single = isinstance(self.argnums, int) and not isinstance(self.argnums, bool)
            nums = [self.argnums] if single else _int_list(self.argnums)
            for k in nums:
                if not -len(names) <= k < len(names):
                    raise ArgumentError(f"argnums {k} is out of range for {len(names)} "
                                        f"argument(s) ({', '.join(names)})",
                                        hint="argnums counts the arguments of the call, "
                                             "from 0")
            return [k % len(names) for k in nums], single
        pos = default_wrt(names, static)
        return pos, len(pos) == 1

    def prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[dict[str, Any], list[Slot], list[int], bool]:
        """Bound arguments, their slots, the differentiated slot positions, bareness."""
        arguments = self.jit.check_annotations(self.jit.bind_args(args, kwargs))
        slots = slots_of(self.jit.signature, arguments)
        # bind_args has checked the call, so binding again cannot fail
        passed = set(self.jit.signature.bind(*args, **kwargs).arguments)
        static = {s.label for s in slots
                  if s.param not in passed or not holds_float(s.get(arguments))}
        positions, bare = self.positions([s.label for s in slots], static)
        for k in positions:  # differentiated Python numbers become f32 tensors
            leaves, tree = flatten(slots[k].get(arguments))
            # NumPy scalars keep their own format (np.float64 is a Python float subclass).
            slots[k].set(arguments, unflatten(tree, [
                as_tensor(np.float32(v)) if isinstance(v, (int, float))
                and not isinstance(v, (bool, np.generic)) else v
                for v in leaves]))
        arguments = {k: tensors_in(v) for k, v in arguments.items()}
        return arguments, slots, positions, bare

    def leaf_groups(self, arguments: dict[str, Any], slots: list[Slot],
                    positions: list[int]) -> list[tuple[TreeDef, list[int]]]:
        """For each differentiated slot, its structure and flat tensor indices."""
        groups, index = [], 0
        starts = {}
        for k, slot in enumerate(slots):
            leaves, tree = flatten(slot.get(arguments))
            tensor_ids = []
            for leaf in leaves:
                if isinstance(leaf, (Tensor, Tracer)):
                    tensor_ids.append(index)
                    index += 1
                else:
                    tensor_ids.append(-1)
            starts[k] = (tree, tensor_ids)
        for k in positions:
            tree, ids = starts[k]
            if any(i < 0 for i in ids):
                raise GradError(f"argument {slots[k].label!r} is not a tensor, so it has no "
                                "gradient", hint="pass an array, or leave it out of argnums")
            groups.append((tree, ids))
        return groups

    def compiled(self, arguments: dict[str, Any]) -> Compiled:
        """The traced function with its output structure."""
        return self.jit.trace({k: abstract(v) for k, v in arguments.items()})


def _int_list(argnums: Any) -> list[int]:
    try:
        nums = list(argnums)
    except TypeError:
        nums = [argnums]
    if not nums or any(not isinstance(k, int) or isinstance(k, bool) for k in nums):
        raise ArgumentError(f"argnums must be an int or a non-empty sequence of ints, got "
                            f"{argnums!r}", hint="write argnums=1 or argnums=(0, 2)")
    return nums


def abstract(x: Any) -> Any:
    """Replace tracers by placeholder tensors of their type, so tracing starts fresh."""
    leaves, tree = flatten(x)
    return unflatten(tree, [Tensor(np.zeros(tuple(v.shape), storage_of(v.type.element).np_dtype),
                                   v.type.element) if isinstance(v, Tracer) else v
                            for v in leaves])


def tensor_leaves(arguments: dict[str, Any]) -> list[Any]:
    """The tensor leaves of bound arguments, in flattening order."""
    return [x for x in flatten(list(arguments.values()))[0] if isinstance(x, (Tensor, Tracer))]


__all__ = ["Slot", "Transformed", "abstract", "default_wrt", "holds_float", "slots_of",
           "tensor_leaves"]
