"""Small PTX kernels around one instruction, for the CFG mode's instruction tests."""

from __future__ import annotations

import numpy as np

import tessera as ts

HEADER = ".version 8.0\n.target sm_80\n.address_size 64\n"


def elementwise(body: str, decls: str = "") -> str:
    """A kernel ``k(a, b, c, d)`` over u32 arrays: thread ``i`` loads ``%a``, ``%b``,
    ``%c`` from ``a[i]``, ``b[i]``, ``c[i]``, runs ``body`` and stores ``%d`` to ``d[i]``."""
    return HEADER + f"""
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .b32 %a, %b, %c, %d, %t, %e;
    .reg .b64 %rd<8>;
    .reg .pred %p, %q;
    {decls}
    ld.param.u64 %rd0, [pa];
    ld.param.u64 %rd1, [pb];
    ld.param.u64 %rd2, [pc];
    ld.param.u64 %rd3, [pd];
    mov.u32 %t, %tid.x;
    mul.wide.u32 %rd4, %t, 4;
    add.s64 %rd5, %rd0, %rd4;
    ld.global.u32 %a, [%rd5];
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u32 %b, [%rd5];
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %c, [%rd5];
    {body}
    add.s64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %d;
    ret;
}}
"""


def run_elementwise(body: str, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                    decls: str = "") -> np.ndarray:
    """``d`` of :func:`elementwise` over one CTA of ``len(a)`` threads."""
    d = np.zeros(len(a), np.uint32)
    k = ts.ptx.load(elementwise(body, decls)).kernel("k")
    k.run(grid=1, block=len(a), args=[a.astype(np.uint32), b.astype(np.uint32),
                                      c.astype(np.uint32), d])
    return d
