"""The rule table of the Graph IR interpreter and the context a rule runs in.

``IMPL`` maps an op class to its rule, as JAX maps a primitive to its impl rule. A rule
is ``rule(ap, operands) -> results``: ``ap`` is an :class:`Apply` (the op, the operand
and result types, the mode, the source location and the stochastic-rounding counter of
this application), ``operands`` are NumPy arrays in the storage formats of the operand
types. Rules return arrays in the storage formats of the result types; every rounding
goes through :meth:`Apply.round`, i.e. through ``numerics.convert``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import InterpretError, Loc
from tessera.ir.core import IRRegion, Op, rule_decorator
from tessera.ir.types import TensorType
from tessera.numerics.formats.convert import convert, to_f64
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.policy.modifiers import Policy, storage_of

#: the interpretation modes: "exact" (the definition) and "fast" (BLAS, non-bitwise)
MODES = ("exact", "fast")

Rule = Callable[["Apply", list[np.ndarray]], list[np.ndarray]]

#: op class -> rule; filled by the rule modules of this package
IMPL: dict[type[Op], Rule] = {}


rule = rule_decorator(IMPL, "interpreter rule")


@dataclass
class Apply:
    """One application of an op: what a rule needs besides the operand arrays.

    ``loc`` is the instruction's source location (None: the user's current line).
    ``counter`` is the stochastic-rounding counter of the first element of the first
    result; result ``k`` starts after the elements of results ``0..k-1``.
    ``run_block`` runs a nested region (set by the function runner, used by
    ``graph.custom``).
    """

    op: Op
    operand_types: Sequence[TensorType]
    result_types: Sequence[TensorType]
    mode: str = "exact"
    counter: int = 0
    loc: Loc | None = None
    regions: Sequence[IRRegion] = ()
    run_block: Callable[..., list[np.ndarray]] | None = None

    def fail(self, message: str, hint: str | None = None) -> InterpretError:
        """An InterpretError naming the op, at the instruction's location."""
        return InterpretError(f"{self.op.name}: {message}", hint=hint, loc=self.loc)

    def storage(self, k: int = 0) -> DType:
        """The storage format of result ``k``."""
        return storage_of(self.result_types[k].element)

    def operand_storage(self, k: int = 0) -> DType:
        """The storage format of operand ``k``."""
        return storage_of(self.operand_types[k].element)

    def offset(self, k: int) -> int:
        """The stochastic-rounding counter of the first element of result ``k``."""
        return self.counter + sum(_size(t) for t in self.result_types[:k])

    def round(self, x: Any, k: int = 0) -> np.ndarray:
        """Round exact (or float64-computed) values once to the element of result ``k``.

        This is ``numerics.convert``: round to nearest even with the format's saturation,
        or stochastic rounding when the element's policy asks for it, with this
        application's counter so that the random bits are reproducible.
        """
        return convert(x, self.result_types[k].element, counter_offset=self.offset(k))

    def stochastic(self, k: int = 0) -> bool:
        """True when result ``k`` is rounded stochastically."""
        e = self.result_types[k].element
        return isinstance(e, Policy) and e.stochastic_round

    def select(self, x: np.ndarray, k: int = 0) -> np.ndarray:
        """Store values that are already values of the result format (max, where, ...).

        Nothing is rounded: ``x`` holds float64 copies of operand values, so the cast
        back is exact. Bool results are stored as bool.
        """
        fmt = self.storage(k)
        if fmt.kind == "bool":
            return np.asarray(x).astype(np.bool_)
        return convert(x, fmt)

    def wide(self, x: np.ndarray, k: int = 0) -> np.ndarray:
        """Operand ``k`` widened exactly to float64 (complex128 for complex)."""
        fmt = self.operand_storage(k)
        if fmt.kind == "bool":
            raise self.fail("arithmetic on bool values is not defined",
                            hint="cast the operand to an int or float format first")
        return to_f64(x)


def _size(t: TensorType) -> int:
    # Symbolic dims are bound at run time; the counter only needs to be deterministic,
    # so an unknown dim counts as 1 (the layout of counters is still fixed by the IR).
    return int(np.prod([d if isinstance(d, int) else 1 for d in t.shape], dtype=np.int64))
