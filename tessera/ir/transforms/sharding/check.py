"""The placement verifier: placed Graph IR results must follow their op's rule.

Every Graph IR op class is given two small wrappers here, when the IR package is
imported:

* ``infer`` works on unplaced types: a result's placement comes from sharding
  propagation, which may need collectives that type inference alone cannot insert;
* ``verify`` checks the types as before (without placements) and then, for a placed
  result, that the operands are in the placements the op's rule needs (no collective
  missing) and that the results are in the ones it gives. Unplaced values (traced on
  one device, or made while differentiating) are not placed yet and not checked.

The rules themselves are :data:`PLACEMENT_RULES`, keyed by op class and filled by
:mod:`.rules`, :mod:`.shape` and :mod:`.collective`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from tessera.errors import IRVerifyError, TesseraError
from tessera.ir.core import OPS, Op, Type
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType

#: op class -> placement rule ``(op, operand types, unplaced result types, mesh) -> Plan``,
#: filled by ``tessera.ir.transforms.sharding.rules`` (the sharding-propagation rules)
PLACEMENT_RULES: dict[type, Callable[..., Any]] = {}


def _plain(types: Sequence[Type]) -> list[Type]:
    return [t.unplaced() if isinstance(t, TensorType) else t for t in types]


def _placed(t: Type) -> bool:
    return isinstance(t, TensorType) and t.sharding is not None


def check_placement(op: Op, operands: Sequence[Type], results: Sequence[Type]) -> None:
    """Check placed results against the op's placement rule: the operands must be in the
    placements the rule needs (no collective missing) and the results in the ones it
    gives. Raises IRVerifyError."""
    rule = PLACEMENT_RULES.get(type(op))
    if rule is None:
        raise IRVerifyError(f"{op.name} has no placement rule, so its result cannot be "
                            "placed on a mesh",
                            hint="register one in ir/transforms/sharding/rules.py")
    if not all(_placed(t) for t in operands):
        return  # not placed yet (made while differentiating): the pass will place it
    mesh = next(t.sharding.mesh for t in [*operands, *results] if _placed(t))  # type: ignore[attr-defined]
    try:
        plan = rule(op, list(operands), _plain(results), mesh)
    except TesseraError as err:
        raise IRVerifyError(f"{op.name}: {err.message}", hint=err.hint) from None
    for k, (t, want) in enumerate(zip(operands, plan.operands)):
        have = t.sharding  # type: ignore[attr-defined]
        if have != want:
            raise IRVerifyError(f"{op.name}: operand {k} is placed {have} but the op "
                                f"needs {want}", hint="insert the collective that moves it "
                                                      "(the shard-propagation pass does)")
    if isinstance(op, graph_ir.Collective) and results[0].shape != operands[0].shape:  # type: ignore[attr-defined]
        raise IRVerifyError(f"{op.name}: a collective of a placed value keeps its global "
                            f"shape {operands[0].shape}")  # type: ignore[attr-defined]
    for k, (t, want) in enumerate(zip(results, plan.results)):
        if getattr(t, "sharding", None) != want:
            raise IRVerifyError(f"{op.name}: result {k} should be placed {want}, not "
                                f"{getattr(t, 'sharding', None)}")


def _plain_infer(fn: Callable[..., Any]) -> Callable[..., Any]:
    # Types are inferred without placements: a placement comes from propagation, which
    # may need collectives that inference alone cannot insert.
    @functools.wraps(fn)
    def infer(self: Op, operands: Sequence[Type]) -> tuple[Type, ...]:
        return tuple(_plain(fn(self, _plain(operands))))

    infer.placement_aware = True  # type: ignore[attr-defined]
    return infer


def _placed_verify(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def verify(self: Op, operands: Sequence[Type], results: Sequence[Type]) -> None:
        fn(self, _plain(operands), _plain(results))
        # An unplaced result (traced, or made by autodiff) is not yet placed; regions
        # check their own argument and yield types.
        if type(self).num_regions == 0 and any(_placed(t) for t in results):
            check_placement(self, operands, results)

    verify.placement_aware = True  # type: ignore[attr-defined]
    return verify


def install() -> None:
    """Wrap ``infer`` and ``verify`` of every Graph IR op class (once each)."""
    for cls in [c for c in OPS.values() if c.name.startswith("graph.")]:
        for name, wrap in (("infer", _plain_infer), ("verify", _placed_verify)):
            if not getattr(getattr(cls, name), "placement_aware", False):
                setattr(cls, name, wrap(getattr(cls, name)))


install()


__all__ = ["PLACEMENT_RULES", "check_placement", "install"]
