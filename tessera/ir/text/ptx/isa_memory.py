"""What ``ld`` and ``st`` may say, as the PTX ISA lists it (version 8.x, sections 9.7.9.8
"ld" and 9.7.9.10 "st"): the types they move, one state space, and which memory-order
and cache qualifiers each takes, so that ``ld.release``, ``st.acquire``, ``st.nc``,
``ld.shared.nc``, ``ld.relaxed`` without a scope or ``ld.global.shared`` are refused at
their line, as ptxas refuses them.
"""

from __future__ import annotations

#: what ld and st move: no half or predicate types (``.b16`` moves an f16)
MEMORY_TYPES = ("b8", "u8", "s8", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32",
                "s64", "f32", "f64", "b128")
SPACES = {"global", "shared", "param", "local", "const", "shared::cta", "shared::cluster"}
SCOPES = {"cta", "gpu", "sys", "cluster"}
#: qualifiers only one of the two takes: ld's cache operators and acquire, st's
_ONLY = {"ld": {"ca", "lu", "cv", "nc", "acquire"}, "st": {"wb", "wt", "release"}}
#: atom's order, which neither ld nor st takes
_NEITHER_ORDER = {"acq_rel"}
#: qualifiers neither takes, though other memory instructions do
_NEITHER = {"sync", "aligned", "async", "bulk"}


def exotic(t: str) -> bool:
    """A type of the narrow-float formats (``e4m3x2``, ``tf32`` ...), which the handlers
    judge."""
    return t.startswith(("e", "ue")) or t == "tf32"


def memory_problem(head: str, mods: list[str]) -> str | None:
    """Why ``<head>.<mods>`` (``head`` ld or st, the type last) is no instruction, or
    None."""
    t, flags = mods[-1], mods[:-1]
    spaces = [f for f in flags if f in SPACES]
    if len(spaces) > 1:
        return f"{head} names one state space, not {' and '.join('.' + x for x in spaces)}"
    space = spaces[0].split("::")[0] if spaces else ""
    other = "st" if head == "ld" else "ld"
    for f in flags:
        if f in _ONLY[other] or f in _NEITHER or f in _NEITHER_ORDER:
            return f"{head} takes no .{f} qualifier"
    sem = [f for f in flags if f in ("relaxed", "acquire", "release")]
    scope = SCOPES & set(flags)
    if sem and not scope:
        return f"{head}.{sem[0]} needs a scope (.cta, .cluster, .gpu or .sys)"
    if scope and not sem:
        return f"{head}.{scope.pop()} scopes a memory order: add .relaxed, .acquire or .release"
    if sem and space in ("param", "const", "local"):
        return f"{head}.{sem[0]} orders no .{space} access"
    if "volatile" in flags and space in ("param", "const"):
        return f"{head}.volatile does not apply to .{space}"
    if "nc" in flags and space != "global":
        return "ld.nc reads the .global space only"
    l1 = [f for f in flags if f.startswith("L1::")]
    if l1 and space not in ("", "global"):
        return f"{head}.{l1[0]} applies to .global (and generic) accesses, not .{space}"
    vec = next((int(f[1:]) for f in flags if f in ("v2", "v4", "v8")), 1)
    return _type_problem(head, vec, t)


def _type_problem(head: str, vec: int, t: str) -> str | None:
    if exotic(t):
        return None
    if t not in MEMORY_TYPES:
        return (f"{head} moves .{t} in no form: use the bit type of its width "
                f"(.b16 for an f16, .b32 for an f16x2)")
    bits = int(t[1:])
    if vec * bits > 128:
        return f"{head}.v{vec}.{t} moves {vec * bits} bits; a vector moves at most 128"
    return None


__all__ = ["MEMORY_TYPES", "SCOPES", "SPACES", "exotic", "memory_problem"]
