"""``graph-to-schedule``: each Graph IR function becomes a ``schedule.func`` with one
kernel per op (the unfused schedule that ``fuse`` starts from); ``graph.custom`` calls
are inlined first (their region is what they compute)."""

from __future__ import annotations

from tessera.ir.core import Module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.passes import register_pass
from tessera.ir.transforms.schedule.build import build_schedule, inline_custom


@register_pass
class GraphToSchedule:
    """Turn graph functions into scheduled functions with one kernel per op."""

    name = "graph-to-schedule"

    def apply(self, module: Module) -> Module:
        for name, fn in list(module.functions.items()):
            if fn.kind == schedule_ops.FUNC:
                continue
            fn = inline_custom(fn)  # a custom call computes its primal body
            groups = [[instr] for instr in fn.body.instrs if not instr.op.terminator]
            module.functions[name] = build_schedule(fn, groups)
        return module
