"""Every rule table covers every op of its dialect, so a new op without a rule fails here.

The ops of a dialect are enumerated from the op registry (``ir.core.OPS``, by name
prefix), after importing every module that defines ops or registers rules; every
concrete ``Op`` subclass of the package must be registered. Terminators (``return``,
``yield``, ``condition``) are structure each block walker handles itself; an op a table
leaves out on purpose is listed with its reason next to the table, and tested here.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.autodiff.rules import NO_VJP_RULE, VJP
from tessera.autodiff.transform import differentiable
from tessera.backend.ptx.render.emit import RULES as PTX_RULES
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.interp import IMPL
from tessera.interp.target.state import STEPS as TARGET_STEPS
from tessera.interp.tile.exec import STEPS as TILE_STEPS
from tessera.interp.tile.rules import IMPLS as TILE_IMPLS
from tessera.ir.core import OPS, Op
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.graph import collective as graph_collective
from tessera.ir.transforms.sharding.check import PLACEMENT_RULES
from tessera.ir.types import TensorType
from tessera.lower.core import NOT_LOWERED
from tessera.lower.core import RULES as LOWERING_RULES

# every module that defines ops or registers rules (rules register on import)
for _package in ("tessera.ir", "tessera.interp", "tessera.lower", "tessera.backend",
                 "tessera.autodiff"):
    for _info in pkgutil.walk_packages(importlib.import_module(_package).__path__,
                                       f"{_package}."):
        importlib.import_module(_info.name)


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def dialect_ops(prefix: str) -> set[type[Op]]:
    """The registered op classes whose names start with ``prefix.``."""
    return {cls for name, cls in OPS.items() if name.startswith(f"{prefix}.")}


def unruled(prefix: str, *tables: Any, exempt: Any = ()) -> list[str]:
    """The names of the non-terminator ops of a dialect that no table has a rule for."""
    return sorted(cls.name for cls in dialect_ops(prefix)
                  if not cls.terminator and cls not in exempt
                  and not any(cls in table for table in tables))


@pytest.mark.parametrize("prefix", ["graph", "schedule", "tile", "ptx"])
def test_every_op_class_is_registered(prefix: str) -> None:
    """An op class missing from ``OPS`` would escape every completeness test below."""
    defined = {cls for cls in _subclasses(Op) if cls.__module__.startswith("tessera.")
               and str(getattr(cls, "name", "")).startswith(f"{prefix}.")}
    assert defined and defined <= dialect_ops(prefix), sorted(c.name for c in defined)
    assert all(OPS[cls.name] is cls for cls in defined)


# -- Graph IR


def test_every_graph_op_has_an_interpreter_rule() -> None:
    assert unruled("graph", IMPL) == []


def test_every_differentiable_graph_op_has_a_vjp_rule() -> None:
    """One table serves both modes: a JVP is the transposed VJP (autodiff.transform)."""
    assert unruled("graph", VJP, exempt=NO_VJP_RULE) == []
    assert not set(NO_VJP_RULE) & set(VJP), "an op both has a rule and is listed without one"
    assert set(NO_VJP_RULE) <= dialect_ops("graph")


def test_ops_without_a_vjp_rule_are_so_for_their_reason() -> None:
    f32 = TensorType((2, 3), "f32")
    for cls in NO_VJP_RULE:
        if issubclass(cls, graph_ops.Compare):
            (result,) = cls().infer([f32, f32])
            assert not differentiable(result), cls.name
    assert graph_ops.Custom.num_regions == 1  # autodiff.transform special-cases it
    assert graph_ops.KernelCall.num_regions == 1  # and kernel calls, naming the kernel
    assert set(NO_VJP_RULE) == {*_subclasses(graph_ops.Compare), graph_ops.Constant,
                                graph_ops.Custom, graph_ops.KernelCall}


def test_every_graph_op_has_a_placement_rule() -> None:
    """Ops with regions (``graph.custom``) are placed by their region's placements
    (shard_propagation's region_op), so they need no rule of their own; a
    ``graph.kernel_call`` is never placed (refused in placed functions when traced)."""
    region_ops = {cls for cls in dialect_ops("graph") if cls.num_regions}
    assert region_ops == {graph_ops.Custom, graph_ops.KernelCall}
    assert unruled("graph", PLACEMENT_RULES, exempt=region_ops) == []


def test_every_collective_runs_on_a_mesh_and_in_index_launch_bodies() -> None:
    from tessera.mesh_sim.spmd.collect import COLLECTIVES
    from tessera.mesh_sim.spmd.lockstep import LOCAL_VIEW

    collectives = {cls for cls in dialect_ops("graph")
                   if cls.__module__ == graph_collective.__name__}
    assert collectives and collectives <= set(COLLECTIVES) & set(LOCAL_VIEW)


# -- Schedule IR


def test_every_schedule_op_has_an_interpreter_rule() -> None:
    """Scheduled functions run with the graph interpreter (interp/schedule.py)."""
    assert unruled("schedule", IMPL) == []
    assert all(cls in IMPL for cls in dialect_ops("schedule"))


# -- Tile IR


def test_every_tile_op_has_a_simulator_rule() -> None:
    assert unruled("tile", TILE_IMPLS, TILE_STEPS) == []
    both = set(TILE_IMPLS) & set(TILE_STEPS)
    assert not both, f"{sorted(c.name for c in both)} have a compute and a step rule"


def test_every_tile_op_is_lowered_or_listed() -> None:
    assert unruled("tile", LOWERING_RULES, exempt=NOT_LOWERED) == []
    assert not set(NOT_LOWERED) & set(LOWERING_RULES), "a listed op has a lowering rule"
    assert set(NOT_LOWERED) <= dialect_ops("tile")
    assert all(reason for reason in NOT_LOWERED.values())


@ts.kernel
def natural_log(x: ts.Tensor[32, ts.f32]):
    x[0:32] = ts.tile.log(x[0:32])


@ts.kernel
def lane_numbers(x: ts.Tensor[32, ts.f32]):
    x[0:32] = ts.tile.cast(ts.tile.lane_id(), ts.f32)  # NOT_LOWERED op


@ts.kernel
def index_numbers(x: ts.Tensor[32, ts.f32]):
    x[0:32] = ts.tile.cast(ts.tile.arange(32), ts.f32)


@ts.kernel
def masked_read(x: ts.Tensor[32, ts.f32]):
    positive = x[0:32] * 1.0 > 0.0
    x[0:32] = ts.tile.load(x[0:32], mask=positive, other=1.0) + 1.0


@ts.kernel
def masked_write(x: ts.Tensor[32, ts.f32]):
    v = x[0:32] + 1.0
    ts.tile.store(x[0:32], v, mask=v > 1.0)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel", [index_numbers, masked_read, masked_write, natural_log])
def test_index_tiles_and_masked_accesses_are_lowered(kernel: Any, target: str) -> None:
    x = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    ts.check_against_reference(kernel, x, backend="target", target=target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(("kernel", "op"), [(lane_numbers, "tile.lane_id")])
def test_an_op_that_is_not_lowered_is_refused_at_its_line(kernel: Any, op: str,
                                                          target: str) -> None:
    x = np.full(32, 2.0, np.float32)
    kernel(x.copy())  # the simulator runs it
    with pytest.raises(UnsupportedError) as info:
        compile_kernel(kernel, x, target=target)
    err = info.value
    (cls,) = [c for c in NOT_LOWERED if c.name == op]
    assert f"{op} is not lowered to PTX yet: {NOT_LOWERED[cls]}" in err.message
    assert err.loc is not None and err.loc.file == __file__
    with open(__file__) as source:
        assert "# NOT_LOWERED op" in source.read().splitlines()[err.loc.line - 1]


# -- Target IR


def test_every_target_op_has_an_interpreter_rule() -> None:
    assert unruled("ptx", TARGET_STEPS) == []


def test_every_target_op_has_a_ptx_rule() -> None:
    assert unruled("ptx", PTX_RULES) == []
