"""A fast path of the tile simulator for the shared-memory tree of block reductions.

The canonical second half of a block reduction is

    stride = group_size // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]
        ts.tile.barrier()
        stride //= 2

In the general loop every level costs a divergent branch (the programs are compacted
and merged), two shared-memory accesses with their sanitizer bookkeeping and a
barrier. When the loop is exactly that, its levels become one float32 slice add each
over every group at once, ``buf[:a] += buf[s:s + a]`` with ``a = min(s, group_size)``:
the same additions, so the same bits.

Nothing the sanitizers look for can happen inside such a loop once its entry state is
clean: a level writes ``[0, a)`` and reads ``[s, s + a)``, which are disjoint
(``a <= s``); each tile writes one element; the barrier is outside the branch, so every
tile reaches it. So the runner checks, before the first level, what the general loop
would find wrong: reads past the buffer, elements never written, copies not waited
for, accesses since the last barrier by other tiles, and a frame that is not made of
whole groups. If any is possible it returns None and the general loop runs (and
reports). The levels' barriers are still counted, so the launch state (epochs, copy
groups, race shadows) afterwards is the general loop's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile import sync
from tessera.interp.tile.exec import Compiler, Frame, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.memory.spaces import SharedMem
from tessera.ir.core import Block, Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory


def _constant(v: Value, producers: dict[Value, Instr]) -> Any:
    p = producers.get(v)
    return p.op.value if p is not None and isinstance(p.op, tile_ir.Constant) else None


def _ops(block: Block) -> list[Instr]:
    return [i for i in block.instrs if not i.op.terminator]


def _unit_view(i: Instr) -> bool:
    return isinstance(i.op, tile_memory.View) and tuple(i.op.sizes) == (1,) \
        and tuple(i.op.squeeze) == (0,) and len(i.operands) == 2


def _match(loop: Instr) -> tuple[Value, Instr] | None:
    """The shared buffer and the barrier of a ``tile.while`` of the canonical tree, or
    None."""
    if len(loop.operands) != 1 or len(loop.regions) != 2:
        return None
    cond, body = (r.block for r in loop.regions)
    (s_cond,), (s,) = cond.args, body.args
    cprod = {r: i for i in cond.instrs for r in i.results}
    test = _ops(cond)
    if not (len(test) == 2 and isinstance(test[1].op, tile_compute.Gt)
            and test[1].operands[0] is s_cond and _constant(test[1].operands[1], cprod) == 0
            and cond.terminator is not None and cond.terminator.operands == test[1].results):
        return None
    ops = _ops(body)
    if len(ops) != 6:
        return None
    lid, lt, branch, barrier, two, half = ops
    prod = {r: i for i in ops for r in i.results}
    if not (
        isinstance(lid.op, tile_ir.LocalId)
        and isinstance(lt.op, tile_compute.Lt)
        and lt.operands == [lid.results[0], s]
        and isinstance(branch.op, tile_ir.If)
        and branch.operands == lt.results
        and not branch.results
        and isinstance(barrier.op, tile_memory.Barrier)
        and isinstance(half.op, tile_compute.FloorDiv)
        and half.operands == [s, two.results[0]]
        and _constant(two.results[0], prod) == 2
        and body.terminator is not None
        and body.terminator.operands == half.results
    ):
        return None
    then, other = (r.block for r in branch.regions)
    if _ops(other):
        return None
    inner = _ops(then)
    lids = {lid.results[0]}
    if inner and isinstance(inner[0].op, tile_ir.LocalId):
        lids.add(inner[0].results[0])
        inner = inner[1:]
    if len(inner) != 5:
        return None
    dst, plus, src, load, update = inner
    buf = dst.operands[0]
    if not (_unit_view(dst) and dst.operands[1] in lids and isinstance(plus.op, tile_compute.Add)
            and len(plus.operands) == 2 and plus.operands[0] in lids and plus.operands[1] is s
            and _unit_view(src) and src.operands == [buf, plus.results[0]]
            and isinstance(load.op, tile_memory.Load) and load.operands == src.results
            and isinstance(update.op, tile_memory.Update) and update.op.op == "add"
            and update.operands == [dst.results[0], load.results[0]]
            and buf not in (*body.args, *then.args)):
        return None
    return buf, barrier


def _clean(mem: SharedMem, hi: int) -> bool:
    """Whether elements ``[0, hi)`` are written, no copy into the buffer is pending, and
    no tile touched it since the last barrier."""
    if mem.init is not None and not mem.init.arr[..., :hi].all():
        return False
    if mem.tag is not None and (mem.tag.arr >= 0).any():
        return False
    return not ((mem.wrote and mem.writer is not None and (mem.writer != -1).any())
                or (mem.read and mem.reader is not None and (mem.reader != -1).any()))


def tree_runner(c: Compiler, loop: Instr) -> Any:
    """The runner of a canonical tree loop (see the module docstring), or None when the
    loop is not one; the runner returns the final stride, or None when the state at run
    time rules the fast path out (the general loop then runs)."""
    found = _match(loop)
    if found is None:
        return None
    buf_value, barrier = found
    buf = c.slot(buf_value)
    loc = barrier.loc

    def run_tree(fr: Frame, stride: Any) -> Any:
        ref = fr.regs[buf]
        mem = getattr(ref, "mem", None)
        ctx, st = fr.ctx, fr.st
        if (not isinstance(mem, SharedMem) or len(mem.shape) != 1 or ctx.flat
                or mem.np_dtype != np.float32 or getattr(stride, "ndim", 0) or int(stride) <= 0
                or ref.sizes != mem.shape
                or any(getattr(x, "ndim", 0) or int(x) for x in ref.starts)):
            return None
        s, size, gs = int(stride), mem.shape[0], st.geom.group_size
        top = s + min(s, gs)  # the levels touch [0, top)
        if top > size or not _clean(mem, top):
            return None
        part = mem.data.expanded(ctx.group_shape)[..., :top]
        # the levels run on a transposed copy of the part they touch, buffer index
        # first, so that each adds two contiguous blocks rather than a short row of
        # every group (half the cost): the same float32 additions
        cols = part.T.copy()
        levels = 0
        while s > 0:
            a = min(s, gs)
            low = cols[:a]
            np.add(low, cols[s:s + a], out=low)
            s //= 2
            levels += 1
        part[...] = cols.T
        # each level's barrier: the first clears the entry state's shadows, the rest
        # find them clear (a level's accesses are exactly what its barrier forgets)
        sync.barrier(st, ctx, loc, times=levels)
        return np.int64(s)
    return run_tree


@register("tree_sum", tile_ir.While)
def tree_sum(c: Compiler, loop: Instr, reference: Step) -> Step | None:
    """Proof (the module docstring has the details): each level of the canonical tree
    adds ``buf[s:s + a]`` into ``buf[:a]`` with ``a = min(s, group_size)``, the float32
    additions the reference's branch makes element by element, and the two ranges are
    disjoint, so one slice add per level gives the same bits. The runner first checks
    everything the reference's sanitizers could report in the loop (reads past the
    buffer, unwritten elements, pending copies, accesses since the last barrier, a
    frame of partial groups); if any is possible it declines and the reference loop
    runs and reports. The levels' barriers are counted, so the launch state after the
    loop (epochs, copy groups, race shadows) is the reference's."""
    runner = tree_runner(c, loop)
    if runner is None:
        return None
    init, out = c.slot(loop.operands[0]), c.slot(loop.results[0])
    me = REGISTRY["tree_sum"]

    def step(fr: Frame) -> None:
        done = runner(fr, fr.regs[init])
        if done is None:
            return reference(fr)
        me.taken += 1
        fr.regs[out] = done
    return step


__all__ = ["tree_runner", "tree_sum"]
