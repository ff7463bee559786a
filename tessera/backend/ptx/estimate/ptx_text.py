"""A census of PTX *text*, for kernels that exist only as PTX (another compiler's).

This reads instructions line by line; it does not build Target IR. Loops are backward
branches (a ``bra`` to a label above it); the hot loop is the innermost one holding the
most ``wgmma``/``mma.sync`` instructions, else the most instructions. Each instruction
is issued by every warp (a predicated instruction is issued even when its predicate is
false; code that only some warps branch into is overcounted). TMA bytes are the
``mbarrier.arrive.expect_tx`` byte counts of a region, which a kernel announces once
per copy group; ``cp.async`` and global load and store bytes are per thread. Retry loops
nested in the hot loop (``mbarrier.try_wait``) count once, as in the Target IR census.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tessera.backend.ptx.estimate.census import Census
from tessera.errors import ArgumentError

_LABEL = re.compile(r"^(\$?[\w$.]+):$")
_WGMMA = re.compile(r"\.m64n(\d+)k(\d+)(?:\.satfinite)?\.\w+\.(\w+)\.")
_MMA = re.compile(r"\.m(\d+)n(\d+)k(\d+)\.row\.col(?:\.satfinite)?\.\w+\.(\w+)\.")
_BITS = {"8": 1, "16": 2, "32": 4, "64": 8}
_FREE = ("mov", "cvta", "ret", "bra", "exit")
_SFU = ("ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh")


@dataclass(frozen=True)
class PtxCensus:
    """The census of a PTX kernel: its hot loop, the rest, and the CTA size."""

    name: str
    threads: int
    iteration: Census | None
    rest: Census


def instructions(text: str) -> list[str]:
    """Instruction and label lines of a PTX text, without comments and directives."""
    out = []
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line or line[0] in "{}." or line.startswith((")", "(")):
            continue
        out.append(line.rstrip(";").strip())
    return out


def _opcode(line: str) -> tuple[str, str]:
    """(opcode, operands) of an instruction line, without its guard predicate."""
    if line.startswith("@"):
        line = line.split(None, 1)[1]
    head, _, rest = line.partition(" ")
    return head, rest.strip()


def count(lines: list[str], warps: int, out: Census) -> None:
    """Add one execution of ``lines`` by ``warps`` warps to ``out``."""
    threads = 32 * warps
    for line in lines:
        if _LABEL.match(line):
            continue
        op, args = _opcode(line)
        root = op.split(".", 1)[0]
        kinds = op.split(".")
        elem = kinds[-1]
        if root in _FREE:
            continue
        if op.startswith("wgmma.mma_async"):
            m = _WGMMA.search(op + ".")
            if m:
                groups = max(1, warps // 4)
                out.wgmma += groups
                out.tensor_flops[m.group(3)] += groups * 2 * 64 * int(m.group(1)) * int(m.group(2))
            out.warp_instrs["tensor"] += warps
        elif op.startswith("mma.sync"):
            m = _MMA.search(op + ".")
            if m:
                out.mma_sync += warps
                out.tensor_flops[m.group(4)] += warps * 2 * int(m.group(1)) * int(
                    m.group(2)) * int(m.group(3))
            out.warp_instrs["tensor"] += warps
        elif op.startswith("wgmma.wait_group"):
            out.wgmma_waits.append(int(args))
            out.warp_instrs["sync"] += warps
        elif op.startswith("cp.async.wait_group"):
            out.wait_first = out.wait_first or not out.async_commits
            out.async_waits.append(int(args))
            out.warp_instrs["sync"] += warps
        elif op.startswith("cp.async.commit_group"):
            out.async_commits += 1
            out.warp_instrs["sync"] += warps
        elif op.startswith("cp.async.bulk.tensor") and ".global" in op.split("shared")[-1]:
            out.tma_copies += 1
            out.warp_instrs["mem"] += warps
        elif op.startswith("cp.async.bulk.tensor"):  # shared -> global: a TMA store
            out.warp_instrs["mem"] += warps
        elif op.startswith("cp.async.bulk"):  # bulk groups of TMA stores, tensor-map copies
            out.warp_instrs["sync"] += warps
        elif op.startswith(("cp.async.ca", "cp.async.cg")):
            out.cp_async_bytes += threads * int(args.split(",")[2])  # dst, src, size[, n]
            out.warp_instrs["mem"] += warps
        elif op.startswith("mbarrier.arrive.expect_tx"):
            out.tma_bytes += int(args.rsplit(",", 1)[-1].strip())
            out.warp_instrs["sync"] += warps
        elif op.startswith(("mbarrier.try_wait", "mbarrier.test_wait")):
            out.mbarrier_waits += 1
            out.warp_instrs["sync"] += warps
        elif root in ("bar", "barrier") and (".sync" in op or op == root):
            out.barriers += 1
            out.warp_instrs["sync"] += warps
        elif root in ("ld", "st", "red", "atom", "ldmatrix", "stmatrix"):
            vec = next((int(k[1:]) for k in kinds if k in ("v2", "v4", "v8")), 1)
            size = threads * vec * _BITS.get(elem[1:], 4)
            if root == "ld" and "global" in kinds:
                out.global_load_bytes += size
            elif root in ("st", "red", "atom") and "global" in kinds:
                out.global_store_bytes += size
            out.warp_instrs["mem"] += warps
        elif root in _SFU:
            out.warp_instrs["f64" if elem == "f64" else "sfu"] += warps
        elif root == "cvt":
            out.warp_instrs["sfu" if "f64" in kinds[-2:] else "int"] += warps
        elif root == "shfl":
            out.warp_instrs["shfl"] += warps
        elif elem == "f64":
            out.warp_instrs["f64"] += warps
        elif elem in ("f32", "f16", "bf16", "f16x2", "bf16x2", "ftz"):
            out.warp_instrs["f32"] += warps
        elif root in ("fence", "mbarrier", "elect", "griddepcontrol", "setmaxnreg", "tensormap",
                      "wgmma", "cp"):
            out.warp_instrs["sync"] += warps
        else:
            out.warp_instrs["int"] += warps


def loops(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line indices of each backward branch's body."""
    labels = {m.group(1): k for k, line in enumerate(lines) if (m := _LABEL.match(line))}
    found = []
    for k, line in enumerate(lines):
        if _LABEL.match(line):
            continue
        op, args = _opcode(line)
        if op.split(".", 1)[0] == "bra":
            target = labels.get(args.strip())
            if target is not None and target < k:
                found.append((target, k))
    return found


def ptx_census(text: str, entry: str | None = None) -> PtxCensus:
    """The census of the (first, or named) ``.entry`` of a PTX text."""
    starts = [m for m in re.finditer(r"\.entry\s+(\w+)", text)]
    chosen = next((m for m in starts if entry in (None, m.group(1))), None)
    if chosen is None:
        raise ArgumentError(f"no .entry {entry or ''} in this PTX text",
                            hint="give the text of a PTX module with a kernel entry")
    body = text[chosen.start():]
    nxt = re.search(r"\.entry\s+\w+", body[1:])
    body = body[: nxt.start() + 1] if nxt else body
    ntid = re.search(r"\.(?:maxntid|reqntid)\s+(\d+)", body)
    threads = int(ntid.group(1)) if ntid else 128
    lines = instructions(body[body.index("{"):])
    warps = -(-threads // 32)

    def work(span: tuple[int, int]) -> tuple[float, int]:
        c = Census()
        count(lines[span[0]:span[1] + 1], warps, c)
        return sum(c.tensor_flops.values()), span[0] - span[1]  # most work, innermost

    spans = loops(lines)
    hot = max(spans, key=work) if spans else None
    rest, iteration = Census(), None
    if hot is None:
        count(lines, warps, rest)
    else:
        iteration = Census()
        count(lines[hot[0]:hot[1] + 1], warps, iteration)
        count(lines[:hot[0]] + lines[hot[1] + 1:], warps, rest)
    return PtxCensus(chosen.group(1), threads, iteration, rest)


__all__ = ["PtxCensus", "count", "instructions", "loops", "ptx_census"]
