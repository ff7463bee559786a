"""``Tensor[...]`` annotations: dimensions (ints, symbols, expressions) and an element.

``Tensor["B*H", "S", "D", ts.bf16]`` describes a rank-3 tensor whose first dim is the
product of the symbols B and H. Binding an argument's shape checks it against the
annotation and records symbol values in an environment shared by all arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import DimBindingError, DTypeError, PolicyError, user_api
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.policy.dims import Dim, DimExpr, evaluate, parse_dim, solve
from tessera.numerics.policy.modifiers import Element, Policy, PolicyClass, element

_NUMBERS = (int, float, np.integer, np.floating, np.bool_)

__all__ = ["Dim", "DimEnv", "DimExpr", "TensorSpec", "parse_dim", "tensor_spec"]

_HINT = 'dims are ints >= 0, names ("K") or expressions over names ("B*H"); ' \
        "the element (ts.f32, \"bf16 @accum(f32)\") comes last"


class DimEnv(dict):  # type: ignore[type-arg]
    """A dim environment (name -> size) that remembers which argument bound each name,
    so that a later mismatch can name both arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.origins: dict[str, str] = {}


@dataclass(frozen=True)
class TensorSpec:
    """The dims and element format of a ``Tensor[...]`` annotation."""

    dims: tuple[Dim, ...]
    element: Element | None = None

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self.dims)

    def __str__(self) -> str:
        items = [str(d) if isinstance(d, int) else f'"{d}"' for d in self.dims]
        if self.element is not None:
            items.append(str(self.element))
        return f"Tensor[{', '.join(items)}]"

    def bind(self, shape: tuple[int, ...], env: dict[str, int], *, arg_name: str,
             origins: dict[str, str] | None = None) -> None:
        """Check ``shape`` against the dims and record symbol sizes in ``env``.

        A symbol seen before must have the same size. An expression is evaluated when
        its symbols are bound; if exactly one is unbound and the expression can be
        solved for it (``"B*H"`` with H known), that symbol is bound; otherwise the
        expression's text itself is bound as a composite name (``env["B*H"] = 64``)
        and checked once its symbols are known. Mismatches raise DimBindingError naming
        the argument, the dim position and both sizes.
        """
        shape = tuple(int(s) for s in shape)
        if len(shape) != self.rank:
            raise DimBindingError(
                f"argument '{arg_name}' has rank {len(shape)} (shape {shape}) but its "
                f"annotation {self} has {self.rank} dims",
                hint=f"pass a rank-{self.rank} array or change the annotation")
        if origins is None:
            origins = getattr(env, "origins", {})
        for pos, (dim, size) in enumerate(zip(self.dims, shape)):
            self._bind_dim(dim, size, env, origins, arg_name, pos)
        _check_composites(env, origins, arg_name)

    def _bind_dim(self, dim: Dim, size: int, env: dict[str, int], origins: dict[str, str],
                  arg_name: str, pos: int) -> None:
        where = f"dim {pos} of argument '{arg_name}' ({self})"
        if isinstance(dim, int):
            if dim != size:
                raise DimBindingError(f"{where} is {size}, expected {dim}",
                                      hint=f"pass an array whose dim {pos} is {dim}")
            return
        key = str(dim)
        if key in env:
            if env[key] != size:
                first = origins.get(key)
                seen = f"in argument '{first}'" if first else "from an earlier argument"
                raise DimBindingError(
                    f"dim '{key}' is {env[key]} {seen} but {size} in argument "
                    f"'{arg_name}' (dim {pos} of {self})",
                    hint=f"every use of '{key}' must have the same size")
            return
        if isinstance(dim, str):
            env[key], origins[key] = size, arg_name
            return
        value = evaluate(dim, env)
        if value is not None:
            if value != size:
                raise DimBindingError(
                    f"{where} is {size}, but '{key}' = {value} with "
                    + ", ".join(f"{s}={env[s]}" for s in sorted(dim.symbols())),
                    hint=f"pass an array whose dim {pos} is {value}")
            return
        found = solve(dim, size, env)
        if found is None:
            env[key], origins[key] = size, arg_name  # bind the composite name itself
            return
        if found is False:
            raise DimBindingError(f"{where} is {size}: no size of the unbound names in "
                                  f"'{key}' gives {size}", hint=f"'{key}' cannot be {size}")
        for name, val in found.items():
            env[name], origins[name] = val, arg_name


def _check_composites(env: dict[str, int], origins: dict[str, str], arg_name: str) -> None:
    """Composite names bound earlier must agree with their symbols once those are known."""
    for key in [k for k in env if not k.isidentifier()]:
        expr = parse_dim(key)
        if isinstance(expr, DimExpr):
            value = evaluate(expr, env, composite=False)
            if value is not None and value != env[key]:
                raise DimBindingError(
                    f"'{key}' was {env[key]} in argument '{origins.get(key, '?')}' but "
                    f"its names now give {value} (binding argument '{arg_name}')",
                    hint="make the dims of the arguments agree")


def _element_item(item: Any) -> Element | None:
    """The element an item names, or None when it is a dim."""
    if isinstance(item, (DType, Policy, PolicyClass)):
        return item
    if isinstance(item, str):
        try:
            return element(item)
        except (DTypeError, PolicyError):
            return None
    if isinstance(item, _NUMBERS):
        return None
    try:
        return element(item)
    except (DTypeError, PolicyError):
        return None


def _dim_item(item: Any, pos: int) -> Dim:
    if isinstance(item, (bool, np.bool_, float, np.floating)):
        raise DimBindingError(f"dim {pos} of a Tensor annotation is {item!r}", hint=_HINT)
    if isinstance(item, (int, np.integer)):
        if item < 0:
            raise DimBindingError(f"dim {pos} of a Tensor annotation is negative ({item})",
                                  hint=_HINT)
        return int(item)
    if isinstance(item, str):
        return parse_dim(item)
    if _element_item(item) is not None:
        raise DTypeError(f"the element {item!r} is item {pos} of a Tensor annotation, "
                         "not the last", hint=_HINT)
    raise DimBindingError(f"dim {pos} of a Tensor annotation is {item!r}", hint=_HINT)


# ``TensorSpec(...)`` with the wrong arguments is an ArgumentError like any tessera call.
TensorSpec.__init__ = user_api(TensorSpec.__init__)  # type: ignore[method-assign]


@user_api
def tensor_spec(items: Any) -> TensorSpec:
    """Build the TensorSpec of ``Tensor[items]``.

    The last item is the element when it is a format, policy, policy class, or a
    string naming one (``"f32"``, ``"bf16 @accum(f32)"``); every other item is a dim.
    """
    seq = list(items) if isinstance(items, tuple) else [items]
    elem: Element | None = None
    if seq and not isinstance(seq[-1], _NUMBERS):
        elem = _element_item(seq[-1])
        if elem is not None:
            seq = seq[:-1]
    return TensorSpec(tuple(_dim_item(item, pos) for pos, item in enumerate(seq)), elem)
