"""``ptx.tex``, ``ptx.suld`` and ``ptx.sust`` (:mod:`tessera.ir.dialects.target.memory_ops`):
each active thread's fetch through the texture object its handle names, and its raw load
or store through a surface object, as :mod:`tessera.arch.texture` computes them. A
launch's texture and surface objects are the values of its ``textures`` table, by
handle; a handle that names none (or a texture where a surface is wanted), a fetch of
integers from a texture of floats (or floats from one of integers), and a surface access
outside the surface in ``.trap`` mode or at a misaligned x are faults of the first
thread that makes them. Stores land in thread order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.arch.texture import Surface
from tessera.interp.target.state import DTYPES, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.memory_ops import (
    SURFACE_REG,
    TEX_DIMS,
    SurfaceLoad,
    SurfaceStore,
    TexFetch,
)

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


def _surface_step(c: TargetCompiler, instr: Instr) -> tuple[Any, ...]:
    """(handle slot, coordinate slots, bytes an element) of a surface access."""
    n = TEX_DIMS[instr.op.geom]
    return c.slot(instr.operands[0]), [c.slot(v) for v in instr.operands[1:1 + n]], \
        int(instr.op.type[1:]) // 8


def _surfaces(fr: TargetFrame, instr: Instr, handle: int, coords: list[int], unit: int
              ) -> list[tuple[Surface, np.ndarray, np.ndarray, np.ndarray]]:
    """Per surface the active threads reach: (surface, those threads, flat offsets,
    inside), or the fault of the first thread that errs."""
    m: Any = fr.m
    op = instr.op
    act = np.flatnonzero(fr.mask)
    handles = fr.regs[handle][act].astype(np.uint64)
    out = []
    for h in np.unique(handles):
        who = act[handles == h]
        surface = getattr(m, "textures", {}).get(int(h))
        if not isinstance(surface, Surface):
            what = "a texture object, not a surface" if surface is not None else \
                "no surface object of this launch"
            raise m.fault(instr, "surface", f"the handle {int(h):#x} is {what}", int(who[0]),
                          hint="pass what cudaCreateSurfaceObject returned "
                          "(ts.ptx.surface(...) in run)")
        flat, inside, fault = surface.locate(
            [fr.regs[s][who].astype(np.int32) for s in coords], unit * op.vec, op.mode)
        if fault is not None:
            raise m.fault(instr, "surface", f"{op.name}: {fault[1]}", int(who[fault[0]]),
                          hint="keep x a byte offset of whole elements inside the surface, "
                          "or use the .clamp or .zero mode")
        out.append((surface, who, flat, inside))
    return out


@step_rule(SurfaceLoad)
def _suld(c: TargetCompiler, instr: Instr) -> Step:
    op: SurfaceLoad = instr.op
    handle, coords, unit = _surface_step(c, instr)
    out = c.slot(instr.results[0])
    dt = DTYPES[SURFACE_REG[op.type]]
    shape: tuple[int, ...] = (c.m.n,) if op.vec == 1 else (c.m.n, op.vec)

    def step(fr: TargetFrame) -> None:
        values = np.zeros(shape, dt)
        for surface, who, flat, inside in _surfaces(fr, instr, handle, coords, unit):
            raw = surface.load(flat, inside, unit * op.vec).reshape(len(who), op.vec, unit)
            got = raw[..., 0].astype(dt) if unit == 1 else \
                np.ascontiguousarray(raw).view(dt).reshape(len(who), op.vec)
            values[who] = got.reshape((len(who), *shape[1:]))
        fr.regs[out] = values
    return step


@step_rule(SurfaceStore)
def _sust(c: TargetCompiler, instr: Instr) -> Step:
    op: SurfaceStore = instr.op
    handle, coords, unit = _surface_step(c, instr)
    value = c.slot(instr.operands[-1])
    dt = DTYPES[SURFACE_REG[op.type]]

    def step(fr: TargetFrame) -> None:
        for surface, who, flat, inside in _surfaces(fr, instr, handle, coords, unit):
            v = np.asarray(fr.regs[value], dt)[who].reshape(len(who), op.vec)
            raw = v.astype(np.uint8)[..., None] if unit == 1 else \
                np.ascontiguousarray(v).view(np.uint8).reshape(len(who), op.vec, unit)
            surface.store(flat, inside, raw.reshape(len(who), -1))
    return step


__all__: list[str] = []
