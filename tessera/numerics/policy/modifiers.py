"""Numerics policies: ``bf16 @accum(f32) @stochastic_round @loss_scale(128)``.

A :class:`Policy` is an immutable value: the storage format plus optional modifiers.
Modifiers are applied with ``@``; Python parses ``bf16 @accum(f32)`` as
``bf16.__matmul__(accum(f32))``, so the decorator-like spelling works unchanged.
The string form (``"bf16 @accum(f32)"``) parses to an equal value (see ``parse_policy``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, Union

import numpy as np

from tessera.errors import PolicyError, user_api
from tessera.numerics.formats.dtypes import DTYPES, DType, dtype, promote

_ORDER = "modifiers print in the order accum, stochastic_round, loss_scale"


def default_accum(storage: DType) -> DType:
    """The accumulator format used when a policy does not declare one.

    f32 for f32, tf32 and every narrower float; f64 for f64; int32 for int8 and bool;
    the format itself for int32, int64 and the complex formats.
    """
    if storage.kind == "float":
        return DTYPES["f64"] if storage.name == "f64" else DTYPES["f32"]
    if storage.name in ("int8", "bool"):
        return DTYPES["int32"]
    return storage


def check_accum(storage: DType, acc: DType) -> None:
    """Raise PolicyError unless ``acc`` can accumulate values of ``storage`` exactly."""
    kinds_ok = (storage.kind == acc.kind) or (storage.kind == "bool" and acc.kind == "int")
    if not kinds_ok:
        raise PolicyError(
            f"accum({acc}) is a {acc.kind} format but the storage {storage} is {storage.kind}",
            hint=f"accumulate {storage} in a {storage.kind} format, e.g. "
            f"{storage} @accum({default_accum(storage)})",
        )
    if promote(storage, acc) != acc:
        raise PolicyError(
            f"accum({acc}) is narrower than the storage format {storage}",
            hint=f"the accumulator must hold every {storage} value; "
            f"use {storage} @accum({promote(storage, acc)}) or wider",
        )


@dataclass(frozen=True)
class Policy:
    """An element format with numerics modifiers; build it with ``dtype @modifier``."""

    storage: DType
    accum: DType | None = None
    stochastic_round: bool = False
    seed: int = 0
    loss_scale: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage", dtype(self.storage))
        if self.accum is not None:
            object.__setattr__(self, "accum", dtype(self.accum))
            check_accum(self.storage, self.accum)
        if self.loss_scale is not None:
            object.__setattr__(self, "loss_scale", _check_scale(self.loss_scale))
        object.__setattr__(self, "seed", check_seed(self.seed))

    @property
    def accum_dtype(self) -> DType:
        """The declared accumulator, or the default for the storage format."""
        return self.accum if self.accum is not None else default_accum(self.storage)

    def __matmul__(self, modifier: Any) -> Policy:
        if not isinstance(modifier, Modifier):
            hint = "modifiers are accum(t), stochastic_round, stochastic_round(seed=n), " \
                   "loss_scale(s)"
            if isinstance(modifier, (DType, str)):
                hint = f"to accumulate in {modifier} write {self.text} @accum({modifier})"
            raise PolicyError(f"{modifier!r} is not a numerics modifier", hint=hint)
        return modifier.apply(self)

    def _parts(self) -> list[str]:
        parts = [self.storage.name]
        if self.accum is not None:
            parts.append(f"@accum({self.accum.name})")
        if self.stochastic_round:
            parts.append("@stochastic_round" + (f"(seed={self.seed})" if self.seed else ""))
        if self.loss_scale is not None:
            parts.append(f"@loss_scale({self.loss_scale!r})")
        return parts

    def __str__(self) -> str:
        return " ".join(self._parts())

    def __repr__(self) -> str:
        return f"Policy({self})"

    @property
    def text(self) -> str:
        """The canonical form without spaces, as written in IR text."""
        return "".join(self._parts())


#: seeds are the 64-bit Philox key: 0 <= seed < 2**64
SEED_LIMIT = 2**64


def check_seed(seed: Any) -> int:
    """``seed`` as a Python int in ``[0, 2**64)``, the range of the 64-bit Philox key.

    Larger seeds are refused rather than reduced modulo 2**64: two different seeds must
    never give the same random bits."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise PolicyError(f"stochastic_round seed must be an int, got {seed!r}",
                          hint="write @stochastic_round(seed=7)")
    if not 0 <= int(seed) < SEED_LIMIT:
        raise PolicyError(f"stochastic_round seed {int(seed)} is outside [0, 2**64)",
                          hint="the seed is the 64-bit Philox key: use 0 <= seed < 2**64, "
                               "e.g. seed % 2**64 if you mean to wrap it")
    return int(seed)


# ``Policy(...)`` with the wrong arguments is an ArgumentError like any tessera call.
Policy.__init__ = user_api(Policy.__init__)  # type: ignore[method-assign]


def _check_scale(s: Any) -> float:
    try:
        value = float(s)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(s, bool) or not math.isfinite(value) or value <= 0:
        raise PolicyError(f"loss_scale({s!r}) must be a finite number > 0",
                          hint="a typical static loss scale is a power of two, e.g. 128.0")
    return value


class Modifier(ABC):
    """Base of the objects that ``dtype @modifier`` accepts."""

    name = "modifier"

    @abstractmethod
    def apply(self, policy: Policy) -> Policy:
        """Return ``policy`` with this modifier added."""

    def _twice(self, policy: Policy) -> PolicyError:
        return PolicyError(f"@{self.name} is applied twice in {policy} @{self}",
                           hint=f"give each modifier at most once; {_ORDER}")

    def __rmatmul__(self, other: Any) -> Policy:
        # ``"bf16" @ accum(f32)`` and ``np.float32 @ accum(...)``: the left side is a dtype.
        return Policy(dtype(other)) @ self


@dataclass(frozen=True, init=False)
class accum(Modifier):  # lower case: it is spelled ``@accum(f32)`` in user code
    """``@accum(t)``: accumulate reductions (matmul, sum) in format ``t``."""

    dtype: DType
    name = "accum"

    @user_api
    def __init__(self, t: Any) -> None:
        object.__setattr__(self, "dtype", dtype(t))

    def apply(self, policy: Policy) -> Policy:
        """``policy`` with this accumulator (PolicyError if it already has one)."""
        if policy.accum is not None:
            raise self._twice(policy)
        check_accum(policy.storage, self.dtype)
        return replace(policy, accum=self.dtype)

    def __str__(self) -> str:
        return f"accum({self.dtype})"


@dataclass(frozen=True)
class _StochasticRound(Modifier):
    """``@stochastic_round`` or ``@stochastic_round(seed=n)``: round stochastically."""

    seed: int = 0
    name = "stochastic_round"

    @user_api
    def __call__(self, seed: int = 0) -> _StochasticRound:
        return _StochasticRound(check_seed(seed))

    def apply(self, policy: Policy) -> Policy:
        """``policy`` rounding stochastically (PolicyError if it already does)."""
        if policy.stochastic_round:
            raise self._twice(policy)
        return replace(policy, stochastic_round=True, seed=self.seed)

    def __str__(self) -> str:
        return "stochastic_round" + (f"(seed={self.seed})" if self.seed else "")


stochastic_round = _StochasticRound()
"""The stochastic-rounding modifier; usable bare and called with a seed."""


@dataclass(frozen=True, init=False)
class loss_scale(Modifier):  # spelled ``@loss_scale(128)`` in user code
    """``@loss_scale(s)``: a static loss scale (finite, > 0) for mixed-precision training."""

    scale: float
    name = "loss_scale"

    @user_api
    def __init__(self, s: Any) -> None:
        object.__setattr__(self, "scale", _check_scale(s))

    def apply(self, policy: Policy) -> Policy:
        """``policy`` with this loss scale (PolicyError if it already has one)."""
        if policy.loss_scale is not None:
            raise self._twice(policy)
        return replace(policy, loss_scale=self.scale)

    def __str__(self) -> str:
        return f"loss_scale({self.scale!r})"


from tessera.numerics.policy.classes import PolicyClass, precision_policy  # noqa: E402

Element = Union[DType, Policy, PolicyClass]  # noqa: UP007 - a runtime alias, also on 3.10
"""What a ``Tensor[...]`` element can be: a format, a policy or a policy class."""


@user_api
def element(x: Any) -> Element:
    """Normalise an element: a DType, Policy, PolicyClass, policy string or dtype-like."""
    if isinstance(x, (DType, Policy, PolicyClass)):
        return x
    if isinstance(x, str):
        from tessera.numerics.policy.parse import parse_policy

        return parse_policy(x)
    return dtype(x)


def storage_of(e: Any) -> DType:
    """The storage format of an element."""
    el = element(e)
    return el if isinstance(el, DType) else el.storage


def accum_of(e: Any) -> DType:
    """The accumulator format of an element (the default rule for a plain DType)."""
    el = element(e)
    return default_accum(el) if isinstance(el, DType) else el.accum_dtype


def product_accum(a: Any, b: Any) -> DType:
    """The accumulator of a product of elements ``a`` and ``b`` (a matmul's): a declared
    ``@accum`` (``a``'s first), else the default accumulator of the promoted storage
    format."""
    for e in (a, b):
        if getattr(element(e), "accum", None) is not None:
            return accum_of(e)
    return default_accum(promote(storage_of(a), storage_of(b)))


def loss_scale_of(e: Any) -> float | None:
    """The static loss scale of an element, or None."""
    el = element(e)
    return el.loss_scale if isinstance(el, Policy) else None


@user_api
def parse_policy(text: str) -> DType | Policy:
    """Parse ``"bf16 @accum(f32) @stochastic_round"`` (see :mod:`tessera.numerics.policy.parse`)."""
    from tessera.numerics.policy.parse import parse_policy as _parse

    return _parse(text)


__all__ = [
    "SEED_LIMIT", "Element", "Modifier", "Policy", "PolicyClass", "accum", "accum_of",
    "check_accum", "check_seed", "default_accum", "element", "loss_scale", "loss_scale_of",
    "parse_policy", "precision_policy", "stochastic_round", "storage_of",
]
