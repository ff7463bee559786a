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
from tessera.ir.transforms.to_tile.program import TileProgram
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the largest output tile of a matmul whose kernel has an exact mma, in PTX: 512
#: accumulators of 176 bytes each in shared memory (tessera.lower.exact.mma), four
#: output elements per thread
EXACT_MMA_TILE = (32, 16)
#: the most elements of an exact mma's output tile (EXACT_MMA_TILE's)
EXACT_MMA_ELEMENTS = EXACT_MMA_TILE[0] * EXACT_MMA_TILE[1]
#: the scores' tile of attention over more keys than EXACT_MMA_ELEMENTS: at most this
#: many query rows, and at least this many keys per block (key_block_tile takes as many
#: more as the target's shared memory holds)
KEY_BLOCK_TILE = (8, 16)
#: the most scores of a key block: two accumulators per thread. ptxas fits the three
#: passes' code in 90-111 registers; four per thread (EXACT_MMA_ELEMENTS) need about
#: 150-170 and spill under the exact kernels' .maxnreg of 128, for no measured gain
KEY_BLOCK_ELEMENTS = 256
#: the most elements of a block of keys or values (block x their row length) the
#: kernel loads into registers before staging them for an ``mma``: 16 per thread. With
#: 32 per thread (64 keys of 64, a ragged last block) ptxas spills under the .maxnreg
#: of 128
KEY_BLOCK_LOADED = 2048
#: bytes of one exact accumulator (tessera.lower.exact.mma: 21 words and a flag word)
ACC_ELEMENT_BYTES = 176
#: shared bytes per query row of a key-block kernel besides its accumulators and
#: staged tiles: the carried row statistics staged per block and the exact sums'
#: accumulators (a bound on what tessera.lower allocates)
ROW_BYTES = 512


def key_block_bytes(rows: int, block: int, depth: int, pv_cols: int) -> int:
    """A bound on the shared memory of a kernel passing over key blocks of ``rows`` x
    ``block`` scores, of ``depth`` (Q's and K's last dim) and a ``P @ V`` tile of
    ``pv_cols`` columns (0: a row softmax): the accumulators of one score chain (the
    three passes' share a buffer) and of ``P @ V``, the block of keys staged for
    ``Q K^T`` (one buffer for the three passes), the block's f64 terms and ``P``,
    each pass's query tile, and the rows' statistics."""
    return (ACC_ELEMENT_BYTES * rows * (block + pv_cols) + 4 * block * depth
            + 16 * rows * block + 3 * 4 * rows * depth + ROW_BYTES * rows)


def key_block_tile(rows: int, keys: int, depth: int, pv_cols: int, shared: int,
                   values: int = 0) -> tuple[int, int]:
    """The scores' tile of attention (or a row softmax of a matmul) passing over key
    blocks: up to ``KEY_BLOCK_TILE[0]`` query rows, and the longest power-of-two block
    of keys (at most ``keys`` rounded up, at least ``KEY_BLOCK_TILE[1]``) that fits the
    registers and ``shared`` bytes of shared memory: at most :data:`KEY_BLOCK_ELEMENTS`
    scores (two accumulators per thread) and :data:`KEY_BLOCK_LOADED` elements of keys
    or values (rows of ``depth`` and ``values``), and :func:`key_block_bytes` within
    ``shared``. Longer blocks mean fewer trips of each pass and more threads busy (16
    keys under 8 rows keep a quarter of the CTA's threads working)."""
    from tessera.ir.transforms.schedule.tile import pow2

    r = min(pow2(rows), KEY_BLOCK_TILE[0])
    loaded = KEY_BLOCK_LOADED // pow2(max(depth, values))
    block = max(min(KEY_BLOCK_ELEMENTS // r, loaded, pow2(keys)), KEY_BLOCK_TILE[1])
    while block > KEY_BLOCK_TILE[1] and key_block_bytes(r, block, depth, pv_cols) > shared:
        block //= 2
    return r, block


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
            pv_cols, values = (tiles[pv][1], pv.results[0].type.shape[-1]) if pv else (0, 0)
            tiles[mm] = key_block_tile(rows, keys, depth, pv_cols, shared, values)
            r = tiles[mm][0]
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
            exact_in_ptx(i) for fn in tile.module.functions.values() for i in walk(fn.body)):
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


def exact_in_ptx(instr: Instr) -> bool:
    """Whether the lowering implements this ``mma`` with the exact accumulator: an exact
    one, or a float one whose tile has no tensor-core layout (its float64 sums are exact,
    or it would not be a checked ``mma``: the exact one computes the same bits)."""
    from tessera.ir.dialects.tile.compute import Mma

    if not isinstance(instr.op, Mma):
        return False
    if instr.op.exact:
        return True
    a, t = instr.operands[0].type, instr.results[0].type
    assert isinstance(a, TensorType) and isinstance(t, TensorType)
    return storage_of(a.element).kind == "float" and (
        t.rank != 2 or t.shape[0] % 64 != 0 or t.shape[1] % 8 != 0)


__all__ = ["ACC_ELEMENT_BYTES", "EXACT_MMA_ELEMENTS", "EXACT_MMA_TILE", "KEY_BLOCK_ELEMENTS",
           "KEY_BLOCK_LOADED", "KEY_BLOCK_TILE", "exact_in_ptx", "exact_tiled", "exact_tiles",
           "key_block_bytes", "key_block_tile"]
