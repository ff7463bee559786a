"""Which types each instruction takes: the reader refuses, at its line, the pairings the
PTX ISA does not list (``add.b32``, ``shl.u32``, ``mul.u32`` without ``.lo``,
``atom.min.f32``, ``red.exch`` ...), so that ``tessera check-ptx`` never passes PTX that
cannot assemble and the interpreter never runs an instruction no GPU has.

The reference is ptxas itself where it is installed: one module holds every pairing of
34 opcodes, the atomics, cvt, ld and st, their forms and 18 types (about 4,700 lines),
and its error lines are compared with the reader's answer line by line. The reader may
still call an instruction ptxas takes *unsupported* (it does not model it); it must
never accept one ptxas refuses, never call one ptxas takes a syntax error, and never
fail with anything but its own errors."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tessera.backend.ptx.driver import ToolchainMissing, find_ptxas
from tessera.errors import IRVerifyError
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target import ptx_ops
from tessera.ir.text.ptx import PtxSyntaxError, PtxUnsupportedError, parse_ptx

HEADER = ".version 8.7\n.target sm_90a\n.address_size 64\n"
FIRST_LINE = 15  # the line of the first instruction kernel() writes
TYPES = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f16", "f16x2",
         "bf16", "bf16x2", "f32", "f64", "pred")
REG = {"u8": "%h", "s8": "%h", "b16": "%h", "u16": "%h", "s16": "%h", "f16": "%h",
       "bf16": "%h", "b32": "%r", "u32": "%r", "s32": "%r", "f16x2": "%r", "bf16x2": "%r",
       "b64": "%rd", "u64": "%rd", "s64": "%rd", "f32": "%f", "f64": "%fd", "pred": "%p"}
WIDE = {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}
#: the forms written for each opcode: what changes the instruction, and a few modifiers
FORMS = {
    "add": ["", ".rn", ".sat", ".ftz", ".rz"], "sub": ["", ".rn"],
    "mul": [".lo", ".hi", ".wide", "", ".rn"], "mad": [".lo", ".hi", ".wide", ".rn", ""],
    "fma": [".rn", "", ".rn.ftz"], "div": ["", ".rn", ".approx", ".full"], "rem": [""],
    "min": ["", ".NaN"], "max": ["", ".NaN"], "abs": [""], "neg": [""], "copysign": [""],
    "and": [""], "or": [""], "xor": [""], "not": [""], "cnot": [""], "shl": [""],
    "shr": [""], "popc": [""], "clz": [""], "brev": [""], "bfind": [""], "bfe": [""],
    "bfi": [""], "sqrt": [".rn", ".approx", ""], "rcp": [".rn", ".approx", ".approx.ftz"],
    "ex2": [".approx", ".approx.ftz", ""], "lg2": [".approx"], "sin": [".approx"],
    "cos": [".approx.ftz"], "rsqrt": [".approx", ".approx.ftz"],
    "tanh": [".approx"], "mov": [""], "selp": [""],
    "setp": [".eq", ".lt", ".lo", ".equ", ".eq.and"],
}
ONE_SOURCE = {"not", "cnot", "abs", "neg", "popc", "clz", "brev", "bfind", "sqrt", "rcp",
              "ex2", "lg2", "sin", "cos", "rsqrt", "tanh", "mov"}
BYTES = ("u8", "s8")
CVT_ROUNDINGS = ("", ".rn", ".rz", ".rni", ".rzi", ".sat", ".rn.sat", ".rzi.sat",
                 ".rn.satfinite")
ATOMICS = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")


def reg(t: str, n: int) -> str:
    return f"{REG[t]}{n}"


def register_instruction(op: str, form: str, t: str) -> str:
    """``op<form>.<t>`` with registers of the right width for every operand."""
    full = f"{op}{form}.{t}"
    if op == "setp":
        extra = ", %p3" if form.endswith(".and") else ""
        return f"{full} %p0, {reg(t, 1)}, {reg(t, 2)}{extra};"
    if op == "selp":
        return f"{full} {reg(t, 0)}, {reg(t, 1)}, {reg(t, 2)}, %p1;"
    if op == "bfe":
        return f"{full} {reg(t, 0)}, {reg(t, 1)}, %r2, %r3;"
    if op == "bfi":
        return f"{full} {reg(t, 0)}, {reg(t, 1)}, {reg(t, 2)}, %r3, %r4;"
    d = WIDE.get(t, t) if form == ".wide" else "u32" if op in ("popc", "clz", "bfind") else t
    srcs = [reg(t, k + 1) for k in range(1 if op in ONE_SOURCE else
                                         3 if op in ("mad", "fma") else 2)]
    if op in ("shl", "shr"):
        srcs[1] = "%r2"
    if op == "mad" and form == ".wide":
        srcs[2] = reg(d, 3)
    return f"{full} {reg(d, 0)}, {', '.join(srcs)};"


def atomic_instruction(head: str, op: str, t: str) -> str:
    if head == "red":
        return f"red.global.{op}.{t} [%rd2], {reg(t, 1)};"
    cmp = f", {reg(t, 1)}" if op == "cas" else ""
    return f"atom.global.{op}.{t} {reg(t, 2)}, [%rd2], {reg(t, 1)}{cmp};"


def conversion(rounding: str, to: str, frm: str) -> str:
    srcs = f"{reg(frm, 1)}, {reg(frm, 2)}" if to.endswith("x2") else reg(frm, 1)
    return f"cvt{rounding}.{to}.{frm} {reg(to, 0)}, {srcs};"


def access(head: str, space: str, vec: int, t: str) -> str:
    regs = reg(t, 0) if vec == 1 else "{" + ", ".join(reg(t, k) for k in range(vec)) + "}"
    name = f"{head}{space}{f'.v{vec}' if vec > 1 else ''}.{t}"
    return f"{name} {regs}, [%rd1];" if head == "ld" else f"{name} [%rd1], {regs};"


def kernel(lines: list[str], header: str = HEADER) -> str:
    body = "\n    ".join(lines)
    return header + f""".visible .entry k(.param .u64 p)
{{
    .reg .b16 %h<5>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    .reg .f32 %f<5>;
    .reg .f64 %fd<5>;
    .reg .pred %p<5>;
    .reg .f16 %hf<3>;
    .reg .f16x2 %hh<3>;
    ld.param.u64 %rd1, [p];
    {body}
    ret;
}}
"""


def every_instruction() -> list[str]:
    registers = [register_instruction(op, form, t) for op, forms in FORMS.items()
                 for form in forms for t in TYPES]
    atomics = [atomic_instruction(h, op, t) for h in ("atom", "red") for op in ATOMICS
               for t in TYPES if not (h == "red" and op == "cas")]
    conversions = [conversion(r, to, frm) for r in CVT_ROUNDINGS for to in TYPES + BYTES
                   for frm in TYPES + BYTES]
    accesses = [access(h, sp, v, t) for h in ("ld", "st") for sp in ("", ".global", ".shared")
                for v in (1, 2, 4) for t in TYPES + BYTES]
    return registers + atomics + conversions + accesses + [line for line, _ in OPERANDS]


def answer(line: str, header: str = HEADER) -> str:
    """The reader's answer: ok, syntax or unsupported (anything else fails the test)."""
    try:
        parse_ptx(kernel([line], header), "a.ptx")
    except PtxSyntaxError as err:
        assert str(err.loc) == f"a.ptx:{FIRST_LINE}", err
        return "syntax"
    except PtxUnsupportedError:
        return "unsupported"
    return "ok"


@pytest.mark.parametrize("line, message", [
    ("add.b32 %r0, %r1, %r2;", r"add takes \.u16, .*not \.b32"),
    ("shl.u32 %r0, %r1, %r2;", r"shl takes \.b16, \.b32, \.b64, not \.u32"),
    ("mul.u32 %r0, %r1, %r2;", r"mul takes \.f32, .*not \.u32 \(mul\.lo and mul\.hi and "
                               r"mul\.wide take it\)"),
    ("mul.wide.u64 %rd0, %rd1, %rd2;", r"mul\.wide takes \.u16, \.u32, \.s16, \.s32"),
    ("div.f32 %f0, %f1, %f2;", r"div takes .*not \.f32 \(div\.rn and div\.approx and "
                               r"div\.full take it\)"),
    ("ex2.f32 %f0, %f1;", r"ex2\.f32 is not a PTX instruction: ex2\.approx and "
                          r"ex2\.approx\.ftz take \.f32"),
    ("lg2.approx.f64 %fd0, %fd1;", r"lg2\.approx takes \.f32, not \.f64"),
    ("setp.lo.s32 %p0, %r1, %r2;", r"setp\.lo takes \.u16, \.u32, \.u64, not \.s32"),
    ("mov.f16 %h0, %h1;", r"mov takes .*not \.f16"),
    ("atom.global.min.f32 %f0, [%rd1], %f1;", r"atom\.min takes .*not \.f32"),
    ("red.global.exch.b32 [%rd1], %r1;", r"red has no operation \.exch"),
    ("cvt.u32.f32 %r0, %f1;", r"cvt\.u32\.f32 needs an integer rounding \(\.rni, "),
    ("cvt.f32.s32 %f0, %r1;", r"cvt\.f32\.s32 needs a float rounding \(\.rn, "),
    ("cvt.f16.f32 %h0, %f1;", r"cvt\.f16\.f32 narrows and needs a float rounding"),
    ("cvt.rn.f32.f16 %f0, %h1;", r"cvt\.f32\.f16 widens exactly"),
    ("cvt.sat.u32.u16 %r0, %h1;", r"cvt\.u32\.u16 cannot overflow"),
    ("cvt.b32.u16 %r0, %h1;", r"cvt converts between .*not \.b32 from \.u16"),
    ("ld.global.f16 %h0, [%rd1];", r"ld moves \.f16 in no form: .*\.b16 for an f16"),
    ("st.global.v4.f64 [%rd1], {%fd0, %fd1, %fd2, %fd3};", r"moves 256 bits"),
])
def test_a_pairing_the_isa_does_not_list_is_refused_at_its_line(line: str,
                                                                  message: str) -> None:
    with pytest.raises(PtxSyntaxError, match=message) as err:
        parse_ptx(kernel([line]), "a.ptx")
    assert str(err.value.loc) == f"a.ptx:{FIRST_LINE}"


#: operands, qualifiers and the modifiers warp-collective instructions must say, with
#: ptxas 13.5's verdict for sm_90a
OPERANDS = [
    ("mov.b32 %f1, %r1;", "ok"), ("mov.f32 %f1, %r1;", "ok"), ("add.f32 %f1, %f2, %r1;", "ok"),
    ("ld.global.u16 %r1, [%rd1];", "ok"), ("ld.global.f32 %r1, [%rd1];", "ok"),
    ("ld.shared.u32 %r1, [%rd1];", "ok"), ("ld.shared.u32 %r1, [%r2];", "ok"),
    ("cvt.u16.u32 %h1, %rd1;", "ok"), ("cvt.u64.u32 %rd1, %tid.x;", "ok"),
    ("mov.u32 %r1, %tid.x;", "ok"), ("mov.b32 %r1, 0f3F800000;", "ok"),
    ("add.f16 %hf1, %hf2, %hf0;", "ok"), ("add.f16x2 %hh1, %hh2, %hh0;", "ok"),
    ("ld.relaxed.gpu.global.u32 %r1, [%rd1];", "ok"),
    ("st.release.gpu.global.u32 [%rd1], %r1;", "ok"), ("ld.global.nc.u32 %r1, [%rd1];", "ok"),
    ("fence.proxy.async.shared::cta;", "ok"), ("fence.acq_rel.gpu;", "ok"),
    ("setmaxnreg.inc.sync.aligned.u32 240;", "ok"),
    ("fns.b32 %r1, %r2, %r3, %r4;", "ok"), ("set.lt.f16x2.f16x2 %r1, %r2, %r3;", "ok"),
    ("set.gtu.u32.f16x2 %r1, %r2, %r3;", "ok"), ("fma.rn.sat.f16 %hf1, %hf2, %hf0, %hf0;", "ok"),
    ("fma.rn.relu.f16x2 %r1, %r2, %r3, %r4;", "ok"),
    ("fma.rn.relu.bf16x2 %r1, %r2, %r3, %r4;", "ok"), ("mov.u32 %r1, %smid;", "ok"),
    ("mov.u32 %r1, %nsmid;", "ok"), ("mov.u32 %r1, %nwarpid;", "ok"),
    ("fma.rn.relu.f32 %f1, %f2, %f3, %f4;", "fma.relu is"),
    ("cvt.rn.relu.f16x2.f32 %r1, %f1, %f2;", "ok"), ("cvt.rz.relu.bf16.f32 %h1, %f1;", "ok"),
    ("cvt.rm.relu.f16.f32 %h1, %f1;", "cvt.relu"), ("brkpt;", "ok"), ("pmevent 3;", "ok"),
    ("pmevent.mask 0x1f;", "ok"), ("pmevent 16;", "pmevent"),
    ("mbarrier.arrive.shared::cta.b64 %rd1, [%r1], %r2;", "ok"),
    ("set.lt.f32.f16x2 %r1, %r2, %r3;", "pairs is"), ("fns.b64 %rd1, %rd2, %r3, %r4;", "fns"),
    ("cp.async.ca.shared.global [%r1], [%rd1], 8;", "ok"), ("barrier.sync.aligned 0;", "ok"),
    ("add.u32 %r1, %r2, %f1;", "float register"), ("mov.u32 %f1, %r1;", "float register"),
    ("mov.b64 %rd1, %r1;", "width"), ("mov.pred %p1, %r1;", "predicate"),
    ("ld.global.u32 %f1, [%rd1];", "float register"),
    ("ld.global.u32 %r1, [%r2];", "32-bit address"), ("cvt.rn.f16.f32 %f2, %f1;", "width"),
    ("add.u32 %r1, %tid.x, 1;", "special register"), ("mov.u64 %rd1, %tid.x;", "special"),
    ("mov.u32 %r1, 0f3F800000;", "float literal"), ("add.bf16 %hf1, %hf2, %hf0;", "f16"),
    ("add.bf16x2 %hh1, %hh2, %hh0;", "f16x2 register"), ("mov.volatile.u32 %r1, %r2;", "mod"),
    ("add.sync.s32 %r1, %r2, %r3;", "modifier"), ("ld.global.shared.u32 %r1, [%rd1];", "two"),
    ("ld.release.gpu.global.u32 %r1, [%rd1];", "release"),
    ("st.acquire.gpu.global.u32 [%rd1], %r1;", "acquire"),
    ("st.global.nc.u32 [%rd1], %r1;", "nc"), ("ld.shared.nc.u32 %r1, [%r2];", "nc"),
    ("ld.relaxed.global.u32 %r1, [%rd1];", "no scope"), ("ld.gpu.global.u32 %r1, [%rd1];", "order"),
    ("ld.u64 %rd1, [p];", "parameter"), ("shfl.bfly.b32 %r1, %r2, 1, 31;", "sync"),
    ("ldmatrix.sync.m8n8.x1.shared.b16 {%r1}, [%r2];", "aligned"),
    ("wgmma.fence.aligned;", "sync"), ("setmaxnreg.inc.u32 240;", "aligned"),
    ("setmaxnreg.inc.sync.aligned.u32 241;", "multiple of 8"),
    ("cp.async.cg.shared.global [%r1], [%rd1], 8;", "16 bytes"),
    ("fence.acq_rel;", "scope"), ("fence.proxy.async.nc;", "state space"),
    ("bar.sync.aligned 0;", "aligned"), ("st.global.u8 [%rd1], %f1;", "byte"),
    ("cp.async.cg.shared.global.cg [%r1], [%rd1], 16;", "cache"),
    ("lop3.b32 %r1, %r2, %r3, %r4, 0x96;", "ok"), ("lop3.b64 %rd1, %rd1, %rd1, %rd1, 1;", "b64"),
    ("tanh.approx.ftz.f32 %f1, %f2;", "ftz"), ("copysign.ftz.f32 %f1, %f2, %f2;", "ftz"),
    ("atom.global.acq_rel.gpu.add.u32 %r1, [%rd1], 1;", "ok"),
    ("atom.acq_rel.gpu.global.cas.b32 %r1, [%rd1], 0, 1;", "ok"),
    ("red.global.release.gpu.add.u32 [%rd1], 1;", "ok"),
    ("red.global.acq_rel.gpu.add.u32 [%rd1], 1;", "acquire"),
    ("ld.acq_rel.gpu.global.u32 %r1, [%rd1];", "acq_rel"),
    ("ld.volatile.param.u64 %rd1, [p];", "volatile"), ("add.rn.rn.f32 %f1, %f1, %f1;", "twice"),
    # memory orders: one of .weak, .volatile or a semantics with one scope, cache
    # operators on weak accesses only, .mmio on .relaxed.sys global accesses
    ("ld.volatile.shared.u32 %r1, [%r2];", "ok"), ("st.volatile.shared.u8 [%r2], %r1;", "ok"),
    ("ld.relaxed.cta.shared.v2.u32 {%r1, %r3}, [%r2];", "ok"),
    ("st.release.cluster.shared::cluster.u32 [%r2], %r1;", "ok"),
    ("ld.shared.acquire.cta.u32 %r1, [%r2];", "ok"), ("ld.weak.shared.u32 %r1, [%r2];", "ok"),
    ("ld.mmio.relaxed.sys.global.u32 %r1, [%rd1];", "ok"),
    ("st.mmio.relaxed.sys.u32 [%rd1], %r1;", "ok"), ("ld.weak.global.ca.u32 %r1, [%rd1];", "ok"),
    ("ld.volatile.cta.shared.u32 %r1, [%r2];", "no scope"),
    ("ld.volatile.relaxed.cta.shared.u32 %r1, [%r2];", "one memory order"),
    ("ld.weak.volatile.shared.u32 %r1, [%r2];", "one memory order"),
    ("ld.acquire.cta.gpu.shared.u32 %r1, [%r2];", "one scope"),
    ("ld.weak.cta.shared.u32 %r1, [%r2];", "scopes"),
    ("ld.relaxed.gpu.global.ca.u32 %r1, [%rd1];", "cache operator"),
    ("ld.volatile.global.nc.u32 %r1, [%rd1];", "cache operator"),
    ("st.release.gpu.global.cs.u32 [%rd1], %r1;", "cache operator"),
    ("ld.mmio.relaxed.gpu.global.u32 %r1, [%rd1];", "mmio"),
    ("ld.mmio.relaxed.sys.shared.u32 %r1, [%r2];", "mmio"),
    ("ld.mmio.global.u32 %r1, [%rd1];", "mmio"), ("ld.volatile.local.u32 %r1, [%rd1];", "9.1"),
    ("ld.relaxed.cta.local.u32 %r1, [%rd1];", "local"),
    ("ld.rn.global.f32 %f1, [%rd1];", "rounding"), ("st.global.sat.f32 [%rd1], %f1;", "sat"),
    # cache hints and prefetch sizes: global (or generic) accesses, not volatile ones
    ("ld.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;", "ok"),
    ("ld.global.L2::cache_hint.u32 %r1, [%rd1];", "no policy"),
    ("ld.shared.L2::cache_hint.u32 %r1, [%r2], %rd2;", "shared"),
    ("ld.shared.L2::128B.u32 %r1, [%r2];", "shared"),
    ("ld.volatile.global.L2::128B.u32 %r1, [%rd1];", "ok"),
    ("ld.volatile.global.L1::evict_last.u32 %r1, [%rd1];", "volatile"),
    ("ld.relaxed.gpu.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;", "ok"),
    ("ld.mmio.relaxed.sys.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;", "mmio"),
    # bulk copies with an L2 cache hint take the cache policy last
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     ".L2::cache_hint [%r1], [%rd1, {%r2, %r3}], [%r4], %rd2;", "ok"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     ".multicast::cluster.L2::cache_hint [%r1], [%rd1, {%r2, %r3}], [%r4], %h1, %rd2;", "ok"),
    ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint "
     "[%rd1, {%r2, %r3}], [%r1], %rd2;", "ok"),
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
     "[%r1], [%rd1], %r2, [%r3], %rd2;", "ok"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     ".L2::cache_hint [%r1], [%rd1, {%r2, %r3}], [%r4];", "no policy"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     ".L2::cache_hint [%r1], [%rd1, {%r2, %r3}], [%r4], %r2;", "32-bit policy"),
    ("cp.async.bulk.commit_group.L2::cache_hint;", "no hint"),
    # ptxas takes a TMA copy's shared-memory operands as bare registers too
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes %r1, "
     "[%rd1, {%r2, %r3}], %rd2;", "ok"),
    ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r3}], %r1;", "ok"),
    ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r3}], %h1;",
     "unsupported"),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 1;", "ok"),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 2;", "parity"),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 1, %r2;", "ok"),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 1, %rd2;", "64-bit hint"),
    ("atom.global.L2::cache_hint.and.b32 %r2, [%rd1], %r1, %rd2;", "ok"),
    ("atom.global.L2::cache_hint.and.b32 %r2, [%rd1], %r1;", "no policy"),
    ("red.global.L2::cache_hint.add.u32 [%rd1], %r1, %rd2;", "ok"),
    ("atom.global.L2::cache_hint.cas.b32 %r2, [%rd1], %r1, %r3, %rd2;", "cas"),
    ("atom.shared.L2::cache_hint.add.u32 %r2, [%r1], %r1, %rd2;", "shared"),
    ("ret %r1;", "operand"), ("exit 1;", "operand"), ("bra;", "label"), ("ret%r1;", "operand"),
    ("add.u32%r1, %r2, %r3;", "ok"),  # ptxas's opcode ends where its operands start
    ("mov.b16 {%r1, %r2}, %h1;", "8-bit parts"), ("mov.b16 %h1, {%r1, %r2};", "8-bit parts"),
    ("ret.uni;", "ok"), ("ret.rn;", "rounding"), ("exit.uni;", "uni"),
    ("cvt.rn.f16x2.f32 %rd1, %f1, %f2;", "ok"),  # ptxas takes a wider f16x2 register ...
    ("cvt.rn.bf16x2.f32 %rd1, %f1, %f2;", "64-bit bf16x2"),  # ... and no wider bf16x2 one
    ("wgmma.commit_group.sync.aligned%r1;", "operand"),
    ("cvt.u64.u16 %rd1, %tid.x;", "ok"), ("cvt.rzi.s32.f32 %r1, %tid.x;", "special"),
    ("cvt.u32.u64 %r1, %tid.x;", "special"),
    ("elect.sync %r1|%p1, 0f3F800000;", "float mask"),
    ("shfl.sync.bfly.b32 %r1, %r2, 1, 31, 0f3F800000;", "float mask"),
    ("shfl.sync.bfly.b32 %r1, %r2, 0f3F800000, 31, -1;", "ok"),
    ("vote.sync.ballot.b32 %r1, %p1, 0f3F800000;", "float mask"),
    ("bar.warp.sync 0f3F800000;", "float mask"),
    ("ldmatrix.sync.aligned.m8n8.x1.shared {%r1}, [%r2];", "no type"),
    ("st.L2::128B.global.u32 [%rd1], %r1;", "prefetch"),
    ("vote.ballot.sync.b16 %r1, %p1, -1;", "b32"), ("vote.any.sync.b32 %p2, %p1, -1;", "pred"),
    ("mbarrier.init.shared.shared::cta.b64 [%r1], 1;", "two spaces"),
    ("cvt.approx.u32.u64 %r1, %rd1;", "approx"), ("cvt.rn.approx.f16.f32 %h1, %f1;", "approx"),
    ("cvt.rn.bf16x2.f32 %r1, %rd1, %f2;", "wide source"),
    ("cvt.rn.f16x2.f32 %r1, %rd1, %f2;", "ok"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes 0f3F800000, "
     "[%rd1, {%r2, %r3}], [%r4];", "unsupported"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes 1024, "
     "[%rd1, {%r2, %r3}], [%r4];", "immediate"),
    ("ldmatrix.sync.aligned.m8n8.x4.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r2];", "twice"),
    ("mbarrier.init.shared::cta [%r1], 1;", "b64"), ("setp.ge.uni.s32 %p1, %r1, %r2;", "uni"),
    ("redux.sync.add.u32 %r1, %r2, -1;", "ok"), ("redux.sync.and.b32 %r1, %r2, -1;", "ok"),
    ("redux.sync.add.b32 %r1, %r2, -1;", "takes .u32"), ("redux.add.u32 %r1, %r2, -1;", "sync"),
    ("sad.s32 %r1, %r2, %r3, %r4;", "ok"), ("mul24.hi.u32 %r1, %r2, %r3;", "ok"),
    ("mul24.lo.u64 %rd1, %rd1, %rd1;", "u64"), ("testp.subnormal.f64 %p1, %fd1;", "ok"),
    ("testp.normal.f16 %p1, %h1;", "f16"), ("dp4a.s32.u32 %r1, %r2, %r3, %r4;", "ok"),
    ("dp2a.lo.u32.s32 %r1, %r2, %r3, %r4;", "ok"), ("szext.wrap.u32 %r1, %r2, 5;", "ok"),
    ("prefetch.global.L2 [%rd1];", "ok"), ("nanosleep.u32 %r1;", "ok"),
    ("cnot.b32 %r1, %r2;", "ok"), ("bar.red.popc.u32 %r1, 0, %p1;", "ok"),
    ("bar.red.and.pred %p2, 1, !%p1;", "ok"), ("bar.red.popc.pred %p2, 0, %p1;", "popc"),
    ("vote.sync.ballot.b32 %r1, %p1, %r2;", "ok"), ("match.any.sync.b32 %r1, %r2, -1;", "ok"),
    ("match.all.sync.b64 %r1|%p1, %rd1, %r2;", "ok"), ("match.any.b32 %r1, %r2, -1;", "sync"),
    # fp8 pairs (sm_89) live in 16-bit integer or bit registers
    ("cvt.rn.satfinite.e4m3x2.f32 %h1, %f1, %f2;", "ok"),
    ("cvt.rn.f16x2.e4m3x2 %r1, %h1;", "ok"), ("cvt.rn.satfinite.e5m2x2.f16x2 %h1, %r1;", "ok"),
    ("cvt.rn.satfinite.e4m3x2.f32 %hf1, %f1, %f2;", "fp8"), ("cvt.rn.e4m3x2.f32 %h1, %f1, %f2;",
                                                             "satfinite"),
    ("cvt.rn.satfinite.e4m3x2.f32 %h1, %f1;", "operands"),
    ("cvt.rn.satfinite.e4m3x2.bf16x2 %h1, %r1;", "widens"), ("cvt.f16x2.e4m3x2 %r1, %h1;", "rn"),
    ("cvt.rn.satfinite.relu.e4m3x2.f32 %h1, %f1, %f2;", "unsupported"),
    # half-precision atomics say .noftz; atomics take no cache qualifiers
    ("atom.global.add.noftz.f16 %h1, [%rd1], %h2;", "ok"),
    ("red.global.add.noftz.f16x2 [%rd1], %r2;", "ok"),
    ("atom.global.add.f16 %h1, [%rd1], %h2;", "noftz"),
    ("atom.global.add.noftz.f32 %f1, [%rd1], %f2;", "noftz"),
    ("atom.global.cas.b16 %h1, [%rd1], %h2, %h3;", "ok"),
    ("atom.global.cg.add.u32 %r1, [%rd1], %r2;", "cg"),
    ("red.global.L1::no_allocate.add.u32 [%rd1], %r2;", "L1"),
    # ptxas's own operand rules for mov and cvt
    ("mov.u32 {%h1, %h2}, %r1;", "packs"), ("mov.b32 {%h1, %h2}, %r1;", "ok"),
    ("cvt.f32.bf16 %f1, %r1;", "16"), ("cvt.f32.f16 %f1, %r1;", "ok"),
    ("cvt.rn.f32.u32 %f1, %tid.x;", "special"), ("cvt.u64.u32 %rd1, %tid.x;", "ok"),
    ("ld.L1::evict_last.param.u64 %rd1, [p];", "param"),
    ("ld.shared.L1::evict_last.u32 %r1, [%r2];", "shared"),
    ("cvt.f32.f16 %f1, 0x3C00;", "register"), ("cvt.rn.f16x2.e4m3x2 %r1, 0x3838;", "register"),
    ("cvt.rn.satfinite.e4m3x2.f32 %h1, %rd1, %f2;", "width"),
    ("cvt.rn.satfinite.e4m3x2.f32 %h1, %laneid, %f2;", "special"),
    # ptxas takes modifiers after the type, a repeated .sync on shfl and vote, and a 0f
    # literal for shfl's .b32 lane operand
    ("add.f32.rn %f1, %f2, %f3;", "ok"), ("st.global.f32.cg [%rd1], %f1;", "ok"),
    ("shfl.sync.sync.bfly.b32 %r1, %r2, 1, 31, -1;", "unsupported"),
    ("shfl.sync.idx.b32 %r1, %r2, 0f3F800000, 31, -1;", "ok"),
    ("wgmma.sync.fence.sync.aligned;", "repeats"),
    # a source vector's elements: registers of one type, or literals (as LLVM writes
    # {0, 16843009}); no address symbols
    ("st.global.v2.b32 [%rd1], {0, 16843009};", "ok"), ("mov.b64 %rd2, {%r1, 5};", "ok"),
    ("st.global.v2.b32 [%rd1], {%rd2, 5};", "ok"), ("st.global.v2.f32 [%rd1], {%r1, 1.5};", "ok"),
    ("st.global.v2.b32 [%rd1], {%r1, %rd2};", "different"),
    ("st.global.v2.f32 [%rd1], {0f3F800000, 1};", "integer"),
    ("mov.b64 %rd2, {%r1, p};", "address"), ("st.global.v2.b32 [%rd1], {%r1, %tid.x};",
                                             "unsupported"),
    ("st.global.v2.u32 [%rd1], {1.5, %r1};", "unsupported"),
    ("ld.global.v2.b32 {%r1, 0}, [%rd1];", "declared"),
    # sm_90's arrival count (1 or more; the ISA says below 2^20, ptxas does not check)
    ("mbarrier.arrive.shared::cta.b64 _, [%r1], 128;", "ok"),
    ("mbarrier.arrive.release.cta.shared::cta.b64 %rd2, [%r1], 5;", "ok"),
    ("mbarrier.arrive.shared::cta.b64 _, [%r1], 0;", "count"),
    ("mbarrier.arrive.shared::cta.b64 _, [%r1], 1048576;", "unsupported"),
    ("mbarrier.arrive.shared::cta.b64 _, [%r1], %r2;", "ok"),
    ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 8192, 1;", "operands"),
    # sm_90's vector atomics: adds of f32 (v2, v4), f16 and bf16 (to v8) and their pairs
    # (to v4), in global memory; the 16-bit ones' min and max are not modelled
    ("atom.global.add.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1], {%f1, %f2, %f3, %f4};", "ok"),
    ("red.global.add.v2.f32 [%rd1], {%f1, %f2};", "ok"),
    ("atom.add.noftz.v2.f16x2 {%r1, %r2}, [%rd1], {%r1, %r2};", "ok"),
    ("red.global.add.noftz.v4.bf16 [%rd1], {%h1, %h2, %h1, %h2};", "ok"),
    ("atom.global.add.v8.f32 {%f1, %f2, %f1, %f2, %f1, %f2, %f1, %f2}, [%rd1], "
     "{%f1, %f2, %f1, %f2, %f1, %f2, %f1, %f2};", "v2 or"),
    ("atom.shared.add.v2.f32 {%f1, %f2}, [%r1], {%f1, %f2};", "global"),
    ("atom.global.min.v2.f32 {%f1, %f2}, [%rd1], {%f1, %f2};", "adds"),
    ("atom.global.add.v2.u32 {%r1, %r2}, [%rd1], {%r1, %r2};", "adds"),
    ("red.global.max.noftz.v2.f16x2 [%rd1], {%r1, %r2};", "unsupported"),
    # directed rounding of f32 and f64 arithmetic (libdevice's math functions use it)
    ("add.rz.f32 %f1, %f2, %f3;", "ok"), ("add.rm.ftz.f32 %f1, %f2, %f3;", "ok"),
    ("mul.rp.f64 %fd1, %fd2, %fd3;", "ok"), ("sub.rz.f64 %fd1, %fd2, %fd3;", "ok"),
    ("fma.rz.f32 %f1, %f2, %f3, %f4;", "ok"), ("fma.rm.ftz.f32 %f1, %f2, %f3, %f4;", "ok"),
    ("fma.rp.f64 %fd1, %fd2, %fd3, %fd4;", "ok"), ("div.rz.f32 %f1, %f2, %f3;", "ok"),
    ("div.rm.f64 %fd1, %fd2, %fd3;", "ok"), ("sqrt.rp.ftz.f32 %f1, %f2;", "ok"),
    ("rcp.rz.f64 %fd1, %fd2;", "ok"), ("sqrt.rz.f16 %h1, %h2;", "sqrt"),
    ("add.rz.f16 %h1, %h2, %h3;", "nearest"),
    ("add.rz.f16x2 %r1, %r2, %r3;", "nearest"), ("add.rz.rn.f32 %f1, %f2, %f3;", "rounding"),
    # carry chains, bit masks, SIMD video instructions, saturated floats, clocks
    ("add.cc.u32 %r1, %r2, %r3;", "ok"), ("mad.hi.cc.s64 %rd1, %rd2, %rd3, %rd4;", "ok"),
    ("addc.u32 %r1, %r2, %r3;", "unsupported"), ("add.cc.f32 %f1, %f2, %f3;", "cc"),
    ("add.cc.sat.s32 %r1, %r2, %r3;", "cc"), ("mad.wide.cc.u32 %rd1, %r2, %r3, %rd4;", "cc"),
    ("bmsk.clamp.b32 %r1, %r2, %r3;", "ok"), ("bmsk.b32 %r1, %r2, %r3;", "bmsk"),
    ("bfind.shiftamt.s64 %r1, %rd2;", "ok"),
    ("vabsdiff4.u32.u32.u32.add %r1, %r2, %r3, %r4;", "ok"),
    ("vmin2.s32.u32.s32.sat %r1, %r2, %r3, %r4;", "ok"),
    ("vadd4.u32.u32.u32 %r1, %r2, %r3, 0;", "registers"),
    ("vadd4.u32.u32.u32.sat.add %r1, %r2, %r3, %r4;", "vadd4"),
    ("vadd4.u32.u32.u32 %r1.b10, %r2, %r3, %r4;", "unsupported"),
    ("cvt.sat.f32.f32 %f1, %f2;", "ok"), ("cvt.rn.sat.f16.f32 %h1, %f2;", "ok"),
    ("mov.u64 %rd1, %clock64;", "ok"), ("mov.u32 %r1, %clock64;", "64 bits"),
    ("mov.u32 %r1, %globaltimer_lo;", "ok"),
    # set: a comparison as a number
    ("set.eq.f16.f16 %h1, %h2, %h3;", "ok"), ("set.lt.and.u32.f32 %r1, %f2, %f3, %p1;", "ok"),
    ("set.hs.s32.u64 %r1, %rd2, %rd3;", "ok"), ("set.eq.f64.f64 %fd1, %fd2, %fd3;", "set"),
    ("set.eq.u32.f16x2 %r1, %r2, %r3;", "ok"), ("set.eq.u32 %r1, %r2, %r3;", "set"),
    # sm_80's barrier forms
    ("mbarrier.init.shared.b64 [%r1], %r2;", "ok"),
    ("mbarrier.init.shared.b64 [%r1], 0;", "count"), ("mbarrier.init.shared.b64 [%r1], -1;",
                                                      "count"),
    ("mbarrier.init.shared.b64 [%r1], 1048575;", "ok"),
    ("mbarrier.test_wait.shared.b64 %p1, [%r1], %rd1;", "ok"),
    ("cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];", "ok"),
    ("cp.async.mbarrier.arrive.shared.u64 [%r1];", "arrive"),
    # a barrier's .cta comes right after its name
    ("bar.cta.sync 0;", "ok"), ("barrier.cta.aligned.sync 0;", "ok"), ("bar.sync.cta 0;", "first"),
    ("bar.red.cta.popc.u32 %r1, 0, %p1;", "first"), ("barrier.sync.aligned.cta 0;", "first"),
    # cp.async's fourth operand: a src-size up to the copy's size, or ignore-src
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, %p1;", "ok"),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, %r2;", "ok"),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, -1;", "src-size"),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16, 17;", "src-size"),
    # wgmma's immediates: scales 1 or -1, transpose flags 0 or 1
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, "
     "%p1, 1, 1, 0, 1;", "ok"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, "
     "%p1, 1, 1, -1, 1;", "flag"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, "
     "%p1, 2, 1, 0, 1;", "scales"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, "
     "%p1, -1, 1, 0, 1;", "unsupported"),
    # a struct parameter's fields: bytes, and reads through the address mov takes of it
    ("ld.param.u8 %h1, [p];", "ok"), ("ld.param.s8 %r1, [p+1];", "ok"),
    ("ld.param.v4.u8 {%h1, %h2, %h3, %h4}, [p];", "ok"),
    ("ld.param.v2.u64 {%rd2, %rd3}, [%rd1+16];", "ok"), ("st.param.u8 [p], %h1;", "write"),
    # a 1-D bulk copy into shared memory, its byte count announced from a register
    ("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, "
     "[%r3];", "ok"),
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], 64, "
     "[%r3];", "ok"),
    ("cp.async.bulk.shared::cta.global [%r1], [%rd1], %r2, [%r3];", "completion"),
    ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], %r2;", "ok"),
    ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], %rd2;", "width"),
    # elect.sync: the member mask in a register, the lane id to the sink
    ("elect.sync _|%p1, %r1;", "ok"), ("elect.sync %r0|%p1, %r1;", "ok"),
    # programmatic dependent launch: one of two modifiers, no operands
    ("griddepcontrol.wait;", "ok"), ("griddepcontrol.launch_dependents;", "ok"),
    ("griddepcontrol.wait.sync;", "modifier"), ("griddepcontrol;", "required"),
    ("griddepcontrol.wait %r1;", "operands"),
    # the lane masks are 32-bit special registers
    ("mov.u32 %r1, %lanemask_le;", "ok"), ("mov.u32 %r1, %lanemask_ge;", "ok"),
    ("mov.u32 %r1, %lanemask_eq;", "ok"), ("cvt.u64.u32 %rd2, %lanemask_lt;", "ok"),
    ("mov.u64 %rd1, %lanemask_gt;", "32 bits"),
    # thread block clusters (sm_90): special registers, distributed shared memory, barrier
    ("mov.u32 %r1, %cluster_ctarank;", "ok"), ("mov.u32 %r1, %clusterid.y;", "ok"),
    ("mov.b32 %r1, %cluster_nctaid.z;", "ok"), ("cvt.u64.u32 %rd1, %cluster_ctaid.x;", "ok"),
    ("mov.pred %p1, %is_explicit_cluster;", "ok"),
    ("mov.u32 %r1, %is_explicit_cluster;", "mov.pred"),
    ("mapa.shared::cluster.u32 %r1, %r2, %r3;", "ok"), ("mapa.u64 %rd1, %rd1, %r3;", "ok"),
    ("mapa.shared::cluster.u64 %rd1, %rd2, %r3;", "ok"),
    ("mapa.shared::cluster.u64 %rd1, %r2, %r3;", "u64"),
    ("getctarank.shared::cluster.u32 %r1, %r2;", "ok"), ("getctarank.u64 %r1, %rd1;", "ok"),
    ("getctarank.shared::cluster.u32 %r1, %rd2;", "u32"),
    ("barrier.cluster.arrive;", "ok"), ("barrier.cluster.arrive.release;", "ok"),
    ("barrier.cluster.arrive.relaxed.aligned;", "ok"), ("barrier.cluster.wait.acquire;", "ok"),
    ("barrier.cluster.wait.aligned;", "ok"), ("barrier.cluster.wait.relaxed;", "wait"),
    ("ld.shared::cluster.u32 %r1, [%r2];", "ok"), ("ld.shared::cluster.u32 %r1, [%rd2];", "ok"),
    ("st.shared::cluster.v2.u32 [%r2], {%r1, %r3};", "ok"),
    ("atom.shared::cluster.add.u32 %r1, [%r2], 1;", "ok"),
    ("red.shared::cluster.add.u32 [%r2], 1;", "ok"), ("ld.shared::cluster.u8 %r1, [%r2];", "ok"),
    ("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r1];", "ok"),
    ("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r1], 64;", "ok"),
    ("mbarrier.arrive.shared::cluster.b64 %rd1, [%r1];", "sink"),
    ("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p1, [%r1], %r2;", "ok"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
     ".multicast::cluster [%r1], [%rd1, {%r2, %r3}], [%r4], %h1;", "ok"),
]


@pytest.mark.parametrize("line, verdict", OPERANDS)
def test_operands_qualifiers_and_required_modifiers(line: str, verdict: str) -> None:
    """Registers of the wrong kind or width, special registers outside mov/cvt, float
    literals for integer types, misplaced memory-order and cache qualifiers, and
    warp-collective instructions without ``.sync``/``.aligned`` are syntax errors."""
    got = answer(line)
    assert got == (verdict if verdict in ("ok", "unsupported") else "syntax"), (line, got)


@pytest.mark.parametrize("line, sm80", [
    ("add.rn.bf16x2 %r0, %r1, %r2;", "syntax"), ("setp.lt.bf16 %p0, %h1, %h2;", "syntax"),
    ("ex2.approx.ftz.bf16 %h0, %h1;", "syntax"), ("fma.rn.bf16x2 %r0, %r1, %r2, %r3;", "ok"),
    ("max.bf16 %h0, %h1, %h2;", "ok"), ("elect.sync %r0|%p0, -1;", "syntax"),
    ("wgmma.fence.sync.aligned;", "syntax"), ("cp.async.bulk.commit_group;", "syntax"),
    ("fence.proxy.async;", "syntax"), ("mbarrier.init.shared.b64 [%r1], 1;", "ok"),
    ("griddepcontrol.wait;", "syntax"),
    ("mbarrier.arrive.shared::cta.b64 %rd1, [%r1], %r2;", "syntax"),
    ("mov.u32 %r1, %cluster_ctarank;", "syntax"), ("barrier.cluster.arrive;", "syntax"),
    ("mapa.shared::cluster.u32 %r1, %r2, %r3;", "syntax"),
    ("ld.shared::cluster.u32 %r1, [%r2];", "syntax"),
])
def test_hopper_bf16_arithmetic_needs_sm_90(line: str, sm80: str) -> None:
    """add/sub/mul/setp/ex2/tanh of bf16, wgmma, elect, bulk copies and the async proxy
    are sm_90 instructions; sm_80 has fma, min and max of bf16 and mbarrier.init."""
    assert answer(line) == "ok"
    text = kernel([line]).replace(".target sm_90a", ".target sm_80")
    if sm80 == "ok":
        parse_ptx(text, "a.ptx")
        return
    with pytest.raises(PtxSyntaxError, match=r"needs \.target sm_90 or higher"):
        parse_ptx(text, "a.ptx")


def test_the_ops_verify_the_atomic_table() -> None:
    """A lowering that built ``red.min.f32`` or ``atom.and.u32`` fails verification."""
    with pytest.raises(IRVerifyError, match=r"red\.min takes"):
        target_ops.Reduce("global", "min", "f32").verify([], [])
    with pytest.raises(IRVerifyError, match=r"atom\.and takes"):
        ptx_ops.Atom("global", "and", "u32").infer([])


def ptxas(lines: list[str], where: Path, header: str = HEADER,
          ) -> subprocess.CompletedProcess[str]:
    (where / "k.ptx").write_text(kernel(lines, header))
    arch = re.search(r"\.target (\w+)", header)
    assert arch is not None
    return subprocess.run([find_ptxas(), f"-arch={arch[1]}", "k.ptx", "-o", "k.cubin"],
                          cwd=where, capture_output=True, text=True, check=False)


def ptxas_refuses(lines: list[str], where: Path, header: str = HEADER) -> set[int]:
    """The indices of ``lines`` ptxas reports errors on, assembled as one module."""
    return {int(n) - FIRST_LINE for n in re.findall(r"k\.ptx, line (\d+); error",
                                                    ptxas(lines, where, header).stderr)}


#: instructions of later PTX ISA versions than their targets' first
VERSIONED = [
    "wgmma.fence.sync.aligned;", "elect.sync %r0|%p0, -1;", "fence.proxy.async;",
    "setmaxnreg.inc.sync.aligned.u32 240;",
    "stmatrix.sync.aligned.m8n8.x1.shared.b16 [%r1], {%r2};",
    "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;", "szext.wrap.u32 %r1, %r2, 5;",
    "ld.global.L1::evict_last.u32 %r1, [%rd1];", "max.xorsign.abs.f16 %h1, %h2, %h3;",
    "cvt.rn.satfinite.e4m3x2.f32 %h1, %f1, %f2;", "cvt.rn.f16x2.e4m3x2 %r1, %h1;",
    "atom.global.add.noftz.bf16 %h1, [%rd1], %h2;", "red.global.add.noftz.bf16x2 [%rd1], %r1;",
    "mbarrier.arrive.release.cta.shared::cta.b64 %rd2, [%r1];",
    "mbarrier.arrive.relaxed.cta.shared::cta.b64 %rd2, [%r1];",
    "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p1, [%r1], %r2;",
    "mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r1], 16;",
    "mbarrier.arrive.cta.shared::cta.b64 %rd2, [%r1];",
    "atom.global.add.v2.f32 {%f1, %f2}, [%rd1], {%f1, %f2};",
]


@pytest.mark.parametrize("target, version", [("sm_80", "7.0"), ("sm_80", "7.4"),
                                             ("sm_89", "7.8"), ("sm_90", "7.8"),
                                             ("sm_90", "8.0")])
def test_the_module_version_bounds_its_instructions(target: str, version: str,
                                                    tmp_path: Path) -> None:
    """Every pairing again, and instructions newer than their targets, in older modules:
    what needs a later ``.version`` than the module's is refused, as ptxas refuses it."""
    try:
        find_ptxas()
    except ToolchainMissing as err:
        pytest.skip(f"no ptxas here: {err}")
    header = f".version {version}\n.target {target}\n.address_size 64\n"
    lines = [*every_instruction(), *VERSIONED]
    refused = ptxas_refuses(lines, tmp_path, header)
    answers = [answer(line, header) for line in lines]
    accepted_wrongly = [ln for i, ln in enumerate(lines) if answers[i] == "ok" and i in refused]
    refused_wrongly = [ln for i, ln in enumerate(lines) if answers[i] == "syntax" and
                       i not in refused and ptxas([ln], tmp_path, header).returncode == 0]
    assert not accepted_wrongly and not refused_wrongly, (accepted_wrongly, refused_wrongly)


def test_a_target_needs_its_first_version() -> None:
    with pytest.raises(PtxSyntaxError, match=r"\.target sm_90a needs PTX ISA \.version 8\.0"):
        parse_ptx(kernel([], ".version 7.8\n.target sm_90a\n.address_size 64\n"), "a.ptx")


def test_the_reader_agrees_with_ptxas_on_every_pairing(tmp_path: Path) -> None:
    try:
        find_ptxas()
    except ToolchainMissing as err:
        pytest.skip(f"no ptxas here: {err}")
    lines = every_instruction()
    refused = ptxas_refuses(lines, tmp_path)
    answers = [answer(line) for line in lines]
    accepted_wrongly = [ln for i, ln in enumerate(lines) if answers[i] == "ok" and i in refused]
    # ptxas checks some rules (an address register's width) only in a module without
    # syntax errors: a line it passed among thousands of errors is asked again alone
    refused_wrongly = [ln for i, ln in enumerate(lines) if answers[i] == "syntax" and
                       i not in refused and ptxas([ln], tmp_path).returncode == 0]
    assert not accepted_wrongly and not refused_wrongly
    # most pairings are no instruction: the reader must have refused them itself
    assert answers.count("syntax") > 500 and len(refused) > 500
