"""The block order the CFG mode schedules by: loops before their exits, every block
before the blocks it branches forward to, whatever order branches name them in."""

from __future__ import annotations

from tessera.ir.dialects.target.cfg import schedule_order
from tessera.ir.text.ptx import parse_ptx

NESTED = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u32 n)
{
    .reg .b32 %i, %j, %n;
    .reg .pred %p;
    ld.param.u32 %n, [n];
    mov.u32 %i, 0;
OUTER:
    setp.lt.u32 %p, %i, %n;
    @%p bra BODY;
    bra.uni EXIT;
BODY:
    mov.u32 %j, 0;
INNER:
    setp.lt.u32 %p, %j, %i;
    @%p bra INNER_BODY;
    bra.uni NEXT;
INNER_BODY:
    add.s32 %j, %j, 1;
    bra.uni INNER;
NEXT:
    add.s32 %i, %i, 1;
    bra.uni OUTER;
EXIT:
    ret;
}
"""


def test_loops_come_before_their_exits() -> None:
    k = parse_ptx(NESTED).kernels["k"]
    rank = schedule_order(k.blocks)
    at = {b.label: rank[i] for i, b in enumerate(k.blocks) if b.label}
    # the branch names the loop body first and the exit second: a plain reverse
    # postorder would put EXIT before BODY and NEXT before INNER_BODY
    assert at["OUTER"] < at["BODY"] < at["INNER"] < at["INNER_BODY"] < at["NEXT"] < at["EXIT"]
    assert len(set(rank)) == len(rank)
