"""The tile program a graph function's exact kernels take to PTX: matmul tiles that fit
the exact accumulators of the Target lowering.

The exact ``mma`` of PTX (:mod:`tessera.lower.exact.mma`) keeps one long accumulator of
176 bytes per output element in shared memory, which the schedule's tensor-core tiles
would exceed many times (a 64 x 128 tile needs 1.4 MB). :func:`exact_tiled` generates
the program again from the graph with tiles of at most :data:`EXACT_MMA_ELEMENTS`
elements (:func:`exact_tiles`: whole key rows for attention's scores, key blocks
beyond); the bits do not depend on the tiles (exact sums), so the tile simulator keeps
the schedule's program.
"""

from __future__ import annotations

from typing import Any

from tessera.arch.limits import A100
from tessera.ir.core import Function, Instr, Module, walk
from tessera.ir.transforms.to_tile.attention.keyblock_tiles import KEY_BLOCK_TILE, key_block_tile
from tessera.ir.transforms.to_tile.program import TileProgram
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the largest output tile of a matmul whose kernel has an exact mma, in PTX: 512
#: accumulators of 176 bytes each in shared memory (tessera.lower.exact.mma), four
#: output elements per thread
EXACT_MMA_TILE = (32, 16)
#: the most elements of an exact mma's output tile (EXACT_MMA_TILE's)
EXACT_MMA_ELEMENTS = EXACT_MMA_TILE[0] * EXACT_MMA_TILE[1]


def exact_tiles(body: Any, whole_rows: bool = True,
                shared: int = A100.shared_per_block) -> dict[Instr, tuple[int, int]]:
    """The output tile of each matmul without a ``tile_shape`` of its own, for the exact
    ``mma`` of PTX: at most :data:`EXACT_MMA_TILE`, shared out between matmuls of one
    operand (``h @ Wq``, ``h @ Wk``, ``h @ Wv`` fuse into one kernel), except for
    attention and row reductions. A matmul whose result reaches a softmax over its last
    axis (the scores) keeps whole key rows of up to :data:`EXACT_MMA_ELEMENTS` keys in
    one tile, with fewer query rows, where ``whole_rows``: the kernel is then one pass
    over the keys; so does one whose rows are reduced (a layernorm after it).
    Longer rows pass over key blocks, as long as ``shared`` (the target's shared memory
    per CTA, bytes) allows (:func:`key_block_tile`). The matmuls reading that softmax
    (``P @ V``) take the scores' rows."""
    from tessera.ir.core import uses
    from tessera.ir.dialects.graph.contraction import MatMul, Reduce, Softmax
    from tessera.ir.transforms.schedule.tile import pow2

    users = uses(body)
    matmuls = [i for i in walk(body) if isinstance(i.op, MatMul)]

    def reach(v: Any, want: Any) -> Instr | None:
        """The first instruction satisfying ``want`` among the users of ``v``, through
        elementwise ops that keep its shape (scale, bias, mask, cast, residual)."""
        seen, todo = set(), [v]
        while todo:
            for user in users.get(todo.pop(), []):
                if want(user):
                    return user
                if user not in seen and user.results and user.results[0].type == v.type \
                        and not isinstance(user.op, (MatMul, Softmax)):
                    seen.add(user)
                    todo.extend(user.results)
        return None

    tiles = {}
    sharing: dict[Any, int] = {}
    for mm in matmuls:
        sharing[mm.operands[0]] = sharing.get(mm.operands[0], 0) + 1
    for mm in matmuls:
        rows, cols = mm.results[0].type.shape[-2:]
        n = min(EXACT_MMA_TILE[1], pow2(cols))
        budget = EXACT_MMA_ELEMENTS // sharing[mm.operands[0]] // n
        tiles[mm] = (min(EXACT_MMA_TILE[0], pow2(rows), 1 << (max(budget, 1).bit_length() - 1)),
                     n)
    for mm in matmuls:
        rank = mm.results[0].type.rank
        rows, keys = (pow2(n) for n in mm.results[0].type.shape[-2:])
        sm = reach(mm.results[0], lambda i, last=rank - 1: isinstance(i.op, Softmax)
                   and i.op.axis % (last + 1) == last)
        if sm is None:
            # a row reduction of the result (a layernorm after an output projection)
            # also wants whole rows
            red = reach(mm.results[0], lambda i, last=rank - 1: isinstance(i.op, Reduce)
                        and {a % (last + 1) for a in i.op.axes} == {last})
            if red is not None and whole_rows and mm.op.tile_shape is None and \
                    EXACT_MMA_TILE[1] < keys <= EXACT_MMA_ELEMENTS:
                tiles[mm] = (min(rows, EXACT_MMA_ELEMENTS // keys), keys)
            continue
        pv = reach(sm.results[0], lambda i, p=sm.results[0].type: isinstance(i.op, MatMul)
                   and i.operands[0].type == p)
        if mm.op.tile_shape is not None:
            r = mm.op.tile_shape[0]
        elif keys <= EXACT_MMA_TILE[1]:
            r = tiles[mm][0]
        elif keys <= EXACT_MMA_ELEMENTS and whole_rows:
            r = min(rows, EXACT_MMA_ELEMENTS // keys)
            tiles[mm] = (r, keys)
        else:
            depth = mm.operands[0].type.shape[-1]
            values = pv.results[0].type.shape[-1] if pv else 0
            r, block, cols = key_block_tile(rows, keys, depth, values, shared)
            tiles[mm] = (r, block)
            if pv is not None:
                tiles[pv] = (r, cols)
                continue
        if pv is not None:
            tiles[pv] = (r, tiles[pv][1])
    return {mm: shape for mm, shape in tiles.items() if mm.op.tile_shape is None}


def exact_tiled(tile: TileProgram, graph: Function, target: str = "sm_80") -> TileProgram:
    """``tile``, or, when a kernel has an ``mma`` the lowering implements exactly
    (:func:`exact_in_ptx`), the program generated again from ``graph`` with the output
    tiles of :func:`exact_tiles` for the matmuls that have no ``tile_shape`` of their
    own: the exact accumulators live in shared memory (``target``'s), which the
    schedule's tiles for tensor-core kernels would exceed many times. The bits do not
    depend on the tiles (exact sums), so the tile simulator keeps its program. Where
    the whole-row tiles of attention conflict with another fused matmul's, every matmul
    takes the fewest rows; failing that, the scores take key-block tiles (the kernel
    then passes over key blocks)."""
    import dataclasses
    from math import prod

    from tessera.arch.limits import shared_limit
    from tessera.ir.core import clone_block
    from tessera.ir.dialects import schedule as schedule_ops
    from tessera.ir.dialects.tile.compute import Mma
    from tessera.ir.transforms.schedule import schedule_module
    from tessera.ir.transforms.to_tile import schedule_to_tile

    if graph.kind == schedule_ops.FUNC or not any(
            _per_thread(fn, target) for fn in tile.module.functions.values()):
        return tile

    def scheduled(whole_rows: bool, uniform: bool) -> Function:
        """``graph`` scheduled with these tiles (``TileShapeError`` where fused matmuls'
        tiles conflict)."""
        body = clone_block(graph.body, {})
        tiles = exact_tiles(body, whole_rows, shared_limit(target))
        rows = min((shape[0] for shape in tiles.values()), default=1)
        for instr, shape in tiles.items():
            instr.op = dataclasses.replace(instr.op, tile_shape=(rows, shape[1]) if uniform
                                           else shape)
        fn = Function(graph.name, body, list(graph.result_types), graph.kind,
                      dict(graph.attrs), graph.loc)  # (its errors name the user's line)
        return schedule_module(Module(tile.name, {fn.name: fn})).functions[fn.name]

    def generated(whole_rows: bool, uniform: bool) -> TileProgram | None:
        """The program with these tiles, or None where fused matmuls' tiles conflict
        or an ``mma`` tile outgrows the exact accumulators (a row loop the schedule
        keeps whole, for a reduction after the matmul)."""
        try:
            fn = scheduled(whole_rows, uniform)
        except schedule_ops.TileShapeError:
            return None
        program = schedule_to_tile(fn)
        fits = all(prod(i.results[0].type.shape) <= EXACT_MMA_ELEMENTS  # type: ignore[attr-defined]
                   for k in program.module.functions.values() for i in walk(k.body)
                   if isinstance(i.op, Mma))
        return program if fits else None

    # whole key rows, then key blocks; each with each matmul's rows, then the fewest
    # rows any of them takes, everywhere (fused matmuls then agree on their row loop)
    for whole_rows, uniform in ((True, False), (True, True), (False, False), (False, True)):
        found = generated(whole_rows, uniform)
        if found is not None:
            program = found
            break
    else:  # key blocks as they are: the errors raised here are the user's
        program = schedule_to_tile(scheduled(False, False))
    for kernel in program.module.functions.values():  # a new program: the simulator's
        for instr in walk(kernel.body):               # stays as it was generated
            if isinstance(instr.op, Mma) and not instr.op.exact and exact_in_ptx(instr):
                instr.op = dataclasses.replace(instr.op, exact=True)
    return program


def _per_thread(fn: Function, target: str) -> bool:
    """Whether the lowering for ``target`` sums some ``mma`` of ``fn`` per output element
    in a thread: an exact one, or integer ones that do not take the tensor cores
    (:func:`tessera.lower.sm80.intmma.why_per_thread`: kernels whose byte sums provably
    fit s32 and whose tiles and operand layouts are the tensor cores' keep theirs)."""
    from tessera.lower.sm80.intmma import integer_tensor_cores

    body = list(walk(fn.body))
    return any(map(exact_in_ptx, body)) or (any(map(summed_per_thread, body))
                                            and not integer_tensor_cores(fn, target))


def summed_per_thread(instr: Instr) -> bool:
    """Whether the lowering sums this ``mma``'s products per output element in each
    thread's registers (integer operands: exact int64 sums, no tensor cores), whose
    accumulators the exact tiles keep few per thread."""
    from tessera.ir.dialects.tile.compute import Mma

    if not isinstance(instr.op, Mma):
        return False
    a = instr.operands[0].type
    assert isinstance(a, TensorType)
    return storage_of(a.element).kind == "int"


def exact_in_ptx(instr: Instr) -> bool:
    """Whether the lowering implements this ``mma`` with the exact accumulator: an exact
    one, or a checked float one (fp8_e4m3 and narrower: its float64 sums are exact, or it
    would not be a checked ``mma``, so the exact one computes the same bits; tensor
    cores, whose f32 accumulation truncates, would not: a sum of e4m3 products spans
    about 54 bits)."""
    from tessera.ir.dialects.tile.compute import Mma

    if not isinstance(instr.op, Mma):
        return False
    if instr.op.exact:
        return True
    a = instr.operands[0].type
    assert isinstance(a, TensorType)
    return storage_of(a.element).kind == "float"


__all__ = ["EXACT_MMA_ELEMENTS", "EXACT_MMA_TILE", "KEY_BLOCK_TILE", "exact_in_ptx",
           "exact_tiled", "exact_tiles", "summed_per_thread"]
