"""Graph IR shape ops: transpose, reshape, explicit broadcast, strided slice and its
transpose ``graph.embed``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, register_op
from tessera.ir.dialects.graph import arity
from tessera.ir.types import TensorType


@register_op
@dataclass(frozen=True)
class Transpose(Op):
    """Permute axes: result axis i is operand axis ``perm[i]``."""

    name: ClassVar[str] = "graph.transpose"
    perm: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if sorted(self.perm) != list(range(x.rank)):
            raise IRVerifyError(f"graph.transpose perm {self.perm} is not a permutation of "
                                f"{x.rank} axes")
        return (x.with_shape(tuple(x.shape[p] for p in self.perm)),)


@register_op
@dataclass(frozen=True)
class Reshape(Op):
    """Reshape to ``shape`` (same number of elements, row-major order)."""

    name: ClassVar[str] = "graph.reshape"
    shape: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        new = TensorType(self.shape, x.element)
        if new.size != x.size or any(d < 0 for d in self.shape):
            raise IRVerifyError(f"graph.reshape cannot turn {x.shape} into {self.shape}")
        return (new,)


@register_op
@dataclass(frozen=True)
class Broadcast(Op):
    """Broadcast to ``shape`` by NumPy's rules (trailing axes aligned)."""

    name: ClassVar[str] = "graph.broadcast"
    shape: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        lead = len(self.shape) - x.rank
        if lead < 0 or any(d not in (1, s) for d, s in zip(x.shape, self.shape[lead:])):
            raise IRVerifyError(f"graph.broadcast cannot broadcast {x.shape} to {self.shape}")
        return (x.with_shape(self.shape),)


@register_op
@dataclass(frozen=True)
class Slice(Op):
    """Strided slice: axis i keeps ``starts[i] : stops[i] : steps[i]`` (steps > 0)."""

    name: ClassVar[str] = "graph.slice"
    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if not len(self.starts) == len(self.stops) == len(self.steps) == x.rank:
            raise IRVerifyError(f"graph.slice needs one start/stop/step per axis of {x.shape}")
        shape = []
        for lo, hi, st, dim in zip(self.starts, self.stops, self.steps, x.shape):
            if st <= 0 or not 0 <= lo <= hi <= dim:
                raise IRVerifyError(f"graph.slice {lo}:{hi}:{st} is outside an axis of {dim}")
            shape.append(len(range(lo, hi, st)))
        return (x.with_shape(tuple(shape)),)


@register_op
@dataclass(frozen=True)
class Embed(Op):
    """The transpose of ``graph.slice``: place the operand into zeros of ``shape``.

    Element ``j`` of axis ``i`` lands at ``starts[i] + j * steps[i]``.
    """

    name: ClassVar[str] = "graph.embed"
    shape: tuple[int, ...]
    starts: tuple[int, ...]
    steps: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if not len(self.shape) == len(self.starts) == len(self.steps) == x.rank:
            raise IRVerifyError(f"graph.embed needs one shape/start/step per axis of {x.shape}")
        for n, lo, st, dim in zip(x.shape, self.starts, self.steps, self.shape):
            if st <= 0 or lo < 0 or (n and lo + (n - 1) * st >= dim):
                raise IRVerifyError(f"graph.embed of {n} elements from {lo} by {st} does not "
                                    f"fit an axis of {dim}")
        return (x.with_shape(self.shape),)
