"""Remembered call specialisations: a kernel launched again with arguments of the same
shapes, dtypes and constants skips binding and specialising them.

:func:`~tessera.frontend.kernel.specialise.prepare` binds a call's arguments to the
signature, binds the dims of every annotated tensor and builds the specialisation's
key: tens of microseconds of Python per launch, more than some whole launches of the
tile simulator. Its result depends on the arguments only through their shapes,
dtypes and the values of constants, so a call whose *shape signature* was seen before
reuses that result with its own arrays in place of the earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.frontend.kernel.args import scalar_value
from tessera.frontend.kernel.specialise import KernelInfo, Prepared, prepare

#: signatures remembered per kernel (the oldest is dropped past this)
MEMO_SIZE = 64
#: constants that are part of a signature by value
_CONSTANTS = (bool, int, float, str, type(None))


def _part(value: Any) -> Any:
    """One argument's share of a signature, or None when it cannot be part of one."""
    if type(value) is np.ndarray:
        return ("A", value.shape, value.dtype.str)
    if isinstance(value, _CONSTANTS):
        return ("C", type(value).__name__, value)
    return None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class _Recipe:
    """How a remembered call's runtime list is made from a new call's values."""

    names: tuple[str, ...]  # parameter names of the positional arguments
    #: per bound parameter: ("array", None), ("scalar", (name, format)) or ("const", None)
    kinds: tuple[tuple[str, Any], ...]
    prepared: Prepared


class CallMemo:
    """The specialisations of one kernel's calls, by shape signature."""

    def __init__(self) -> None:
        self.recipes: dict[tuple[Any, ...], _Recipe] = {}

    def prepare(self, info: KernelInfo, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                grid: Any, group_size: int, tile_shape: Any,
                config: dict[str, Any]) -> Prepared:
        """:func:`~tessera.frontend.kernel.specialise.prepare`, remembered."""
        key = self._signature(info, args, kwargs, grid, group_size, tile_shape, config)
        recipe = self.recipes.get(key) if key is not None else None
        if recipe is not None:
            return self._rebind(recipe, args, kwargs)
        prep = prepare(info, args, kwargs, grid=grid, group_size=group_size,
                       tile_shape=tile_shape, config=config)
        if key is not None and not prep.writeback and _plain(info):
            if len(self.recipes) >= MEMO_SIZE:
                del self.recipes[next(iter(self.recipes))]
            names = tuple(list(prep.params)[:len(args)])
            self.recipes[key] = _Recipe(names, tuple(_runtime_slots(prep)), prep)
        return prep

    @staticmethod
    def _signature(info: KernelInfo, args: tuple[Any, ...], kwargs: dict[str, Any],
                   grid: Any, group_size: int, tile_shape: Any, config: dict[str, Any]
                   ) -> tuple[Any, ...] | None:
        names, runtime = info.param_names, info.runtime_names
        parts: list[Any] = [len(args)]
        named = [*zip(names, args), *sorted(kwargs.items())] if kwargs else zip(names, args)
        for name, v in named:
            # a runtime scalar (annotated with a dtype) is converted, not specialised on
            p = ("S", type(v).__name__) if name in runtime and isinstance(v, _CONSTANTS) \
                else _part(v)
            if p is None:
                return None
            parts.append((name, p))
        launch = (grid, group_size, tile_shape, tuple(sorted(config.items())))
        if not _hashable(launch):
            return None
        parts.append(launch)
        return tuple(parts)

    @staticmethod
    def _rebind(recipe: _Recipe, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared:
        old = recipe.prepared
        values = dict(old.params)
        values.update(zip(recipe.names, args))
        values.update(kwargs)
        runtime = []
        for (kind, how), value in zip(recipe.kinds, values.values()):
            if kind == "array":
                runtime.append(value)
            elif kind == "scalar":  # checked like a first call's (a new value may not fit)
                runtime.append(scalar_value(how[0], value, how[1]))
        return Prepared(old.spec, old.key, runtime, values, [])


def _plain(info: KernelInfo) -> bool:
    """Whether positional arguments fill the first parameters (no ``*args``/``**kw``)."""
    return all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               for p in info.signature.parameters.values())


def _runtime_slots(prep: Prepared) -> list[tuple[str, Any]]:
    """Per bound parameter, what it contributes to the runtime list: the array itself,
    a scalar converted to its format, or nothing (a specialisation constant)."""
    out: list[tuple[str, Any]] = []
    for param in prep.spec.params:
        if param.kind == "tensor":
            out.append(("array", None))
        elif param.kind == "scalar":
            assert param.type is not None
            out.append(("scalar", (param.name, param.type.element)))
        else:
            out.append(("const", None))
    return out


__all__ = ["MEMO_SIZE", "CallMemo"]
