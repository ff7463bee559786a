"""An estimate of the registers per thread a kernel specialisation needs on the GPU.

The autotuner drops configurations that would spill (more than 255 registers per
thread on sm_90) or that do not fit one SM's register file. Running ``ptxas`` on every
candidate would be exact but slow, and not every kernel lowers to PTX yet, so the
estimate is read from the Tile IR, following the PTX backend's hardware mapping
(docs/ptx-backend.md): a kernel whose tiles hold tensors runs each tile on one CTA of
128 threads (one warpgroup), which share every register tile evenly, except a GEMM
lowered to the warp-specialised sm_90a pipeline, whose CTA adds a producer warpgroup
to one or two consumer warpgroups that share the accumulator; a kernel of scalars
runs each tile on one thread.

* A value costs ``ceil(ceil(elements / threads) * bytes / 4)`` 32-bit registers per
  thread (a scalar: its own ``ceil(bytes / 4)`` on every thread). Constants cost
  nothing (PTX immediates), nor do broadcasts, reshapes and transposes (they read the
  registers of their operand), nor loads of shared memory that only feed ``mma`` (the
  tensor cores read shared memory directly).
* The estimate is the largest total of values live at one point (SSA liveness over
  the structured IR: a value is live from its definition to its last use; a value
  used inside a loop or branch is live through all of it), plus
  :data:`OVERHEAD` registers for addresses, indices and loop counters.

It is an estimate, not ``ptxas``: measured against ``ptxas -v`` for sm_90a it gave 62
and 158 registers for the 64x64 and 128x128 GEMMs (ptxas 58 and 154), and 123 to 219
for flash attention with head dim 64 (ptxas 104 to 186; 347 for 128x128 blocks, which
spill); it can still miss a spill (flash attention with head dim 128 and 64x128 blocks:
219 here, spills in ptxas).
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects.tile import Constant, MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.lower.core import THREADS, is_block_kernel
from tessera.lower.sm90a.warpspec import PipelinePlan, plan_pipeline
from tessera.numerics import storage_of

#: registers every thread needs besides the kernel's values: addresses, indices and
#: loop counters (ptxas gave 58 for the 64x64x32 GEMM, whose tiles need 32 here)
OVERHEAD = 24
_ALIASES = (tile_compute.Broadcast, tile_compute.Reshape, tile_compute.Transpose)


class RegisterEstimate:
    """The register estimate of one kernel specialisation (see the module doc)."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.block_kernel = is_block_kernel(fn)
        #: why the pipeline the configuration asks for cannot be built (see ``pipeline``)
        self.problem: str | None = None
        #: threads one tile runs on (a warp-specialised GEMM adds its producer)
        self.threads = THREADS if self.block_kernel else 1
        if self.block_kernel and self.pipeline is not None:
            self.threads = self.pipeline.threads
        self.uses: dict[Value, list[tuple[Instr, int]]] = {}
        for instr in walk(fn.body):
            for k, v in enumerate(instr.operands):
                self.uses.setdefault(v, []).append((instr, k))
        self._root: dict[Value, Value] = {}

    def root(self, v: Value) -> Value:
        """The value whose registers ``v`` reads (itself, or its alias's source)."""
        r = self._root.get(v)
        if r is None:
            owner = v.owner
            r = self.root(owner.operands[0]) if isinstance(owner, Instr) and \
                isinstance(owner.op, _ALIASES) else v
            self._root[v] = r
        return r

    def _only_mma(self, v: Value) -> bool:
        for instr, k in self.uses.get(v, []):
            if isinstance(instr.op, _ALIASES):
                if not self._only_mma(instr.results[0]):
                    return False
            elif not (isinstance(instr.op, tile_compute.Mma) and k < 2):
                return False
        return True

    def cost(self, v: Value) -> int:
        """Registers per thread that ``v`` occupies while it is live."""
        t = v.type
        if not isinstance(t, TensorType) or isinstance(t, MemRefType) or self.root(v) is not v:
            return 0
        owner = v.owner
        if isinstance(owner, Instr):
            if isinstance(owner.op, Constant):
                return 0
            src = owner.operands[0].type if owner.operands else None
            if isinstance(owner.op, tile_memory.Load) and isinstance(src, MemRefType) and \
                    src.space == "shared" and self._only_mma(v):
                return 0
        size = storage_of(t.element).np_dtype.itemsize
        per_thread = 1 if t.rank == 0 else -(-t.size // self.threads)
        return -(-(per_thread * size) // 4)

    def peak(self, block: Block) -> int:
        """The most registers per thread live at once in ``block`` (nested included)."""
        instrs = block.instrs
        last: dict[Value, int] = {}
        inner: list[set[Value]] = []
        for i, instr in enumerate(instrs):
            for v in instr.operands:
                last[self.root(v)] = i
            inside = {self.root(v) for region in instr.regions for sub in walk(region)
                      for v in sub.operands}
            for v in inside:
                last[v] = i
            inner.append(inside)
        defs = [(v, -1, self.cost(v)) for v in block.args]
        best = 0
        for i, instr in enumerate(instrs):
            if instr.regions:
                # values handed to the region (a loop's initial values) become its
                # arguments, counted inside; values used inside stay live through it
                across = sum(c for v, d, c in defs if last.get(v, -2) > i or
                             v in inner[i])
                results = sum(self.cost(r) for r in instr.results)
                here = across + max(results, *(self.peak(r.block) for r in instr.regions))
            else:
                here = sum(c for v, d, c in defs if last.get(v, -2) >= i) + \
                    sum(self.cost(r) for r in instr.results)
                acc = instr.operands[2] if isinstance(instr.op, tile_compute.Mma) and \
                    len(instr.operands) > 2 else None
                if acc is not None and last.get(self.root(acc)) == i:
                    here -= self.cost(self.root(acc))  # mma accumulates in place
            best = max(best, here)
            defs.extend((r, i, self.cost(r)) for r in instr.results)
        return best

    def per_thread(self) -> int:
        """The estimate: the peak of live values plus :data:`OVERHEAD`. A warp-specialised
        GEMM (:mod:`tessera.lower.sm90a.warpspec`) splits its values, which the
        accumulator dominates, over its consumer warpgroups."""
        peak = self.peak(self.fn.body)
        if self.pipeline is not None:
            peak = -(-peak // self.pipeline.consumers)
        return peak + OVERHEAD

    @property
    def pipeline(self) -> PipelinePlan | None:
        """The sm_90a warp-specialised pipeline the kernel lowers to, if any."""
        if not hasattr(self, "_pipeline"):
            try:
                self._pipeline = plan_pipeline(self.fn) if self.block_kernel else None
            except UnsupportedError as err:
                self._pipeline, self.problem = None, err.message
        return self._pipeline


def pipeline_problems(fn: Function) -> list[str]:
    """Why the configuration of ``fn`` asks for an sm_90a warp-specialised pipeline that
    cannot hold it (shared memory for ``num_stages``, accumulators per consumer thread,
    ``num_warps``); empty when it can, or when it asks for none."""
    est = RegisterEstimate(fn)
    _ = est.pipeline
    return [est.problem] if est.problem else []


__all__ = ["OVERHEAD", "RegisterEstimate", "pipeline_problems"]
