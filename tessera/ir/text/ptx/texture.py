"""``tex`` as Target IR (PTX ISA sec. 9.7.10.3): the fetches of texture objects that
``tex1Dfetch``, ``tex1D``, ``tex2D`` and ``tex3D`` compile to, in unified mode (the
texture object a ``u64`` register holding its handle; the sampler is the object's own).

``tex.{1d,2d,3d}.v4.{f32,s32,u32}.{f32,s32} d, [tex, {c...}]``: four destination
registers; the coordinates a singleton (or a scalar) for 1d, two for 2d and four for 3d,
whose fourth is ignored. Layered and cube textures, separate samplers, the level and
gradient forms, offsets, depth compares and the residency predicate are refused by
name, as are the texture references CUDA 12 removed.
"""

from __future__ import annotations

from tessera.ir.dialects.target.memory_ops import TEX_DIMS, TexFetch
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
