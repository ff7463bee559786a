"""Which types each instruction takes: the reader refuses, at its line, the pairings the
PTX ISA does not list (``add.b32``, ``shl.u32``, ``mul.u32`` without ``.lo``,
``atom.min.f32``, ``red.exch`` ...), so that ``tessera check-ptx`` never passes PTX that
cannot assemble and the interpreter never runs an instruction no GPU has.

The reference is ptxas itself where it is installed: one module holds every pairing of
34 opcodes, the atomics, cvt, ld and st, their forms and 18 types (4,568 lines), and its
error lines are compared with the reader's answer line by line. The reader may still
call an instruction ptxas takes *unsupported* (it does not model it); it must never
accept one ptxas refuses, never call one ptxas takes a syntax error, and never fail with
anything but its own errors."""

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
FIRST_LINE = 13  # the line of the first instruction kernel() writes
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
    "tanh": [".approx"], "mov": [""], "selp": [""],
    "setp": [".eq", ".lt", ".lo", ".equ", ".eq.and"],
}
ONE_SOURCE = {"not", "cnot", "abs", "neg", "popc", "clz", "brev", "bfind", "sqrt", "rcp",
              "ex2", "lg2", "sin", "tanh", "mov"}
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


def kernel(lines: list[str]) -> str:
    body = "\n    ".join(lines)
    return HEADER + f""".visible .entry k(.param .u64 p)
{{
    .reg .b16 %h<5>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    .reg .f32 %f<5>;
    .reg .f64 %fd<5>;
    .reg .pred %p<5>;
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
    return registers + atomics + conversions + accesses


def answer(line: str) -> str:
    """The reader's answer: ok, syntax or unsupported (anything else fails the test)."""
    try:
        parse_ptx(kernel([line]), "a.ptx")
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


def test_the_ops_verify_the_atomic_table() -> None:
    """A lowering that built ``red.min.f32`` or ``atom.and.u32`` fails verification."""
    with pytest.raises(IRVerifyError, match=r"red\.min takes"):
        target_ops.Reduce("global", "min", "f32").verify([], [])
    with pytest.raises(IRVerifyError, match=r"atom\.and takes"):
        ptx_ops.Atom("global", "and", "u32").infer([])


def test_the_reader_agrees_with_ptxas_on_every_pairing(tmp_path: Path) -> None:
    try:
        ptxas = find_ptxas()
    except ToolchainMissing as err:
        pytest.skip(f"no ptxas here: {err}")
    lines = every_instruction()
    (tmp_path / "k.ptx").write_text(kernel(lines))
    run = subprocess.run([ptxas, "-arch=sm_90a", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    refused = {int(n) - FIRST_LINE for n in re.findall(r"k\.ptx, line (\d+); error",
                                                        run.stderr)}
    answers = [answer(line) for line in lines]
    accepted_wrongly = [ln for i, ln in enumerate(lines) if answers[i] == "ok" and i in refused]
    refused_wrongly = [ln for i, ln in enumerate(lines)
                       if answers[i] == "syntax" and i not in refused]
    assert not accepted_wrongly and not refused_wrongly
    # most pairings are no instruction: the reader must have refused them itself
    assert answers.count("syntax") > 500 and len(refused) > 500
