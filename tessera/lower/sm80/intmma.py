"""When the integer ``mma`` of a block kernel may run on tensor cores.

The tile level defines ``tile.mma`` of byte integers as the int64 sum ``c + a @ b``,
saturated once to int32 (:mod:`tessera.interp.tile`). A tensor core (``mma.sync``
m16n8k32 ``.s32.s8.s8.s32``, ``wgmma`` ``.s32.s8.s8``) adds each instruction's 32
products to an ``s32`` accumulator that keeps the low 32 bits of every sum (PTX ISA
sec. 9.7.14.5.14; ``.satfinite`` clamps each partial sum instead, which differs from
one clamp at the end whenever a partial sum leaves the range and the total comes back).
The two agree whenever no partial sum can leave ``[-2^31, 2^31)``: then neither wraps
nor saturates, and both are the exact sum.

That is proved here for a whole kernel, statically: every integer ``mma`` starts its
accumulator from a zero tile (``tile.zeros``, no ``c``) or from the result of another
one, possibly carried through ``tile.for`` loops of constant trip counts, so every
accumulator value is a sum of distinct products of the kernel's mma executions; their
count, ``sum(K * trips)``, times the largest product magnitude (``128 * 128`` for
``s8``, ``255 * 255`` for ``u8``) stays below ``2^31``. The operands must also be in
the tensor cores' layouts: A a row-major shared tile, B the transpose of a shared tile
(an ``N x K`` buffer, K contiguous: 8-bit fragments are K-major, PTX ISA sec.
9.7.14.5.10 and 9.7.15.5.1, and ``ldmatrix.trans`` moves 16-bit elements only), M a
multiple of 64, N of 8 (of 16 above 32 on sm_90a) and K of 32, and the kernel holds
no exact float ``mma`` (those sum per thread, with no tensor-core buffers). Kernels
that fail any of it keep the per-thread sums of :mod:`tessera.lower.exact.intmma`,
exact for every K; :func:`why_per_thread` says which condition failed. Generated
int8 matmuls are made in these tiles and layouts
(:mod:`tessera.ir.transforms.to_tile.int_tiles`).
"""

from __future__ import annotations

from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.core import walk as walk_all
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.lower.layout import is_integer_mma
from tessera.numerics import storage_of

#: the largest magnitude of one product of two elements of these formats
_TOP_PRODUCT = {("int8", "int8"): 128 * 128, ("uint8", "uint8"): 255 * 255,
                ("int8", "uint8"): 128 * 255, ("uint8", "int8"): 255 * 128}
#: the accumulator range the tensor cores' sums must stay inside
LIMIT = 2**31


def _element(v: Value) -> str:
    assert isinstance(v.type, TensorType)
    return storage_of(v.type.element).np_dtype.name


def _defining(v: Value) -> Instr | None:
    return v.owner if isinstance(v.owner, Instr) else None


def _shared_load(v: Value) -> bool:
    """Whether ``v`` is ``tile.load`` of a shared tile."""
    d = _defining(v)
    if d is None or not isinstance(d.op, tile_memory.Load):
        return False
    return getattr(d.operands[0].type, "space", None) == "shared"


def _misfit(instr: Instr, target: str) -> str:
    """Why the operand layouts or tile shape of ``instr`` are not the ones the
    tensor-core lowering takes ('' when they are)."""
    a, b = instr.operands[0], instr.operands[1]
    if (_element(a), _element(b)) not in _TOP_PRODUCT or _element(a) != _element(b):
        return f"operands of {_element(a)} x {_element(b)}, not one byte format"
    db = _defining(b)
    if not _shared_load(a) or db is None or not isinstance(db.op, tile_compute.Transpose) \
            or not _shared_load(db.operands[0]):
        return "A is not a row-major shared tile or B not the transpose of one (K-major)"
    (m, k), n = a.type.shape, b.type.shape[1]  # type: ignore[attr-defined]
    if m % 64 or n % 8 or k % 32:
        return f"a {m} x {n} x {k} tile (M a multiple of 64, N of 8, K of 32)"
    if target == "sm_90a" and not (n <= 256 and (n <= 32 or n % 16 == 0)):
        return f"N = {n} (wgmma: at most 256, a multiple of 16 above 32)"
    return ""


def why_per_thread(fn: Function, target: str) -> str:
    """Why the integer ``mma`` of ``fn`` sum their products per thread on ``target``
    rather than on tensor cores (module docstring): all of them take tensor cores or
    none does (their accumulators would otherwise share a layout); '' when they do, or
    when ``fn`` has none."""
    mmas: list[tuple[Instr, int | None]] = []
    carried: dict[Value, tuple[Value, Value]] = {}  # loop block arg -> (init, yielded)

    def walk(block: Block, trips: int | None) -> None:
        for instr in block.instrs:
            if isinstance(instr.op, tile_compute.Mma) and is_integer_mma(instr):
                mmas.append((instr, trips))
            inner = None if isinstance(instr.op, tile_ir.While) else trips
            if isinstance(instr.op, tile_ir.For):
                count = tile_ir.constant_trips(instr)
                inner = None if trips is None or count is None else trips * count
                body = instr.regions[0].block
                yielded = body.instrs[-1].operands
                for arg, init, out in zip(body.args[1:], instr.operands[3:], yielded):
                    carried[arg] = (init, out)
            for region in instr.regions:
                for blk in region.blocks:
                    walk(blk, inner)

    walk(fn.body, 1)
    if not mmas:
        return ""
    if any(t is None for _, t in mmas):
        return "an integer mma in a loop without a constant trip count"
    for i, _ in mmas:
        if why := _misfit(i, target):
            return why
    # exact float mmas sum per thread, and the kernel then has no tensor-core buffers
    if any(isinstance(i.op, tile_compute.Mma) and i.op.exact for i in walk_all(fn.body)):
        return "the kernel has an exact float mma (per-thread sums)"
    results = {i.results[0] for i, _ in mmas}
    budget = sum(i.operands[0].type.shape[1] * t  # type: ignore[attr-defined,operator]
                 * _TOP_PRODUCT[_element(i.operands[0]), _element(i.operands[1])]
                 for i, t in mmas)
    if budget >= LIMIT:
        return f"sums of up to {budget} may leave s32 (2^31)"
    if not all(len(i.operands) == 2 or _from_zero_or_mma(i.operands[2], results, carried,
                                                            set()) for i, _ in mmas):
        return "an accumulator that does not start from zeros (its sums are not bounded)"
    return ""


def integer_tensor_cores(fn: Function, target: str) -> bool:
    """Whether ``fn`` has integer ``mma`` and they all run on tensor cores
    (:func:`why_per_thread` gives the reason when they do not)."""
    return any(isinstance(i.op, tile_compute.Mma) and is_integer_mma(i)
               for i in walk_all(fn.body)) and not why_per_thread(fn, target)


def _from_zero_or_mma(v: Value, results: set[Value], carried: dict[Value, tuple[Value, Value]],
                      seen: set[Value]) -> bool:
    """Whether ``v`` is a zero tile, an integer mma's result, or a loop-carried value
    whose initial and yielded values are (a carried value seen again adds nothing)."""
    if v in results or v in seen:
        return True
    d = _defining(v)
    if d is not None and isinstance(d.op, tile_compute.Full):
        return d.op.value == 0
    if v in carried:
        seen.add(v)
        init, out = carried[v]
        return _from_zero_or_mma(init, results, carried, seen) and \
            _from_zero_or_mma(out, results, carried, seen)
    return False


__all__ = ["LIMIT", "integer_tensor_cores", "why_per_thread"]
