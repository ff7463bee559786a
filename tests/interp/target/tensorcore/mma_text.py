"""A one-warp PTX kernel around one ``mma.sync``, as a third-party compiler would write
it: each lane loads its A (16 bytes), B (8 bytes) and C (4 words) fragments from
per-lane rows of global memory, runs the instruction and stores D the same way."""

from __future__ import annotations

import numpy as np


def one_mma_kernel(mma: str, acc: str, version: str = "8.0") -> str:
    """The kernel ``k(pa, pb, pc, pd)`` running ``mma`` (the instruction's name, e.g.
    ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``) on accumulators of PTX type
    ``acc`` (``f32`` or ``s32``)."""
    return f""".version {version}
.target sm_80
.address_size 64

.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .b32 %a<4>, %b<2>, %t;
    .reg .{acc} %c<4>, %d<4>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd0, [pa];
    ld.param.u64 %rd1, [pb];
    ld.param.u64 %rd2, [pc];
    ld.param.u64 %rd3, [pd];
    mov.u32 %t, %tid.x;
    mul.wide.u32 %rd4, %t, 16;
    mul.wide.u32 %rd5, %t, 8;
    add.s64 %rd6, %rd0, %rd4;
    ld.global.v4.u32 {{%a0, %a1, %a2, %a3}}, [%rd6];
    add.s64 %rd7, %rd1, %rd5;
    ld.global.v2.u32 {{%b0, %b1}}, [%rd7];
    add.s64 %rd8, %rd2, %rd4;
    ld.global.v4.{acc} {{%c0, %c1, %c2, %c3}}, [%rd8];
    {mma} {{%d0, %d1, %d2, %d3}},
        {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%c0, %c1, %c2, %c3}};
    add.s64 %rd9, %rd3, %rd4;
    st.global.v4.{acc} [%rd9], {{%d0, %d1, %d2, %d3}};
    ret;
}}
"""


def c_fragments(c: np.ndarray) -> np.ndarray:
    """The 16 x 8 accumulator ``c`` as each lane's 4 words (PTX ISA sec. 9.7.14.5, the
    m16n8 C/D fragment: group g = lane / 4, t = lane % 4; word i is row g, +8 for
    words 2 and 3, column 2 t + i % 2)."""
    lane, i = np.meshgrid(np.arange(32), np.arange(4), indexing="ij")
    return np.ascontiguousarray(c[lane // 4 + 8 * (i >> 1), 2 * (lane % 4) + i % 2])


def d_matrix(fd: np.ndarray) -> np.ndarray:
    """The 16 x 8 result from each lane's 4 words of D (the layout of C)."""
    lane, i = np.meshgrid(np.arange(32), np.arange(4), indexing="ij")
    d = np.zeros((16, 8), fd.dtype)
    d[lane // 4 + 8 * (i >> 1), 2 * (lane % 4) + i % 2] = fd
    return d
