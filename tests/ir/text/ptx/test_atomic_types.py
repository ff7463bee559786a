"""Which operand types each ``atom``/``red`` operation takes: the reader refuses, at its
line, exactly the pairings ptxas refuses (``atom.min.f32``, ``atom.add.s64``,
``atom.and.u32`` ...), so that ``tessera check-ptx`` never passes PTX that cannot
assemble and the interpreter never runs an instruction with no hardware meaning."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tessera.backend.ptx.driver import ToolchainMissing, find_ptxas
from tessera.errors import IRVerifyError
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target import ptx_ops
from tessera.ir.text.ptx import PtxSyntaxError, parse_ptx

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"
OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")
TYPES = ("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64")
#: the PTX ISA's type table for atom and red (sec. 9.7.13.5-6), written out here as the
#: independent reference; ptxas 13.5 accepts exactly these (checked below where present)
ISA = {"add": "u32 s32 u64 f32 f64", "min": "u32 s32 u64 s64", "max": "u32 s32 u64 s64",
       "inc": "u32", "dec": "u32", "and": "b32 b64", "or": "b32 b64", "xor": "b32 b64",
       "exch": "b32 b64", "cas": "b32 b64"}


def instruction(head: str, op: str, elem: str) -> str:
    reg = {"f32": "%f", "f64": "%fd"}.get(elem, "%rd" if elem.endswith("64") else "%r")
    if head == "red":
        return f"red.global.{op}.{elem} [%rd2], {reg}1;"
    cmp = f", {reg}1" if op == "cas" else ""
    return f"atom.global.{op}.{elem} {reg}2, [%rd2], {reg}1{cmp};"


def kernel(lines: list[str]) -> str:
    body = "\n    ".join(lines)
    return HEADER + f""".visible .entry k(.param .u64 p)
{{
    .reg .b64 %rd<3>;
    .reg .f32 %f<3>;
    .reg .f64 %fd<3>;
    .reg .b32 %r<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    {body}
    ret;
}}
"""


def pairings() -> list[tuple[str, str, str]]:
    """Every head, operation and type; ``red`` has no ``cas`` (it returns nothing)."""
    return [(h, o, t) for h in ("atom", "red") for o in OPS for t in TYPES
            if not (h == "red" and o == "cas")]


@pytest.mark.parametrize("head, op, elem", pairings())
def test_the_reader_takes_the_isa_pairings_and_refuses_the_rest(head: str, op: str,
                                                                 elem: str) -> None:
    text = kernel([instruction(head, op, elem)])
    if elem in ISA[op].split() and not (head == "red" and op == "exch"):  # red returns none
        parse_ptx(text, "a.ptx")
        return
    message = rf"{head}(\.{op} takes .*not \.{elem}| has no operation \.{op})"
    with pytest.raises(PtxSyntaxError, match=message) as err:
        parse_ptx(text, "a.ptx")
    assert str(err.value.loc) == "a.ptx:12"


def test_the_ops_verify_the_same_table() -> None:
    """A lowering that built ``red.min.f32`` or ``atom.and.u32`` fails verification."""
    with pytest.raises(IRVerifyError, match=r"red\.min takes"):
        target_ops.Reduce("global", "min", "f32").verify([], [])
    with pytest.raises(IRVerifyError, match=r"atom\.and takes"):
        ptx_ops.Atom("global", "and", "u32").infer([])


def test_ptxas_refuses_the_same_pairings(tmp_path: Path) -> None:
    try:
        ptxas = find_ptxas()
    except ToolchainMissing as err:
        pytest.skip(f"no ptxas here: {err}")
    all_lines = [instruction(*p) for p in pairings()]
    (tmp_path / "k.ptx").write_text(kernel(all_lines))
    run = subprocess.run([ptxas, "-arch=sm_90a", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    refused = {int(n) - 12 for n in re.findall(r"k\.ptx, line (\d+); error", run.stderr)}
    ours = set()
    for i, line in enumerate(all_lines):
        try:
            parse_ptx(kernel([line]), "a.ptx")
        except PtxSyntaxError:
            ours.add(i)
    assert refused == ours and len(ours) == 106  # of 152 pairings, 46 are instructions
