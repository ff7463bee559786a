"""Which PTX ISA version each instruction form needs, as ptxas 13.5 enforces it ("Feature
'add.bf16' requires PTX ISA .version 7.8 or later"; the PTX ISA lists each
instruction's in its "PTX ISA Notes"), and the oldest version each ``.target`` takes.

A module's ``.version`` is its promise of which instructions it may use: an older one
than an instruction needs is refused at that instruction's line, as ptxas refuses it,
even where every GPU of the target runs the instruction.
"""

from __future__ import annotations

import re

from tessera.ir.dialects.target import TARGET_VERSIONS, cvt_needs

Version = tuple[int, int]

_BF16 = ("bf16", "bf16x2")


def parse_version(text: str) -> Version | None:
    """``8.7`` as (8, 7); None when ``text`` is no version."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text)
    return (int(m[1]), int(m[2])) if m else None


def _cvt_version(mods: list[str], arch: int) -> tuple[Version, str] | None:
    to, frm = mods[-2], mods[-1]
    satfinite = "satfinite" in mods
    version, _ = cvt_needs(to, frm, satfinite, arch)
    feature = f"cvt{'.satfinite' if satfinite else ''}.{to}.{frm}"
    return (version, feature) if version > (7, 0) else None


def needed_version(head: str, mods: list[str], arch: int) -> tuple[Version, str] | None:
    """The oldest PTX ISA version with the instruction ``head.mods`` on ``sm_<arch>``,
    and the feature's name, or None when PTX 7.0 (sm_80's first) has it."""
    t = mods[-1] if mods else ""
    found: list[tuple[Version, str]] = []
    if head in ("wgmma", "elect", "setmaxnreg") or (head == "fence" and "async" in mods):
        found.append(((8, 0), head if head != "fence" else "fence.proxy.async"))
    if head == "cvt" and len(mods) >= 2 and (need := _cvt_version(mods, arch)):
        found.append(need)
    if t in _BF16 and head in ("add", "sub", "mul", "setp", "ex2", "tanh", "atom", "red"):
        found.append(((7, 8), f"{head}.{t}"))
    if head in ("stmatrix", "griddepcontrol"):
        found.append(((7, 8), head))
    if head == "cp" and mods[1:2] == ["bulk"] and "tensor" not in mods and "global" in mods:
        found.append(((8, 6), "cp.async.bulk into .shared::cta") if "shared::cta" in mods
                     else ((8, 0), "cp.async.bulk"))
    if head == "cp" and mods[1:3] == ["bulk", "tensor"]:
        found.append(((8, 0), "cp.async.bulk.tensor"))
    if head in ("bar", "barrier") and "cta" in mods:
        found.append(((7, 8), f"{head}.cta"))
    if head == "mbarrier" and "expect_tx" in mods:
        found.append(((8, 0), "mbarrier.arrive.expect_tx"))
    if head == "mbarrier" and {"release", "acquire"} & set(mods):
        found.append(((8, 0), "mbarrier's .release and .acquire"))
    if head == "mbarrier" and "relaxed" in mods:
        found.append(((8, 6), "mbarrier's .relaxed"))
    if any(f.endswith(("::cta", "::cluster")) for f in mods):
        found.append(((7, 8), "the ::cta and ::cluster state-space qualifiers"))
    if head in ("szext", "bmsk"):
        found.append(((7, 6), head))
    if any(re.match(r"L[12]::evict_", f) for f in mods):
        found.append(((7, 4), "the L1::evict_* and L2::evict_* qualifiers"))
    if "L2::cache_hint" in mods:
        found.append(((7, 4), ".L2::cache_hint"))
    if {"L2::64B", "L2::128B", "L2::256B"} & set(mods):
        found.append(((7, 4), "the L2 prefetch sizes (.L2::64B, .L2::128B, .L2::256B)"))
    if "xorsign" in mods:
        found.append(((7, 2), ".xorsign"))
    return max(found, default=None)


def too_old(feature: str, need: Version, version: Version | None) -> str | None:
    """Why a module of ``.version`` ``version`` cannot hold ``feature``, which needs
    ``need``, or None."""
    if version is None or version >= need:
        return None
    return (f"{feature} needs PTX ISA .version {need[0]}.{need[1]} or later; the module "
            f"says .version {version[0]}.{version[1]}")


def version_problem(head: str, mods: list[str], arch: int,
                    version: Version | None) -> str | None:
    """Why a module of ``.version`` ``version`` cannot hold ``head.mods``, or None."""
    need = needed_version(head, mods, arch) if version is not None else None
    return None if need is None else too_old(need[1], need[0], version)


def target_problem(target: str, version: Version | None) -> str | None:
    """Why ``.target target`` cannot follow ``.version version``, or None."""
    need = TARGET_VERSIONS.get(target.split(",")[0].strip())
    if need is None or version is None or version >= need:
        return None
    return (f".target {target} needs PTX ISA .version {need[0]}.{need[1]} or later; the "
            f"module says .version {version[0]}.{version[1]}")


__all__ = ["Version", "needed_version", "parse_version", "target_problem",
           "too_old", "version_problem"]
