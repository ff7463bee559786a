"""Render a Target IR kernel (a ``ptx.kernel`` function) as PTX text.

The renderer is table-driven: :data:`tessera.backend.ptx.render.emit.RULES` maps each op class to
a format function. This module adds the structured control flow, which becomes labels
and predicated branches, and writes the module header, the entry signature, the
parameter loads and the register and shared-memory declarations.

Each kernel parameter is one block argument of the function: a ``reg<u64>`` is a global
pointer (``ld.param`` then ``cvta.to.global``), another scalar register is passed by
value, and a ``tmap<...>`` is a 128-byte ``CUtensorMap`` passed by value
(``.param .align 64 .b8 [128]``) whose generic address (``cvta.param``) is the tensor
map operand of ``cp.async.bulk.tensor``.
"""

from __future__ import annotations

import re

from tessera.backend.ptx.render.emit import DYNAMIC_SHARED, RULES, PtxWriter, mem_type, rule
from tessera.backend.ptx.render.regalloc import Registers, RenderError, tie_values
from tessera.errors import UNKNOWN_LOC, Loc
from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.dialects.target import (
    KERNEL,
    TARGET_VERSIONS,
    TARGETS,
    Condition,
    For,
    If,
    RegType,
    TensorMapType,
    While,
)
from tessera.lower.shared import check_shared_limit

#: the lowest PTX ISA version each target accepts in ``.target``
BASE_VERSION = TARGET_VERSIONS
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# ---------------------------------------------------------------------- control flow
def _yield_into(e: PtxWriter, block: Block, dsts: list[Value]) -> None:
    """Move the values ``block``'s terminator yields into the registers of ``dsts``."""
    term = block.terminator
    if term is None:
        raise RenderError("a region has no terminator", loc=e.loc or UNKNOWN_LOC)
    _move_values(e, dsts, term.operands)


def _move_values(e: PtxWriter, dsts: list[Value], srcs: list[Value]) -> None:
    # One parallel move per register class keeps swaps correct and types uniform.
    by_elem: dict[str, tuple[list[str], list[str]]] = {}
    for d, s in zip(dsts, srcs):
        elem = d.type.elem if isinstance(d.type, RegType) else "u64"
        ds, ss = by_elem.setdefault(elem, ([], []))
        ds.extend(e.regs.of(d))
        ss.extend(e.regs.of(s))
    for elem, (ds, ss) in by_elem.items():
        e.move(ds, ss, elem)


@rule(If)
def _if(e: PtxWriter, instr: Instr) -> None:
    then, other = instr.regions[0].block, instr.regions[1].block
    pred = e.regs.one(instr.operands[0])
    end = e.new_label("endif")
    has_else = len(other.instrs) > 1 or bool(instr.results)
    skip = e.new_label("else") if has_else else end
    e.out(f"@!{pred} bra {skip};")
    e.block(then)
    _yield_into(e, then, instr.results)
    if has_else:
        e.out(f"bra {end};")
        e.label(skip)
        e.block(other)
        _yield_into(e, other, instr.results)
    e.label(end)


@rule(For)
def _for(e: PtxWriter, instr: Instr) -> None:
    body = instr.regions[0].block
    lo, hi, step = (e.regs.one(v) for v in instr.operands[:3])
    index = e.regs.one(body.args[0])
    _move_values(e, body.args[1:], instr.operands[3:])
    e.out(f"mov.s32 {index}, {lo};")
    top, end = e.new_label("for"), e.new_label("endfor")
    (done,) = e.regs.fresh("pred")
    e.label(top)
    e.out(f"setp.ge.s32 {done}, {index}, {hi};")
    e.out(f"@{done} bra {end};")
    e.block(body)
    _yield_into(e, body, body.args[1:])
    e.out(f"add.s32 {index}, {index}, {step};")
    e.out(f"bra {top};")
    e.label(end)


@rule(While)
def _while(e: PtxWriter, instr: Instr) -> None:
    cond, body = instr.regions[0].block, instr.regions[1].block
    _move_values(e, body.args, instr.operands)
    top, end = e.new_label("while"), e.new_label("endwhile")
    e.label(top)
    e.block(cond)
    term = cond.terminator
    if term is None or not isinstance(term.op, Condition):
        raise RenderError("a ptx.while condition region must end with ptx.condition",
                          loc=instr.loc)
    e.out(f"@!{e.regs.one(term.operands[0])} bra {end};")
    e.block(body)
    _yield_into(e, body, body.args)
    e.out(f"bra {top};")
    e.label(end)


# -------------------------------------------------------------------------- the kernel
def _param_decl(fn: Function, k: int, arg: Value) -> str:
    name = f"{fn.name}_param_{k}"
    t = arg.type
    if isinstance(t, TensorMapType):
        return f".param .align 64 .b8 {name}[128]"
    if isinstance(t, RegType) and t.count == 1 and t.elem != "pred":
        return f".param .{mem_type(t.elem)} {name}"
    raise RenderError(f"kernel parameter {k} of {fn.name} has type {t}, which PTX cannot pass",
                      hint="pass pointers as reg<u64>, scalars as one register, tensor maps "
                           "as tmap<...>", loc=fn.loc)


def _load_params(e: PtxWriter, fn: Function) -> None:
    for k, arg in enumerate(fn.args):
        name, t = f"{fn.name}_param_{k}", arg.type
        if isinstance(t, TensorMapType):
            (raw,) = e.regs.fresh("u64")
            e.out(f"mov.u64 {raw}, {name};")
            e.out(f"cvta.param.u64 {e.regs.one(arg)}, {raw};")
            e.require((7, 7))  # cvta.param
        elif isinstance(t, RegType) and t.elem == "u64":
            (raw,) = e.regs.fresh("u64")
            e.out(f"ld.param.u64 {raw}, [{name}];")
            e.out(f"cvta.to.global.u64 {e.regs.one(arg)}, {raw};")
        elif isinstance(t, RegType):
            e.out(f"ld.param.{mem_type(t.elem)} {e.regs.one(arg)}, [{name}];")


def _check(fn: Function) -> str:
    if fn.kind != KERNEL:
        raise RenderError(f"{fn.name} is a {fn.kind} function, not a {KERNEL}",
                          hint="lower the kernel to Target IR before rendering", loc=fn.loc)
    target = fn.attrs.get("target")
    if target not in TARGETS:
        raise RenderError(f"kernel {fn.name} has target {target!r}",
                          hint=f"set attrs['target'] to one of {', '.join(TARGETS)}",
                          loc=fn.loc)
    if not _IDENT.match(fn.name):
        raise RenderError(f"kernel name {fn.name!r} is not a PTX identifier",
                          hint="use letters, digits and underscores", loc=fn.loc)
    return target


def render(fn: Function, *, line_map: bool = False) -> str | tuple[str, dict[int, Loc]]:
    """The PTX module text of the ``ptx.kernel`` ``fn``.

    With ``line_map=True`` also return ``{PTX line (1-based): source location}`` for
    every line written for an instruction with a known location, so that an assembler
    message about a PTX line can name the user's source line. Raises
    :class:`~tessera.backend.ptx.render.regalloc.RenderError` for an op with no PTX rule, an sm_90a
    instruction on an sm_80 kernel, or a ``wgmma`` accumulator used after the wgmma.
    """
    target = _check(fn)
    regs = Registers(tie_values(fn))
    e = PtxWriter(regs, target, BASE_VERSION[target])
    plan = check_shared_limit(fn, target)
    if plan.dynamic:
        if DYNAMIC_SHARED in plan.offsets:
            raise RenderError(f"a shared buffer is named {DYNAMIC_SHARED!r}, the name of the "
                              "dynamic shared array", hint="rename the buffer", loc=fn.loc)
        e.dynamic_offsets = plan.offsets
    e.loc = None if fn.loc == UNKNOWN_LOC else fn.loc
    _load_params(e, fn)
    e.loc = None
    e.block(fn.body)
    if fn.body.terminator is None:
        e.out("ret;")

    head = [f".version {e.version[0]}.{e.version[1]}", f".target {target}",
            ".address_size 64", ""]
    if plan.dynamic:  # module scope; sized by the launch (CompiledKernel.shared_bytes)
        head += [f".extern .shared .align {plan.align} .b8 {DYNAMIC_SHARED}[];", ""]
    if e.externs:
        head += [*sorted(e.externs), ""]
    if e.tables or e.module_vars:
        from tessera.backend.ptx.render.tables import declarations

        head += [*declarations(e.tables, e.module_vars), ""]
    params = [_param_decl(fn, k, a) for k, a in enumerate(fn.args)]
    head.append(f".visible .entry {fn.name}(")
    head.extend(f"\t{p}," for p in params[:-1])
    head.extend(f"\t{p}" for p in params[-1:])
    head.append(")")
    block = fn.attrs.get("block")
    if block:
        dims = [*list(block), 1, 1][:3]
        head.append(".maxntid " + ", ".join(str(int(d)) for d in dims))
    if fn.attrs.get("maxnreg"):  # the entry register count setmaxnreg starts from
        head.append(f".maxnreg {int(fn.attrs['maxnreg'])}")
    head.append("{")
    if not plan.dynamic:
        head.extend(f"\t.shared .align {align} .b8 {sym}[{size}];"
                    for sym, (size, align) in e.shared.items())
    head.extend("\t" + d for d in regs.declarations())
    head.append("")
    lines = head + [text for text, _ in e.lines] + ["}", ""]
    text = "\n".join(lines)
    if not line_map:
        return text
    locs = {len(head) + i + 1: loc for i, (_, loc) in enumerate(e.lines) if loc is not None}
    return text, locs


__all__ = ["BASE_VERSION", "RULES", "RenderError", "render"]
