"""The exact ``mma`` (``tile.mma {exact = true}``): one long accumulator per output
element, carried through the K loop in shared memory, rounded once where it is used.

The tile level defines the result as the exact ``c + a @ b``, held exactly through
further exact ``mma`` accumulation and loop-carried values and rounded once, to
nearest even, to the accumulator format when any other op uses it
(:mod:`tessera.interp.tile.numeric`). In PTX:

* **Accumulators.** The values an exact accumulator flows through
  (:func:`tessera.interp.tile.wide.possibly_exact`: the ``mma`` results and the loop
  slots they reach) form chains; each chain gets a buffer in shared memory
  (:mod:`tessera.lower.exact.accplan`), one accumulator of :data:`MMA_DIGITS` u64
  words and a flag word per output element, zeroed at kernel entry. Chains whose live
  ranges do not overlap share a buffer (:mod:`tessera.lower.exact.chains`: the score
  accumulators of the three passes over key blocks take one), which is zeroed again,
  between barriers, where the next chain starts. A chain must start from zeros
  (``tile.full`` 0), as the generated K loops do; an ``mma`` from zeros inside a loop
  body (the scores of each key block of attention) clears its accumulators first, each
  thread its own. The output tile is held in the blocked layout
  (:mod:`tessera.lower.layout`; a tile one column wide that the layouts hold as row
  statistics has the same registers, :func:`~tessera.lower.layout.as_blocked`): the
  thread that holds element ``k`` owns its accumulator, so deposits need no atomics
  and no barrier, and the registers the chain's values carry through loops are
  placeholders.
* **Products.** No tensor cores (their accumulation truncates): each thread loops
  over K, reads ``a[i, k]`` and ``b[k, j]`` of its elements from the operand views
  (shared or global; an operand computed in the kernel, a register tile such as the
  softmax's ``P`` of ``P @ V``, is first staged into an f32 shared buffer behind
  barriers, :mod:`tessera.lower.rules.stage`, which counts with the accumulators
  against the target's shared memory), widens them to f64 and multiplies there —
  exact for two values of at most 24 significant bits, and ``inf * 0`` is NaN as the
  definition wants — and deposits the 53-bit product into three words at its quantum position.
* **Width.** Products of two f32 (or bf16, tf32, f16, fp8) values are multiples of
  ``2**-298`` below ``2**256``; the quantum is ``2**-362`` (64 bits below, so that the
  f64 significand's last bit, down to ``2**-350``, is never below word 0), words up to
  19 take the products and word 20 the growth of up to ``2**54`` terms.
* **Rounding** (:func:`tessera.lower.exact.longacc.round_words_at`) happens at each use
  of a chain's value by another op, by the threads that hold the elements.
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import THREADS, Lowerer, exact_rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import (
    NAN_BIT,
    NINF_BIT,
    PINF_BIT,
    round_words_at,
    to_format,
)
from tessera.lower.layout import Blocked, as_blocked
from tessera.lower.rules.memory import address
from tessera.lower.rules.tensor import chunk_index, widen
from tessera.lower.values import Dist, Lowered, Mem, mem_type, reg_type

#: words of an exact mma accumulator and the quantum (2**-MMA_QUANTUM) they count
MMA_DIGITS = 21
MMA_QUANTUM = 362
#: shared bytes the accumulators of one kernel may take (512 elements: 90,112 bytes),
#: which leaves room for the staged operands within sm_80's 163 KiB per CTA
ACC_BYTES = 96 * 1024
#: ``.maxnreg`` of kernels that accumulate exactly: without it ptxas (13.x, sm_90a)
#: settles on 56-64 registers and spills a few bytes; 128 per thread leaves a 128-thread
#: CTA's occupancy unchanged
EXACT_MAXNREG = 128
#: f64 biased exponent whose significand's last bit is the quantum: 1075 - 362
_BASE_EXP = 1075 - MMA_QUANTUM


def _in_loop(low: Lowerer, instr: Instr) -> bool:
    """Whether ``instr`` lies in the body of a ``tile.for`` or ``tile.while``."""
    key = "exact_in_loops"
    if key not in low.extra:
        inside: set[int] = set()
        for loop in walk(low.fn.body):
            if isinstance(loop.op, (tile_ir.For, tile_ir.While)):
                inside |= {id(i) for region in loop.regions for i in walk(region.block)}
        low.extra[key] = inside
    return id(instr) in low.extra[key]


def _element_addr(e: TargetEmitter, base: Value, layout: Blocked, r: int) -> Value:
    """The address of the accumulator of register ``r``'s element (the last element for
    a register past the end)."""
    j, c = divmod(r, layout.vec)
    k = chunk_index(e, layout, j)
    k = e.add(k, e.const(c, "s32"), "s32") if c else k
    k = e.bin("min", k, e.const(layout.chunks * layout.vec - 1, "s32"), "s32")
    off = e.mul(k, e.const(8 * (MMA_DIGITS + 1), "s32"), "s32")
    return e.add(base, e.cvt(off, "u32", "s32"), "u32")


def round_mma(low: Lowerer, v: Value, base: Value, f64: bool = False) -> Dist:
    """The thread's registers of the exact chain value ``v`` (accumulators at ``base``;
    ``f64``: each an exact f64, :mod:`tessera.lower.exact.f64acc`), each rounded once:
    one ``ptx.for`` over the registers whose body rounds the register's accumulator and
    selects the result into the register of that index (a rounding is over a hundred
    instructions; a thread holds several registers)."""
    e = low.em
    layout = as_blocked(low.layouts[v])
    assert layout is not None and isinstance(v.type, TensorType)
    element = v.type.element
    s32, f32, vec = "s32", "f32", layout.vec
    size = layout.chunks * vec
    first = chunk_index(e, layout, 0)
    # registers past the end exist where the chunks do not fill the last row of threads
    ragged = layout.per_thread * THREADS > layout.chunks

    def rounded(inner: TargetEmitter, k: Value) -> list[Value]:
        k = inner.bin("min", k, inner.const(size - 1, s32), s32)
        off = inner.mul(k, inner.const(8 * (MMA_DIGITS + 1), s32), s32)
        addr = inner.add(base, inner.cvt(off, "u32", s32), "u32")
        if f64:  # a NaN is the default NaN, as the long accumulators' flags give it
            total = inner.ld("shared", addr, "f64")
            total = inner.selp(total, inner.const(float("nan"), "f64"),
                               inner.setp("num", total, total, "f64"), "f64")
            return [to_format(inner, total, element)]
        flags = inner.ld("shared", addr, "u32", offset=8 * MMA_DIGITS)
        odd = round_words_at(inner, MMA_DIGITS, "shared", addr, flags, MMA_QUANTUM)
        return [to_format(inner, odd, element)]

    def body(le: TargetEmitter, r: Value, *regs: Value) -> list[Value]:
        # register r is element c of chunk j: flat index (tid + 128 j) vec + c
        j, c = r, None
        if vec > 1:
            j = le.bin("div", r, le.const(vec, s32), s32)
            c = le.bin("rem", r, le.const(vec, s32), s32)
        k0 = le.add(first, le.mul(j, le.const(THREADS * vec, s32), s32), s32)
        k = le.add(k0, c, s32) if c is not None else k0
        if ragged:  # the accumulator a register past the end would name is another's
            (value,) = le.if_(le.setp("lt", k0, le.const(size, s32), s32),
                              lambda inner: rounded(inner, k),
                              lambda inner: [inner.const(0.0, f32)], types=[RegType(f32)])
        else:
            (value,) = rounded(le, k)
        return [le.selp(value, reg, le.setp("eq", r, le.const(i, s32), s32), f32)
                for i, reg in enumerate(regs)]

    n = layout.per_thread * vec
    regs = e.for_(e.const(0, s32), e.const(n, s32), e.const(1, s32),
                  [e.const(0.0, f32)] * n, body)
    return Dist(low.layouts[v], regs, f32)  # a BRow of one-element rows: the same registers


def deposit_f64(e: TargetEmitter, acc: Value, p: Value) -> None:
    """Add the f64 ``p`` (a product of two narrow floats: a multiple of 2**-298 below
    2**256, or non-finite) to the accumulator at ``acc`` that this thread owns."""
    u32, u64 = "u32", "u64"
    bits = e.pack([p], u64)
    ex = e.cvt(e.bin("and", e.bin("shr", bits, e.const(52, u32), u64), e.const(0x7FF, u64),
                     u64), u32, u64)
    frac = e.bin("and", bits, e.const((1 << 52) - 1, u64), u64)
    man = e.selp(e.bin("or", frac, e.const(1 << 52, u64), u64), frac,
                 e.setp("ne", ex, e.const(0, u32), u32), u64)
    finite = e.setp("ne", ex, e.const(0x7FF, u32), u32)
    man = e.selp(man, e.const(0, u64), finite, u64)
    # the position of the significand's last bit (a zero sits at 0)
    pos = e.bin("sub", e.bin("max", ex, e.const(_BASE_EXP, u32), u32),
                e.const(_BASE_EXP, u32), u32)
    pos = e.selp(pos, e.const(0, u32), finite, u32)
    s = e.bin("and", pos, e.const(31, u32), u32)
    low64 = e.bin("shl", man, s, u64)
    high = e.bin("shr", man, e.bin("sub", e.const(64, u32), s, u32), u64)
    pieces = [e.bin("and", low64, e.const(0xFFFFFFFF, u64), u64),
              e.bin("shr", low64, e.const(32, u32), u64), high]
    neg = e.setp("ne", e.bin("shr", bits, e.const(63, u32), u64), e.const(0, u64), u64)
    word = e.add(acc, e.mul(e.bin("shr", pos, e.const(5, u32), u32), e.const(8, u32), u32),
                 u32)
    for i, piece in enumerate(pieces):
        old = e.ld("shared", word, u64, offset=8 * i)
        new = e.selp(e.bin("sub", old, piece, u64), e.add(old, piece, u64), neg, u64)
        e.st("shared", word, new, u64, offset=8 * i)
    inf = e.selp(e.const(NINF_BIT, u32), e.const(PINF_BIT, u32), neg, u32)
    special = e.selp(e.const(NAN_BIT, u32), inf,
                     e.setp("ne", frac, e.const(0, u64), u64), u32)
    flag = e.selp(e.const(0, u32), special, finite, u32)
    old = e.ld("shared", acc, u32, offset=8 * MMA_DIGITS)
    e.st("shared", acc, e.bin("or", old, flag, u32), u32, offset=8 * MMA_DIGITS)


def _staged(low: Lowerer, instr: Instr, x: Lowered) -> Lowered:
    """An operand computed in the kernel (a register tile) staged through shared memory
    (:mod:`tessera.lower.rules.stage`), within the target's shared memory together with
    the accumulators; memory views pass."""
    if not isinstance(x, Dist):
        return x
    from tessera.arch.limits import shared_limit
    from tessera.lower.rules.stage import stage

    mem = stage(low, x, instr)
    acc = low.extra["exact_acc_bytes"]
    staged, limit = low.extra["staged_bytes"], shared_limit(low.target)
    if acc + staged > limit:
        raise UnsupportedError(
            f"tile.mma (exact) needs {acc:,} bytes of accumulators and {staged:,} bytes of "
            f"staged register operands in shared memory, more than {low.target}'s {limit:,}",
            hint="use smaller tiles (tile_shape=(32, 16, ...))", loc=instr.loc)
    return mem


def _operand(e: TargetEmitter, mem: Mem, i: Value, k: Value) -> Value:
    """Element ``[i, k]`` of a 2-D operand view, as f64 (exact)."""
    off = e.add(e.mul(i, e.const(mem.strides[0], "s32"), "s32"),
                e.mul(k, e.const(mem.strides[1], "s32"), "s32"), "s32")
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    raw = e.ld(mem.space, address(e, mem, off), mt)
    x = raw if mt == rt else widen(e, raw, mt, mem.element)
    if rt != "f32":
        raise UnsupportedError(f"exact mma operands of {mem.element} are not lowered",
                               loc=e.loc, hint="use f32, tf32, bf16 or f16 operands")
    return e.cvt(x, "f64", "f32")


@exact_rule(tile_compute.Mma)
def _exact_mma(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    a, b = (_staged(low, instr, x) for x in args[:2])
    if not (isinstance(a, Mem) and isinstance(b, Mem) and len(a.shape) == 2 and
            len(b.shape) == 2):
        raise UnsupportedError("exact mma operands must be 2-D memory tiles (loads of "
                               "shared or global views)", loc=instr.loc)
    members, bufs, _ = low.extra["exact_chains"]
    res = instr.results[0]
    layout = as_blocked(low.layouts[res])
    assert layout is not None
    base = bufs[members[res]]
    f64 = members[res] in low.extra["exact_f64"]
    e = low.em
    n_cols, kdim = layout.shape[1], a.shape[1]

    # per register: its row, column and accumulator, and whether it is inside the tile
    where = []
    for r in range(layout.per_thread * layout.vec):
        j, c = divmod(r, layout.vec)
        k0 = chunk_index(e, layout, j)
        flat = e.add(k0, e.const(c, "s32"), "s32") if c else k0
        inside = None if (j + 1) * THREADS <= layout.chunks else e.setp(
            "lt", k0, e.const(layout.chunks * layout.vec, "s32"), "s32")
        where.append((e.bin("div", flat, e.const(n_cols, "s32"), "s32"),
                      e.bin("rem", flat, e.const(n_cols, "s32"), "s32"),
                      _element_addr(e, base, layout, r), inside))

    fresh = len(instr.operands) < 3 or instr.operands[2] not in low.extra["exact_chains"][2]
    if fresh and _in_loop(low, instr):
        # a chain that starts from zeros again on every trip of a loop (the scores of
        # each key block): each thread clears the accumulators of its own elements
        zero = e.const(0, "u64")
        for _, _, acc, inside in where:
            def clear(inner: TargetEmitter, acc: Value = acc) -> None:
                for w in range(MMA_DIGITS + 1):
                    inner.st("shared", acc, zero, "u64", offset=8 * w)
            if inside is None:
                clear(e)
            else:
                e.if_(inside, clear)

    def body(le: TargetEmitter, kk: Value) -> None:
        # one K loop for all of the thread's elements: a chunk's elements share a row
        rows: dict[int, Value] = {}
        for r, (row, col, acc, inside) in enumerate(where):
            def product(inner: TargetEmitter, row: Value = row, col: Value = col,
                        acc: Value = acc, j: int = r // layout.vec) -> None:
                x = rows.get(j) if inner is le else None
                if x is None:
                    x = _operand(inner, a, row, kk)
                    if inner is le:
                        rows[j] = x
                y = _operand(inner, b, kk, col)
                if f64:  # exact in f64 (f64acc): fma.rn.f64 onto the element's f64
                    old = inner.ld("shared", acc, "f64")
                    inner.st("shared", acc, inner.fma(x, y, old, "f64"), "f64")
                else:
                    deposit_f64(inner, acc, inner.mul(x, y, "f64"))
            if inside is None:
                product(le)
            else:
                le.if_(inside, product)

    e.for_(e.const(0, "s32"), e.const(kdim, "s32"), e.const(1, "s32"), [], body)
    if len(args) == 3 and isinstance(args[2], Dist):
        return [args[2]]  # the placeholder registers the chain carries
    return [Dist(low.layouts[res], [e.const(0.0, "f32")] * (layout.per_thread * layout.vec),
                 "f32")]


__all__ = ["ACC_BYTES", "EXACT_MAXNREG", "MMA_DIGITS", "MMA_QUANTUM", "deposit_f64",
           "round_mma"]
