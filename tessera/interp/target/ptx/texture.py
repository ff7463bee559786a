"""``ptx.tex`` (:class:`tessera.ir.dialects.target.memory_ops.TexFetch`): each active
thread's fetch through the texture object its handle names, as
:mod:`tessera.arch.texture` computes it. A launch's texture objects are the
:class:`~tessera.arch.texture.Texture` values of its ``textures`` table, by handle; a
handle that names none, or a fetch of integers from a texture of floats (or floats from
one of integers), is a fault of the first thread that makes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.memory_ops import TexFetch

_RESULT = {"f32": np.float32, "s32": np.int32, "u32": np.uint32}


@step_rule(TexFetch)
def _tex(c: TargetCompiler, instr: Instr) -> Step:
    op: TexFetch = instr.op
    handle = c.slot(instr.operands[0])
    coords = [c.slot(v) for v in instr.operands[1:]]
    out = c.slot(instr.results[0])
    dtype = _RESULT[op.type]

    def step(fr: TargetFrame) -> None:
        m: Any = fr.m
        values = np.zeros((len(fr.mask), 4), dtype)
        act = np.flatnonzero(fr.mask)
        handles = fr.regs[handle][act].astype(np.uint64)
        for h in np.unique(handles):
            who = act[handles == h]
            texture = getattr(m, "textures", {}).get(int(h))
            if texture is None:
                raise m.fault(instr, "texture", f"the handle {int(h):#x} is no texture object "
                              "of this launch", int(who[0]), hint="pass the value "
                              "cudaCreateTextureObject returned (ts.ptx.texture(...) in run)")
            if texture.float_result != (op.type == "f32"):
                kind = "floats" if texture.float_result else "integers"
                raise m.fault(instr, "texture", f"tex.{op.geom}.v4.{op.type} fetches from a "
                              f"texture of {kind}", int(who[0]), hint="fetch with the type "
                              "the texture returns (its channel type, or float for "
                              "normalized reads)")
            if texture.dims != len(coords):
                raise m.fault(instr, "texture", f"tex.{op.geom} fetches from a "
                              f"{texture.dims}-D texture", int(who[0]))
            at = [fr.regs[s][who] for s in coords]
            got = texture.fetch_index(at) if op.ctype == "s32" else texture.fetch(at)
            values[who] = got.astype(dtype) if op.type == "f32" else \
                got.astype(np.int64).astype(dtype)
        fr.regs[out] = values
    return step


__all__: list[str] = []
