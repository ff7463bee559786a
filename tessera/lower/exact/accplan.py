"""The shared-memory accumulators of a kernel's exact chains, and the rounding at their
uses.

An exact accumulator (an exact ``mma``'s, :mod:`tessera.lower.exact.mma`, or a carried
exact sum's, :mod:`tessera.lower.exact.carried`) is held in shared memory for the
whole of its chain (:mod:`tessera.lower.exact.chains`); the registers its values carry
through loops are placeholders. :func:`plan_exact` gives each chain a buffer, zeroed
at kernel entry (chains whose live ranges do not overlap share one, zeroed again
between barriers where the next chain starts), of the chain's kind:

* an ``mma`` chain: one accumulator of :data:`~tessera.lower.exact.mma.MMA_DIGITS`
  words and a flag word per output element of a 2-D blocked tile, owned by the thread
  that holds the element;
* a carried-sum chain: one :class:`~tessera.lower.exact.longacc.SharedAcc` row per
  result element, every thread depositing into it with atomics
  (:data:`~tessera.lower.exact.longacc.SUM_DIGITS` words of ``2**-149`` for terms of
  f32 or narrower formats, :data:`~tessera.lower.exact.sum64.MSE_DIGITS` words of
  ``2**-294`` for a mean squared error's f64 terms), then a slot per element for the
  rounded results.

:func:`exact_operands` rounds a chain's value once, to its element, wherever an op
other than one that continues the chain (a loop, a branch, an ``mma``'s accumulator
operand, a carried reduce's) uses it.
"""

from __future__ import annotations

from math import prod
from typing import Any

from tessera.errors import UnsupportedError
from tessera.interp.tile.wide import possibly_exact
from tessera.ir.core import Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer
from tessera.lower.exact.chains import carried_operand, chains, is_zero, live_ranges, share
from tessera.lower.exact.longacc import zero_shared
from tessera.lower.exact.mma import ACC_BYTES, EXACT_MAXNREG, MMA_DIGITS, round_mma
from tessera.lower.layout import as_blocked
from tessera.lower.values import Lowered


def _check_mma_sizes(low: Lowerer) -> None:
    """Accumulators that cannot fit: blame the ``mma``."""
    for instr in walk(low.fn.body):
        t = instr.results[0].type if instr.results else None
        if isinstance(instr.op, tile_compute.Mma) and instr.op.exact and \
                isinstance(t, TensorType) and prod(t.shape) * 8 * (MMA_DIGITS + 1) > ACC_BYTES:
            raise UnsupportedError(
                f"tile.mma (exact) of a {'x'.join(map(str, t.shape))} tile needs "
                f"{prod(t.shape) * 8 * (MMA_DIGITS + 1):,} bytes of accumulators in shared "
                f"memory ({8 * (MMA_DIGITS + 1)} per element), more than {ACC_BYTES:,}",
                hint=f"use output tiles of at most {ACC_BYTES // (8 * (MMA_DIGITS + 1))} "
                     "elements (tile_shape=(32, 16, ...))", loc=instr.loc)


def _chain_size(low: Lowerer, root: Value, carried: dict[Value, Any]) -> int:
    """Bytes of the buffer of the chain ``root``."""
    t = root.type
    if root in carried:
        from tessera.lower.exact.carried import buffer_bytes

        return buffer_bytes(carried[root], t)  # type: ignore[arg-type]
    layout = as_blocked(low.layouts.get(root))
    if layout is None or not isinstance(t, TensorType) or t.rank != 2:
        raise UnsupportedError("an exact mma accumulator must be a 2-D blocked tile",
                               loc=low.fn.loc)
    return 8 * prod(t.shape) * (MMA_DIGITS + 1)


def plan_exact(low: Lowerer) -> bool:
    """Give each exact chain of the kernel its buffer, zeroed in the entry block
    (chains whose live ranges do not overlap share one: :mod:`tessera.lower.exact.chains`);
    whether the kernel has an ``mma`` chain (its products are then a thread's loop,
    not tensor cores)."""
    members = chains(low.fn)
    if not members:
        return False
    exact = possibly_exact(low.fn)
    _check_mma_sizes(low)
    from tessera.lower.exact.carried import chain_grids, keep_flattened_terms

    carried = chain_grids(low.fn, members)  # the carried-sum chains' accumulators
    keep_flattened_terms(low)
    sizes: dict[Value, int] = {}
    for v, root in members.items():
        owner = v.owner
        if v not in exact and not is_zero(v):
            raise UnsupportedError(
                "an exact accumulation into a tile other than zeros is not lowered",
                hint="start the accumulator from zeros", loc=getattr(owner, "loc", low.fn.loc))
        if root not in sizes and v in exact:  # zeros: the buffer starts zeroed
            sizes[root] = _chain_size(low, root, carried)
    ranges = live_ranges(low.fn, members, exact)
    bufs: dict[Value, Any] = {}
    # the top-level instruction before which a chain that reuses a buffer starts: it
    # finds the words of the chain before it there, which it zeroes
    resets: dict[int, list[tuple[Value, int]]] = {}
    slots = share(ranges, sizes)
    for slot in slots:
        base = low.shared_buffer("xmma", slot.size, 8, entry=True)
        zero_shared(low.e, base, slot.size // 8)
        for n, root in enumerate(slot.chains):
            bufs[root] = base
            if n:
                top = id(low.fn.body.instrs[ranges[root][0]])
                resets.setdefault(top, []).append((base, sizes[root] // 8))
    low.e.bar()
    low.extra["exact_chains"] = (members, bufs, exact)
    low.extra["exact_carried"] = carried
    low.extra["exact_resets"] = resets
    low.extra["exact_acc_bytes"] = sum(slot.size for slot in slots)
    from tessera.lower.exact.f64acc import f64_chains

    low.extra["exact_f64"] = f64_chains(low.fn, members)  # one f64 suffices (fp8_e4m3)
    low.extra.setdefault("maxnreg", EXACT_MAXNREG)
    return any(root not in carried for root in sizes)


def exact_operands(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """``args`` with every exact accumulator that ``instr`` uses other than to carry it
    (a loop, a branch, an exact mma's or a carried reduce's accumulator operand)
    rounded once, to its element. Before the top-level instruction where a chain that
    reuses another's buffer starts, the buffer's words are zeroed between two barriers
    (the previous chain's threads, which may hold its elements in another layout, are
    done with them; every word is zero before the chain's first deposit)."""
    members, bufs, exact = low.extra["exact_chains"]
    for base, words in low.extra["exact_resets"].pop(id(instr), []):
        low.em.bar()
        zero_shared(low.em, base, words)
        low.em.bar()
    if isinstance(instr.op, (tile_ir.For, tile_ir.While, tile_ir.If)):
        return args
    out = list(args)
    carries = carried_operand(instr)
    for n, v in enumerate(instr.operands):
        if v not in exact or n == carries:
            continue
        root = members[v]
        if root in low.extra["exact_carried"]:
            from tessera.lower.exact.carried import round_carried

            out[n] = round_carried(low, v, bufs[root], low.extra["exact_carried"][root])
        else:
            out[n] = round_mma(low, v, bufs[root], root in low.extra["exact_f64"])
    return out


__all__ = ["exact_operands", "plan_exact"]
