"""Reading PTX text: statements, directives, declarations, blocks, and errors that
name the file, line and instruction."""

from __future__ import annotations

import pytest

from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.text.ptx import PtxSyntaxError, PtxUnsupportedError, parse_ptx
from tessera.ir.text.ptx.lexer import parse_float_bits, parse_int, statements

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def test_statements_drop_comments_and_debug_and_keep_lines() -> None:
    text = """.version 8.0 // the ISA
.target sm_80
.file 1 "k.cu"
/* a
   block comment */ .address_size 64
L1: L2: add.s32 %r1, %r2, 3; .loc 1 2 3
ld.shared.v2.f32 {%f1, %f2}, [%r3+8];
.section .debug_info { .b8 1, 2 }
"""
    got = [(s.kind, s.text, s.loc.line) for s in statements(text, "k.ptx")]
    assert got[:3] == [("stmt", ".version 8.0", 1), ("stmt", ".target sm_80", 2),
                       ("stmt", ".address_size 64", 5)]
    assert got[3:] == [("label", "L1", 6), ("label", "L2", 6),
                       ("stmt", "add.s32 %r1, %r2, 3", 6),
                       ("stmt", "ld.shared.v2.f32 {%f1, %f2}, [%r3+8]", 7)]


def test_literals() -> None:
    assert [parse_int(t) for t in ("0x1F", "-4", "017", "0b101", "7U", "%r1")] == \
        [31, -4, 15, 5, 7, None]
    assert parse_float_bits("0f3F800000") == (0x3F800000, 32)
    assert parse_float_bits("0dBFF0000000000000") == (0xBFF0000000000000, 64)


KERNEL = HEADER + """
.shared .align 8 .b8 mod_buf[12];
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(
    .param .u32 k_n,
    .param .u64 .ptr .global .align 1 k_p,
    .param .align 64 .b8 k_tmap[128],
    .param .f32 k_x
)
.maxntid 128, 1, 1
{
    .reg .b32 %r<3>;
    .reg .pred %p;
    .shared .align 1024 .b8 local_buf[2048];
    ld.param.u32 %r0, [k_n];
    {
    .reg .pred %p;
    setp.eq.u32 %p, %r0, 0;
    @%p bra DONE;
    }
    add.s32 %r1, %r0, 1;
DONE:
    ret;
}
"""


def test_kernel_params_registers_shared_and_blocks() -> None:
    k = parse_ptx(KERNEL, "k.ptx").kernels["k"]
    assert [(p.name, p.type, p.offset, p.size, p.array) for p in k.params] == [
        ("k_n", "u32", 0, 4, 0), ("k_p", "u64", 8, 8, 0), ("k_tmap", "b8", 64, 128, 128),
        ("k_x", "f32", 192, 4, 0)]
    assert k.attrs == {"maxntid": (128, 1, 1)}
    assert {"%r0", "%r1", "%r2", "%p"} <= set(k.registers)
    assert len([r for r in k.registers if r.startswith("%p")]) == 2  # the inner %p renamed
    placed = {v.name: (v.address, v.dynamic) for v in k.shared}
    # from shared address 1024: the kilobyte below is reserved for system use
    assert placed == {"mod_buf": (1024, False), "local_buf": (2048, False), "dyn": (4096, True)}
    assert k.static_shared == 3072  # bytes, the reserve not counted
    first = k.blocks[0]
    assert first.end.kind == "cond" and k.blocks[first.end.target].label == "DONE"
    assert first.end.guard is not None and first.end.guard[0] != "%p"
    assert isinstance(k.blocks[first.end.fallthrough].body[0].instrs[-1].op, target_ops.Binary)


@pytest.mark.parametrize("line, error, message", [
    ("frobnicate.b32 %r0, %r1;", PtxUnsupportedError, "unknown instruction 'frobnicate.b32'"),
    ("add.s32 %r0, %r9, 1;", PtxSyntaxError, "register %r9 is not declared"),
    ("add.sat.f32 %f0, %f0, %f0;", PtxUnsupportedError, "the .sat modifier"),
    ("bra NOWHERE;", PtxSyntaxError, "unknown label NOWHERE"),
    ("ld.global.v4.u32 {%r0}, [%rd0];", PtxSyntaxError, "1 destination registers for 4"),
    ("ld.global.v8.u32 {%r0}, [%rd0];", PtxSyntaxError, "moves 256 bits"),
    ("add.s32 %r0, %r1;", PtxSyntaxError, "expected 3 operands"),
    ("mov.f32 %f0, 7;", PtxSyntaxError, "integer literal 7 for a .f32 operand"),
    ("call foo, (%r0);", PtxSyntaxError, "call of foo, which is not a .func"),
])
def test_errors_name_file_line_and_instruction(line: str, error: type, message: str) -> None:
    text = HEADER + f"""
.visible .entry k()
{{
    .reg .b32 %r<2>;
    .reg .f32 %f0;
    .reg .b64 %rd0;
    {line}
    ret;
}}
"""
    with pytest.raises(error, match=message) as err:
        parse_ptx(text, "bad.ptx")
    assert str(err.value.loc) == "bad.ptx:10"
    if "label" not in message:
        assert line.rstrip(";") in str(err.value)


def test_unknown_directive_and_module_variables() -> None:
    with pytest.raises(PtxUnsupportedError, match=r"directive '\.blah 3'") as err:
        parse_ptx(HEADER + ".blah 3;\n", "m.ptx")
    assert err.value.loc.line == 4
    module = parse_ptx(HEADER + ".global .align 4 .u32 counter[2] = {7, 0x8};\n", "m.ptx")
    (var,) = module.globals
    assert (var.name, var.size, var.space, var.init) == ("counter", 8, "global",
                                                         bytes([7, 0, 0, 0, 8, 0, 0, 0]))
    with pytest.raises(PtxUnsupportedError, match=r"initial value '1\.5'"):
        parse_ptx(HEADER + ".global .f32 x = 1.5;\n", "m.ptx")


SCOPED = HEADER + """
.visible .entry k()
{
    .reg .b32 %r<2>;
    mov.u32 %r0, %tid.x;
    {
    .reg .pred done;
    again:
    setp.eq.u32 done, %r0, 0;
    @!done bra.uni again;
    @done bra OUT;
    }
    {
    .reg .pred done;
    again:
    setp.ne.u32 done, %r0, 0;
    @!done bra.uni again;
    }
OUT:
    ret;
}
"""


def test_labels_and_registers_scoped_by_blocks() -> None:
    """Inline assembly repeats its labels and names registers without ``%``: each
    ``{ }`` block has its own (ptxas takes this), a branch finds the innermost label
    of its name, and a label alone on its line leaves the next line its own number."""
    k = parse_ptx(SCOPED, "k.ptx").kernels["k"]
    loops = [b for b in k.blocks if b.label and b.label.startswith("again")]
    assert len(loops) == 2
    for loop in loops:  # each block's loop branches back to itself
        assert k.blocks[loop.end.target] is loop and loop.end.guard is not None
    assert [s.loc.line for s in statements(SCOPED, "k.ptx") if "setp" in s.text] == [12, 19]
    with pytest.raises(PtxSyntaxError, match="label again defined twice"):
        parse_ptx(SCOPED.replace("    }\n    {\n", ""), "k.ptx")
    with pytest.raises(PtxSyntaxError, match="unknown label again"):  # not seen from outside
        parse_ptx(SCOPED.replace("OUT:\n", "OUT:\n    bra again;\n"), "k.ptx")


@pytest.mark.parametrize("opcode", ["setp.gtu.ftz.f32", "setp.ftz.gtu.f32"])
def test_setp_takes_ftz_before_or_after_its_comparison(opcode: str) -> None:
    """ptxas assembles both orders; each reads as one ``gtu`` comparison that flushes
    subnormal operands, combined with ``%p2`` by ``.and`` where that follows."""
    for tail, combined in (("", False), (".and", True)):
        form = opcode.replace(".f32", f"{tail}.f32")
        extra = ", %p2" if combined else ""
        module = parse_ptx(HEADER + f""".visible .entry k()
{{
    .reg .pred %p<3>;
    .reg .f32 %f<3>;
    setp.eq.f32 %p2, %f1, %f2;
    {form} %p1, %f1, %f2{extra};
    ret;
}}
""")
        ops = [i.op for b in module.kernels["k"].blocks for pi in b.body for i in pi.instrs]
        setps = [op for op in ops if isinstance(op, target_ops.Setp)]
        assert (setps[-1].cmp, setps[-1].ftz) == ("gtu", True)
        assert any(isinstance(op, target_ops.Binary) and op.op == "and" for op in ops) == \
            combined
