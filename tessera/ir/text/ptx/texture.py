"""``tex`` as Target IR (PTX ISA sec. 9.7.10.3): the fetches of texture objects that
``tex1Dfetch``, ``tex1D``, ``tex2D`` and ``tex3D`` compile to, in unified mode (the
texture object a ``u64`` register holding its handle; the sampler is the object's own).

``tex.{1d,2d,3d}.v4.{f32,s32,u32}.{f32,s32} d, [tex, {c...}]``: four destination
registers; the coordinates a singleton (or a scalar) for 1d, two for 2d and four for 3d,
whose fourth is ignored. Layered and cube textures, separate samplers, the level and
gradient forms, offsets, depth compares and the residency predicate are refused by
name, as are the texture references CUDA 12 removed.

``suld.b.{1d,2d,3d}{.v2,.v4}.{b8,b16,b32,b64}.{trap,clamp,zero} d, [surf, {x...}]`` and
``sust.b...`` ``[surf, {x...}], a`` (sec. 9.7.11): surface objects' raw loads and stores,
x a byte offset; the formatted ``.p`` forms, layered surfaces and ``sured`` are refused
by name.
"""

from __future__ import annotations

from tessera.arch.texture import SURFACE_MODES
from tessera.ir.dialects.target.memory_ops import (
    SURFACE_REG,
    TEX_DIMS,
    SurfaceLoad,
    SurfaceStore,
    TexFetch,
)
from tessera.ir.text.ptx.arith import handler
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.lexer import split_operands


@handler("tex")
def _tex(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    geom = mods[0] if mods else ""
    if geom not in TEX_DIMS:
        raise b.unsupported(f"tex.{'.'.join(mods)} (1d, 2d and 3d textures are supported; "
                            "layered, cube and multisample ones are not)")
    rest = mods[1:]
    if rest[:1] in (["level"], ["grad"]):
        raise b.unsupported(f"tex.{geom}.{rest[0]} (mipmap levels are not modelled)")
    if len(rest) != 3 or rest[0] != "v4":
        raise b.syntax(f"tex.{'.'.join(mods)}: expected tex.{geom}.v4.<dtype>.<ctype>")
    dtype, ctype = rest[1], rest[2]
    if dtype not in ("f32", "s32", "u32") or ctype not in ("f32", "s32"):
        raise b.unsupported(f"tex.{'.'.join(mods)} (f32, s32 and u32 results at f32 or "
                            "s32 coordinates are supported)")
    if len(ops) != 2 or "|" in ops[0]:
        raise b.unsupported("tex with a residency predicate, an offset or a depth compare")
    where = ops[1].strip()
    if not (where.startswith("[") and where.endswith("]")):
        raise b.syntax(f"tex reads [texture, {{coordinates}}], not {where!r}")
    inside = split_operands(where[1:-1], b.loc)
    if len(inside) != 2:
        raise b.unsupported("tex with a separate sampler (independent texturing mode)")
    handle, coords = inside
    if not b.is_register(handle):
        raise b.unsupported(f"the texture reference {handle!r} (texture references were "
                            "removed in CUDA 12; use a texture object)")
    parts = [c.strip() for c in coords.strip("{}").split(",")]
    n = TEX_DIMS[geom]
    if len(parts) != (4 if n == 3 else n):
        raise b.syntax(f"tex.{geom} takes {4 if n == 3 else n} coordinates, got {len(parts)}")
    values = [b.read(handle, "u64"), *(b.read(c, ctype) for c in parts[:n])]
    (d,) = b.emit(TexFetch(geom, dtype, ctype), values)
    b.write(ops[0], d)


def _surface(b: InstrBuilder, head: str, mods: list[str], where: str
             ) -> tuple[str, int, str, str, list]:
    """(geometry, vector width, type, mode, [handle, coordinates...]) of a surface
    access's modifiers and ``[surf, {x, ...}]`` operand."""
    if mods[:1] != ["b"]:
        raise b.unsupported(f"{head}.{'.'.join(mods)} (the raw .b forms are supported, not "
                            "the formatted .p ones)")
    geom = mods[1] if len(mods) > 1 else ""
    if geom not in TEX_DIMS:
        raise b.unsupported(f"{head}.b.{geom} (1d, 2d and 3d surfaces are supported; "
                            "layered ones are not)")
    rest = mods[2:]  # the vector width, the type and the mode, in any order
    vecs = [int(f[1:]) for f in rest if f in ("v2", "v4")]
    types = [f for f in rest if f in SURFACE_REG]
    modes = [f for f in rest if f in SURFACE_MODES]
    if len(types) != 1 or len(modes) != 1 or len(vecs) > 1 or \
            len(rest) != 2 + len(vecs):
        raise b.syntax(f"{head}.{'.'.join(mods)}: expected {head}.b.{geom}{{.v2,.v4}}."
                       "{b8,b16,b32,b64}.{trap,clamp,zero}")
    vec = vecs[0] if vecs else 1
    where = where.strip()
    if not (where.startswith("[") and where.endswith("]")):
        raise b.syntax(f"{head} reaches [surface, {{coordinates}}], not {where!r}")
    handle, coords = split_operands(where[1:-1], b.loc)
    if not b.is_register(handle):
        raise b.unsupported(f"the surface reference {handle!r} (use a surface object)")
    parts = [c.strip() for c in coords.strip("{}").split(",")]
    n = TEX_DIMS[geom]
    if len(parts) != (4 if n == 3 else n):
        raise b.syntax(f"{head}.b.{geom} takes {4 if n == 3 else n} coordinates")
    return geom, vec, types[0], modes[0], [b.read(handle, "u64"),
                                         *(b.read(c, "s32") for c in parts[:n])]


@handler("suld")
def _suld(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if len(ops) != 2:
        raise b.syntax("suld takes a destination and [surface, {coordinates}]")
    geom, vec, t, mode, values = _surface(b, "suld", mods, ops[1])
    (d,) = b.emit(SurfaceLoad(geom, vec, t, mode), values)
    b.write(ops[0], d)


@handler("sust")
def _sust(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if len(ops) != 2:
        raise b.syntax("sust takes [surface, {coordinates}] and a source")
    geom, vec, t, mode, values = _surface(b, "sust", mods, ops[0])
    b.emit(SurfaceStore(geom, vec, t, mode), [*values, b.read(ops[1], SURFACE_REG[t])])
