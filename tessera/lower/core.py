"""The Tile IR -> Target IR lowering driver: kernel signature, launch geometry, ids,
structured control flow, and the rule table the other ``tessera.lower`` modules fill.

Hardware mapping (docs/ptx-backend.md has the long form):

* a **scalar kernel** (every register value a scalar: saxpy, a shared-memory tree
  reduction) runs one Tessera tile per thread and one group per CTA of ``group_size``
  threads. When the kernel never talks within its group (``group_size`` 1, no shared
  memory, no barrier), 128 groups share one CTA and a guard masks the tail;
* a **block kernel** (some value is a tensor) runs one tile per CTA of 128 threads
  (four warps; one warpgroup on sm_90a); tensors are spread over the threads by the
  layouts of :mod:`tessera.lower.layout`. Groups of more than one tile are not lowered.
  A GEMM-shaped K loop on sm_90a adds a producer warpgroup to one or two consumer
  warpgroups (:mod:`tessera.lower.sm90a.warpspec`); on sm_80 it becomes a multi-stage
  ``cp.async`` ring (:mod:`tessera.lower.sm80.pipeline`).

CTA ``ctaid.x`` is the group's linear id (C order over the grid; a pipelined GEMM's
CTAs walk it in grouped order, :mod:`tessera.lower.geometry`), ``ctaid.y`` the
batch index. Index arithmetic is 32-bit (tensors up to 2^31 elements).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import gcd, prod
from typing import Any

from tessera.errors import IRVerifyError, TesseraError, UnsupportedError
from tessera.ir.core import Block, Function, Instr, IRRegion, Op, Value, rule_decorator, walk
from tessera.ir.dialects.target import KERNEL, TARGETS, If, RegType, Return, TensorMapType, Yield
from tessera.ir.dialects.tile import LaneId, MemRefType
from tessera.ir.types import TensorType
from tessera.lower import strength
from tessera.lower.emit import TargetEmitter, drop_unused_conversions
from tessera.lower.geometry import THREADS, CtaGeometry, geometry_of, grouped, raster_rows
from tessera.lower.values import Indexed, Lowered, Mem, Scalar, elem_bytes, reg_type

Rule = Callable[["Lowerer", Instr, list[Lowered]], Sequence[Lowered]]
RULES: dict[type[Op], Rule] = {}
#: arguments start 256-byte aligned (cuMemAlloc; the Target IR interpreter does the same)
GLOBAL_ALIGN = 256

rule = rule_decorator(RULES, "lowering rule")
#: rules that replace (or, for an op of :data:`NOT_LOWERED`, add) a lowering in fast
#: mode only: :mod:`tessera.lower.rules.fastmath`
FAST_RULES: dict[type[Op], Rule] = {}
fast_rule = rule_decorator(FAST_RULES, "fast-mode lowering rule")
#: rules for ops with ``exact = true`` (exact reductions, exact ``mma`` accumulators),
#: in every mode: :mod:`tessera.lower.exact` (a long accumulator in integer registers)
EXACT_RULES: dict[type[Op], Rule] = {}
exact_rule = rule_decorator(EXACT_RULES, "exact lowering rule")

#: Tile IR ops the lowering refuses on purpose, and why: every other non-terminator op
#: has a rule in :data:`RULES` (tests/test_rule_tables.py checks both), and a kernel
#: that uses one of these is an UnsupportedError at the op's line that gives the reason
NOT_LOWERED: dict[type[Op], str] = {
    LaneId: "lanes name the elements sanitizer reports blame, not hardware threads; no "
            "rule builds that index tile in a thread layout yet",
}
#: why an op with ``exact = true`` that has no rule in :data:`EXACT_RULES` is refused
EXACT_NOT_LOWERED = ("exact accumulation is lowered for row sums and means and for the "
                     "exact mma (tessera.lower.exact) only")


def is_block_kernel(fn: Function) -> bool:
    """True when some register value of the kernel is a tensor (rank >= 1)."""
    return any(isinstance(v.type, TensorType) and v.type.rank > 0
               for i in walk(fn.body) for v in (*i.results, *i.operands))


@dataclass
class Lowerer:
    """Lowers one specialised ``tile.kernel`` to a ``ptx.kernel`` for ``target``."""

    fn: Function
    target: str
    params: list[Value] = field(default_factory=list)
    env: dict[Value, Lowered] = field(default_factory=dict)
    block_kernel: bool = False
    geom: CtaGeometry | None = None
    ids: dict[str, Value] = field(default_factory=dict)
    buffers: int = 0  # shared buffers allocated so far (their symbols are numbered)
    extra: dict[str, Any] = field(default_factory=dict)
    layouts: dict[Value, Any] = field(default_factory=dict)
    stack: list[TargetEmitter] = field(default_factory=list)
    #: "fast" lowers math to the hardware's approximate instructions
    #: (:mod:`tessera.lower.fastmath`); any other mode keeps the checked bits
    mode: str = "checked"
    #: rules for particular instructions (by ``id``), ahead of :data:`RULES`
    overrides: dict[int, Rule] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise UnsupportedError(f"unknown PTX target {self.target!r}",
                                   hint=f"use one of {', '.join(TARGETS)}")
        self.body = Block()
        self.e = TargetEmitter(self.body, self.fn.loc, target=self.target)
        self.block_kernel = is_block_kernel(self.fn)

    # -- entry
    def lower(self) -> Function:
        """Build and return the Target IR kernel."""
        self.geom = geometry_of(self.fn, self.block_kernel)
        self._signature()
        if self.block_kernel:
            from tessera.lower.exact.accplan import plan_exact
            from tessera.lower.layout import assign_layouts, is_integer_mma
            from tessera.lower.sm80.intmma import integer_tensor_cores

            int_cores = integer_tensor_cores(self.fn, self.target)
            self.layouts = assign_layouts(self.fn, int_cores)
            exact = plan_exact(self)  # exact products in a thread's loop: no tensor cores
            # integer products too, unless their sums provably stay inside s32
            exact = exact or (not int_cores and any(map(is_integer_mma, walk(self.fn.body))))
            self.extra["per_thread_mma"] = exact
            if not exact and self.target == "sm_90a":
                from tessera.lower.sm90a.attention.loop import plan_kv
                from tessera.lower.sm90a.mma import operand_buffers, ring_setup

                self.extra["wgmma_buffers"] = operand_buffers(self.fn)
                if not self._warp_specialise() and self.extra["wgmma_buffers"]:
                    plan_kv(self)  # an attention's K/V ring (it may split the CTA)
                    ring_setup(self)
            elif not exact:
                from tessera.lower.sm80.pipeline import multistage_rules, plan_multistage

                plan = plan_multistage(self.fn)
                if plan is not None:
                    self.overrides.update(multistage_rules(plan))
                    self.extra["raster"] = raster_rows(self.fn)
        from tessera.lower.exact import msetable

        msetable.plan(self)  # an mse's table of terms: deposited, not built
        if dict(self.fn.attrs.get("config", ())).get("persistent") and \
                "persistent" not in self.extra.get("attrs", {}):
            from tessera.lower.sm90a.persistent import refuse

            raise refuse(self.fn, "only the warp-specialised sm_90a GEMM pipeline walks "
                                  f"its tiles persistently, and this kernel on {self.target} "
                                  "does not lower to it")
        g = self.geom
        tail = None
        with strength.threads(g.block):  # final now: the planning above set it
            if g.packed and g.n_groups % g.block:
                self._guarded_body(g.n_groups)
            else:
                outs = self.lower_block(self.fn.body, self.e)
                # a warp-specialised kernel ends in its consumer branch
                tail = self.extra.pop("continuation", None)
                self._results(outs, tail or self.e)
                if tail is not None:
                    tail.op(Yield())
        from tessera.lower.rules.ordered.fold import finish_ordered

        # one-element updates of several tiles, folded in tile order by the last CTA
        finish_ordered(self, self.e, tail is not None)
        attrs = {"target": self.target, "block": [self.geom.block],
                 "grid": [self.geom.ctas, self.geom.batch, 1],
                 "params": [str(p.type) for p in self.params],
                 "source": self.fn.name}
        if self.mode == "fast":
            attrs["mode"] = "fast"
        attrs.update(self.extra.get("attrs", {}))  # a pipeline's epilogue, the K/V ring
        if self.extra.get("raster"):
            attrs["raster"] = f"CTAs in grouped order: bands of {self.extra['raster']} tile rows"
        attrs.update({k: self.extra[k] for k in ("maxnreg",) if k in self.extra})
        return Function(self.fn.name, self.body, [], KERNEL, attrs, self.fn.loc)

    def _warp_specialise(self) -> bool:
        """Plan the warp-specialised GEMM pipeline (:mod:`tessera.lower.sm90a.warpspec`);
        when the kernel has one, its K loop and shared buffers get their own rules and
        the CTA grows by the producer warpgroup."""
        from tessera.lower.sm90a.pipeline import pipelined_rules
        from tessera.lower.sm90a.warpspec import plan_pipeline

        plan = plan_pipeline(self.fn)
        if plan is None:
            return False
        assert self.geom is not None
        self.geom.block = plan.threads
        self.extra["maxnreg"] = plan.entry_regs
        self.extra["raster"] = raster_rows(self.fn)
        if plan.persistent:  # one CTA an SM walks the output tiles
            from tessera.lower.sm90a.persistent import ctas

            self.geom.ctas = ctas(self.geom.n_groups)
            self.extra.setdefault("attrs", {})["persistent"] = (
                f"{self.geom.ctas} CTAs walk {self.geom.n_groups} output tiles")
        self.overrides.update(pipelined_rules(plan))
        return True

    def _guarded_body(self, n_groups: int) -> None:
        """The body under ``if group_id < n_groups``: the last CTA of a packed launch
        has threads past the last group, which must not run the kernel."""
        e = self.e
        ok = e.setp("lt", self.group_id(e), e.const(n_groups, "s32"), "s32")
        then, other = Block(), Block()
        inner = e.nested(then)
        self._results(self.lower_block(self.fn.body, inner), inner)
        inner.op(Yield())
        TargetEmitter(other).op(Yield())
        e.op(If(), [ok], regions=[IRRegion([then]), IRRegion([other])], result_types=[])

    def _results(self, outs: list[Lowered], e: TargetEmitter) -> None:
        """Write a returned tile at the tile's output position, or tile 0's returned
        scalar, through the ``out`` parameter (a returned parameter needs nothing)."""
        if not outs or isinstance(outs[0], Mem):
            return
        from tessera.lower.rules.memory import store_result

        self.stack.append(e)
        store_result(self, outs[0])
        self.stack.pop()

    def _signature(self) -> None:
        for index, arg in enumerate(self.fn.args):
            t = arg.type
            if isinstance(t, MemRefType):
                p = self.body.add_arg(RegType("u64"), arg.hint)
                self.params.append(p)
                self.env[arg] = self._param_view(p, t, index)
            elif isinstance(t, TensorType) and t.rank == 0:
                p = self.body.add_arg(RegType(reg_type(t.element)), arg.hint)
                self.params.append(p)
                self.env[arg] = Scalar(p, reg_type(t.element))
            else:
                raise UnsupportedError(f"kernel parameter '{arg.hint}' of type {t} has no PTX "
                                       "form", loc=self.fn.loc)
        returned = self.fn.body.terminator
        rtype = returned.operands[0].type if returned is not None and returned.operands else None
        if isinstance(rtype, TensorType) and rtype.rank > 0:
            self._check_result_attrs(rtype)
        if "result_shape" in self.fn.attrs or isinstance(rtype, TensorType):
            p = self.body.add_arg(RegType("u64"), "out")
            self.params.append(p)
            self.extra["out"] = p

    def _check_result_attrs(self, tile: TensorType) -> None:
        """A returned tile is stored into an output tensor that only the kernel's
        attributes describe (``@ts.kernel`` sets them from the result annotation)."""
        missing = [a for a in ("result_shape", "result_element") if a not in self.fn.attrs]
        if missing:
            raise IRVerifyError(
                f"kernel '{self.fn.name}' returns a {tile} tile but has no "
                f"{' or '.join(missing)} attribute: the output tensor is unknown",
                hint="add result_shape = [...] (the whole output's shape), result_element = "
                     f"#{tile.element} and, for an output with a batch axis, result_batched "
                     "= true to the tile.kernel's attributes", loc=self.fn.loc)

    def _param_view(self, p: Value, t: MemRefType, index: int) -> Mem:
        strides = tuple(prod(t.shape[i + 1:]) for i in range(t.rank))
        base, align = p, GLOBAL_ALIGN
        if t.batch:  # the body sees the slice of its batch index
            slice_bytes = prod(t.shape) * elem_bytes(t.element)
            b = self.e.cvt(self.e.sreg("ctaid.y"), "u64", "u32")
            base = self.e.add(p, self.e.mul(b, self.e.const(slice_bytes, "u64"), "u64"), "u64")
            align = gcd(align, slice_bytes)
        meta = {"arg": index, "batch_rows": t.shape[0] if t.batch else 0}
        return Mem("global", base, None, t.shape, strides, t.element, buffer=p.hint, meta=meta,
                   align=align)

    def shared_buffer(self, prefix: str, size: int, align: int, *, entry: bool = False,
                      ) -> Value:
        """A fresh ``.shared`` buffer ``<prefix><n>``; its address is defined where the
        current rule emits (or in the entry block, which dominates every region)."""
        from tessera.ir.dialects.target.ops import SharedAlloc

        sym = f"{prefix}{self.buffers}"
        self.buffers += 1
        return (self.e if entry else self.em).one(SharedAlloc(sym, size, align))

    def tensor_map(self, arg: int, elem: str, box: tuple[int, int], swizzle: int) -> Value:
        """A ``tmap`` kernel parameter for TMA copies of kernel argument ``arg``."""
        key = ("tmap", arg, elem, box, swizzle)
        if key not in self.extra:
            v = self.body.add_arg(TensorMapType(arg, elem, box, swizzle), f"tmap{arg}")
            self.params.append(v)
            self.extra[key] = v
        return self.extra[key]

    # -- ids
    def group_id(self, e: TargetEmitter) -> Value:
        """The group's linear id (computed once, in the entry block, which dominates
        every region: the instructions go in before the op whose region is being
        built)."""
        if "group" not in self.ids:
            g, entry = self.geom, self.e
            assert g is not None
            cta = entry.cvt(entry.sreg("ctaid.x"), "s32", "u32")
            if self.extra.get("raster"):  # a pipelined GEMM's CTAs walk bands of rows
                cta = grouped(entry, cta, *g.grid, self.extra["raster"])
            if g.packed:
                tid = entry.cvt(entry.sreg("tid.x"), "s32", "u32")
                cta = entry.add(entry.mul(cta, entry.const(g.block, "s32"), "s32"), tid, "s32")
            self.ids["group"] = cta
        return self.ids["group"]

    def local_id(self, e: TargetEmitter) -> Value:
        """The tile's index in its group (the thread index of a scalar kernel's CTA)."""
        g = self.geom
        assert g is not None
        if g.packed or self.block_kernel:
            return e.const(0, "s32")
        if "local" not in self.ids:
            self.ids["local"] = self.e.cvt(self.e.sreg("tid.x"), "s32", "u32")
        return self.ids["local"]

    # -- blocks and control flow
    @property
    def em(self) -> TargetEmitter:
        """The emitter of the block being lowered (rules append through it)."""
        return self.stack[-1]

    def lower_block(self, block: Block, e: TargetEmitter) -> list[Lowered]:
        """Lower the instructions of ``block`` into ``e``; returns its terminator's
        operands, lowered."""
        self.stack.append(e)
        # a region starts with no previous op: a copy that opens a loop body follows the
        # body's last op (from the second trip on), not the copy before the loop
        self.extra["prev_op"] = None
        from tessera.lower.rules.masked import settle

        try:
            for instr in block.instrs:
                if instr.op.terminator:
                    return [settle(self, v, self.env[v]) for v in instr.operands]
                self.lower_instr(instr, e)
                self.extra["prev_op"] = type(instr.op)
            return []
        finally:
            self.stack.pop()

    def lower_instr(self, instr: Instr, e: TargetEmitter) -> None:
        """Lower one (non-terminator) instruction into ``e`` by its rule (an override,
        the exact rule of an exact op, fast mode's rule, else the checked one) and bind
        its results; a pipeline that emits a loop body itself lowers its other ops here."""
        from tessera.lower.rules.masked import through_indexed

        fn = self.overrides.get(id(instr)) or RULES.get(type(instr.op))
        exact = getattr(instr.op, "exact", False) is True
        if exact:
            fn = EXACT_RULES.get(type(instr.op))
        elif self.mode == "fast" and id(instr) not in self.overrides:
            fn = FAST_RULES.get(type(instr.op), fn)
        if fn is None:
            why = NOT_LOWERED.get(type(instr.op)) or (EXACT_NOT_LOWERED if exact else None)
            raise UnsupportedError(
                f"{instr.op.name}" + (" (exact)" if exact else "")
                + " is not lowered to PTX yet" + (f": {why}" if why else ""), loc=instr.loc,
                hint="run the kernel in the tile simulator, or rewrite it without "
                     f"{instr.op.name}")
        e.loc = self.em.loc = instr.loc  # a rule may switch the emitter
        args = [self.env[v] for v in instr.operands]
        if "exact_chains" in self.extra:  # uses of an exact accumulator round it
            from tessera.lower.exact.accplan import exact_operands

            args = exact_operands(self, instr, args)
        try:
            # an index tensor (arange, a mask) is computed where it is used
            outs = (through_indexed(self, instr, args, fn)
                    if any(isinstance(a, Indexed) for a in args) else fn(self, instr, args))
        except TesseraError as err:
            if err.loc is not None and err.loc.file == instr.loc.file:
                raise
            # a building block's error: name the kernel line being lowered
            raise type(err)(err.message, hint=err.hint, loc=instr.loc) from None
        for v, lv in zip(instr.results, outs):
            self.env[v] = lv


def lower_kernel(fn: Function, target: str, mode: str = "checked") -> Function:
    """Lower one specialised ``tile.kernel`` to a ``ptx.kernel`` for ``target``
    (``mode="fast"``: approximate math, see :mod:`tessera.lower.fastmath`)."""
    from tessera.lower import exact, rules  # noqa: F401  (their modules register rules)
    from tessera.lower.shared import check_shared_limit

    kernel = (low := Lowerer(fn, target, mode=mode)).lower()
    drop_unused_conversions(kernel.body)  # (a cast that bf16x2 pairs replaced)
    TargetEmitter(kernel.body, fn.loc, low.e.consts).op(Return())
    check_shared_limit(kernel, target)  # before ptxas, at the kernel's line
    return kernel


__all__ = ["EXACT_NOT_LOWERED", "EXACT_RULES", "FAST_RULES", "NOT_LOWERED", "RULES", "THREADS",
           "CtaGeometry", "Lowerer", "exact_rule", "fast_rule", "is_block_kernel",
           "lower_kernel", "rule"]
