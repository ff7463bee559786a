"""The PTX renderer: exact-text goldens for small kernels, ptxas assembly of every kernel
(zero ``(C75`` repair notes), register tying rules and immediates.

Set ``TESSERA_UPDATE_GOLDENS=1`` to rewrite the goldens under ``tests/golden/ptx``.
"""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.backend.ptx.render import render
from tessera.backend.ptx.render.emit import PtxWriter, immediate
from tessera.backend.ptx.render.regalloc import Registers, RenderError
from tessera.errors import IRVerifyError, Loc
from tessera.ir.core import Block, Builder, Function, IRRegion, Op, Value
from tessera.ir.dialects.target import KERNEL, Condition, For, If, RegType, Return, TensorMapType
from tessera.ir.dialects.target import While as WhileOp
from tessera.ir.dialects.target import Yield as Y
from tessera.ir.dialects.target.async_ops import (
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    Fence,
    Ldmatrix,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    MmaSync,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.ops import (
    Bar,
    Binary,
    Const,
    Cvt,
    Fma,
    Load,
    Pack,
    Reduce,
    Selp,
    Setp,
    SharedAlloc,
    Shfl,
    Special,
    Store,
    Unary,
    Unpack,
)

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "ptx"
U64, U32, S32, F32 = (RegType(t) for t in ("u64", "u32", "s32", "f32"))


# --------------------------------------------------------------------------- building
def one(b: Builder, op: Op, *operands: Value, loc: Loc | None = None) -> Value:
    return b.create(op, list(operands), **({"loc": loc} if loc else {}))[0]


def do(b: Builder, op: Op, *operands: Value) -> None:
    b.create(op, list(operands))


def kernel(name: str, params: list, target: str = "sm_80", block: int = 128,
           ) -> tuple[Function, Builder, list[Value]]:
    body = Block()
    args = [body.add_arg(t) for t in params]
    return Function(name, body, [], KERNEL, {"target": target, "block": [block]}), \
        Builder(body), args


def region(args: list, fill: Callable[..., list[Value]], term: type[Op] = Y) -> IRRegion:
    """A one-block region over block arguments of types ``args``; ``fill(b, *args)``
    builds the body and returns what the terminator yields."""
    blk = Block()
    vals = [blk.add_arg(t) for t in args]
    b = Builder(blk)
    b.create(term(), fill(b, *vals))
    return IRRegion([blk])


def if_(b: Builder, p: Value, then: Callable[[Builder], list[Value]],
        other: Callable[[Builder], list[Value]] = lambda b: [], types: tuple = ()) -> list[Value]:
    return b.create(If(), [p], regions=[region([], then), region([], other)],
                    result_types=list(types))


def c(b: Builder, value: object, typ: str) -> Value:
    return one(b, Const(value, typ))


def elem_addr(b: Builder, base: Value, index: Value, size: int) -> Value:
    """``base + index * size`` (u64 base, u32 index)."""
    off = one(b, Binary("mul", "u32", "wide"), index, c(b, size, "u32"))
    return one(b, Binary("add", "u64"), base, off)


# ------------------------------------------------------------------------------ kernels
def saxpy() -> Function:
    fn, b, (x, y, a, n) = kernel("saxpy", [U64, U64, F32, U32])
    tid, cta, ntid = (one(b, Special(r)) for r in ("tid.x", "ctaid.x", "ntid.x"))
    i = one(b, Binary("add", "u32"), one(b, Binary("mul", "u32"), cta, ntid), tid)
    p = one(b, Setp("lt", "u32"), i, n, loc=Loc("saxpy.py", 5))

    def then(t: Builder) -> list[Value]:
        xa, ya = elem_addr(t, x, i, 4), elem_addr(t, y, i, 4)
        xv, yv = (one(t, Load("global", "f32"), v) for v in (xa, ya))
        r = one(t, Fma("f32"), a, xv, yv, loc=Loc("saxpy.py", 7))
        do(t, Store("global", "f32"), ya, r)
        return []

    if_(b, p, then)
    do(b, Return())
    return fn


def strided_sum() -> Function:
    """Per-thread strided sum (ptx.for, one carried f32), then a warp shuffle tree in a
    ptx.while carrying (sum, offset), then lane 0 adds the warp's sum to out."""
    fn, b, (x, out, n) = kernel("strided_sum", [U64, U64, S32], block=32)
    tid = one(b, Cvt("s32", "u32"), one(b, Special("tid.x")))
    ntid = one(b, Cvt("s32", "u32"), one(b, Special("ntid.x")))

    def body(t: Builder, i: Value, acc: Value) -> list[Value]:
        v = one(t, Load("global", "f32"), elem_addr(t, x, one(t, Cvt("u32", "s32"), i), 4))
        return [one(t, Binary("add", "f32", "rn"), acc, v)]

    (s,) = b.create(For(), [tid, n, ntid, c(b, 0.0, "f32")],
                    regions=[region([S32, F32], body)])

    def cond(t: Builder, s: Value, k: Value) -> list[Value]:
        return [one(t, Setp("gt", "u32"), k, c(t, 0, "u32"))]

    def step(t: Builder, s: Value, k: Value) -> list[Value]:
        other = one(t, Shfl("down"), s, k)
        return [one(t, Binary("add", "f32", "rn"), s, other),
                one(t, Binary("shr", "u32"), k, c(t, 1, "u32"))]

    s, _ = b.create(WhileOp(), [s, c(b, 16, "u32")],
                    regions=[region([F32, U32], cond, Condition), region([F32, U32], step)])
    lane0 = one(b, Setp("eq", "u32"), one(b, Special("laneid")), c(b, 0, "u32"))
    if_(b, lane0, lambda t: (do(t, Reduce("global", "add", "f32"), out, s), [])[1])
    do(b, Return())
    return fn


def shared_reduce() -> Function:
    """Tree sum of 128 floats in shared memory with bar.sync between levels."""
    fn, b, (x, out) = kernel("shared_reduce", [U64, U64])
    tid = one(b, Special("tid.x"))
    buf = one(b, SharedAlloc("red_buf", 512, 16))
    mine = one(b, Binary("add", "u32"), buf, one(b, Binary("shl", "u32"), tid, c(b, 2, "u32")))
    do(b, Store("shared", "f32"), mine, one(b, Load("global", "f32"), elem_addr(b, x, tid, 4)))
    do(b, Bar(0))

    def cond(t: Builder, s: Value) -> list[Value]:
        return [one(t, Setp("gt", "u32"), s, c(t, 0, "u32"))]

    def level(t: Builder, s: Value) -> list[Value]:
        def add(u: Builder) -> list[Value]:
            peer = one(u, Binary("add", "u32"), mine,
                       one(u, Binary("shl", "u32"), s, c(u, 2, "u32")))
            a, bb = (one(u, Load("shared", "f32"), v) for v in (mine, peer))
            do(u, Store("shared", "f32"), mine, one(u, Binary("add", "f32", "rn"), a, bb))
            return []
        if_(t, one(t, Setp("lt", "u32"), tid, s), add)
        do(t, Bar(0))
        return [one(t, Binary("shr", "u32"), s, c(t, 1, "u32"))]

    b.create(WhileOp(), [c(b, 64, "u32")],
             regions=[region([U32], cond, Condition), region([U32], level)])
    first = one(b, Setp("eq", "u32"), tid, c(b, 0, "u32"))
    if_(b, first, lambda t: (do(t, Store("global", "f32"), out,
                                          one(t, Load("shared", "f32"), buf)), [])[1])
    do(b, Return())
    return fn


def mma_sm80() -> Function:
    """cp.async a 16x16 bf16 A and 16x8 B tile, ldmatrix x4 / x2.trans, one mma.sync."""
    fn, b, (a, bm, out) = kernel("mma_sm80", [U64, U64, U64], block=32)
    lane = one(b, Special("tid.x"))
    sa, sb = one(b, SharedAlloc("sa", 512, 128)), one(b, SharedAlloc("sb", 256, 128))
    off16 = one(b, Binary("shl", "u32"), lane, c(b, 4, "u32"))
    do(b, CpAsync(16), one(b, Binary("add", "u32"), sa, off16), elem_addr(b, a, lane, 16))
    half = one(b, Setp("lt", "u32"), lane, c(b, 16, "u32"))
    if_(b, half, lambda t: (do(t, CpAsync(16), one(t, Binary("add", "u32"), sb, off16),
                               elem_addr(t, bm, lane, 16)), [])[1])
    do(b, CpAsyncCommit())
    do(b, CpAsyncWait(0))
    do(b, Bar(0))
    # lanes 0-15 address rows 0-15 of the left 8 columns, lanes 16-31 the right 8
    row = one(b, Binary("and", "u32"), lane, c(b, 15, "u32"))
    col = one(b, Binary("shr", "u32"), lane, c(b, 4, "u32"))
    a_off = one(b, Binary("add", "u32"), one(b, Binary("shl", "u32"), row, c(b, 5, "u32")),
                one(b, Binary("shl", "u32"), col, c(b, 4, "u32")))
    fa = one(b, Ldmatrix(4), one(b, Binary("add", "u32"), sa, a_off))
    b_off = one(b, Binary("shl", "u32"), row, c(b, 4, "u32"))
    fb = one(b, Ldmatrix(2, trans=True), one(b, Binary("add", "u32"), sb, b_off))
    zero = c(b, 0.0, "f32")
    acc = one(b, Pack("f32"), zero, zero, zero, zero)
    d = one(b, MmaSync("m16n8k16", "bf16", "bf16"), fa, fb, acc)
    do(b, Store("global", "f32", 4), elem_addr(b, out, lane, 16), d)
    do(b, Return())
    return fn


def wgmma_sm90(atype: str = "bf16", reuse_acc: bool = False) -> Function:
    """TMA loads of two 64x64 tiles under an mbarrier, then one wgmma m64n64 from two
    128B-swizzled K-major descriptors; every thread stores its 32 accumulators."""
    tm = TensorMapType(0, atype, (64, 64 if atype == "bf16" else 128), 128)
    fn, b, (ta, tb, out) = kernel(f"wgmma_{atype}", [tm, tm, U64], target="sm_90a")
    tid = one(b, Special("tid.x"))
    sa, sb = one(b, SharedAlloc("sa", 8192, 1024)), one(b, SharedAlloc("sb", 8192, 1024))
    bar = one(b, SharedAlloc("bar", 8, 8))
    leader = one(b, Setp("eq", "u32"), tid, c(b, 0, "u32"))

    def init(t: Builder) -> list[Value]:
        do(t, MbarrierInit(1), bar)
        do(t, Fence("mbarrier_init"))
        return []

    def load(t: Builder) -> list[Value]:
        do(t, MbarrierArrive(tx=16384), bar)
        zero = c(t, 0, "s32")
        do(t, TmaLoad(), sa, ta, zero, zero, bar)
        do(t, TmaLoad(), sb, tb, zero, zero, bar)
        return []

    if_(b, leader, init)
    do(b, Bar(0))
    if_(b, leader, load)
    do(b, MbarrierWait(), bar, c(b, 0, "u32"))
    # PTX ISA sec. 9.7.15.5.1 "Matrix Descriptor": start >> 4 in bits 0-13, stride byte
    # offset 1024 >> 4 in bits 32-45, 128B swizzle (1) in bits 62-63
    high = c(b, (1024 >> 4) << 32 | 1 << 62 | 1 << 16, "u64")

    def desc(addr: Value) -> Value:
        start = one(b, Binary("shr", "u32"), one(b, Binary("and", "u32"), addr,
                                                 c(b, 0x3FFFF, "u32")), c(b, 4, "u32"))
        return one(b, Binary("or", "u64"), one(b, Cvt("u64", "u32"), start), high)

    da, db = desc(sa), desc(sb)
    zero = c(b, 0.0, "f32")
    acc = one(b, Pack("f32"), *[zero] * 32)
    do(b, WgmmaFence())
    d = one(b, Wgmma(64, atype, atype), acc, da, db, c(b, False, "pred"))
    do(b, WgmmaCommit())
    do(b, WgmmaWait(0))
    regs = b.create(Unpack("f32", 32), [acc if reuse_acc else d])
    base = elem_addr(b, out, tid, 128)
    for k in range(8):
        do(b, Store("global", "f32", 4, 16 * k), base, one(b, Pack("f32"), *regs[4 * k:4 * k + 4]))
    do(b, Return())
    return fn


# ------------------------------------------------------------------------------- ptxas
def ptxas(text: str, arch: str, tmp_path: Path) -> str:
    """Assemble with the venv's ptxas; fail on errors and on any (C75xx) repair note."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    exe = pathfinder.find_nvidia_binary_utility("ptxas")
    if exe is None:
        pytest.skip("ptxas is not installed")
    src = tmp_path / "k.ptx"
    src.write_text(text)
    proc = subprocess.run([exe, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log + "\n" + text
    assert "(C75" not in log, log
    return log


KERNELS = {"saxpy": (saxpy, "sm_80"), "strided_sum": (strided_sum, "sm_80"),
           "shared_reduce": (shared_reduce, "sm_80"), "mma_sm80": (mma_sm80, "sm_80"),
           "wgmma_bf16": (wgmma_sm90, "sm_90a"),
           "wgmma_e4m3": (lambda: wgmma_sm90("e4m3"), "sm_90a")}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_assembles(name: str, tmp_path: Path) -> None:
    build, arch = KERNELS[name]
    ptxas(render(build()), arch, tmp_path)


@pytest.mark.parametrize("name", ["saxpy", "strided_sum", "shared_reduce"])
def test_golden(name: str) -> None:
    text = render(KERNELS[name][0]())
    path = GOLDEN / f"{name}.ptx"
    if os.environ.get("TESSERA_UPDATE_GOLDENS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


def everything_sm80() -> Function:
    """Every remaining sm_80 rule in one kernel: the arithmetic, comparison, conversion,
    pack/unpack, shuffle and mbarrier forms, and a ptx.for whose carried values swap."""
    fn, b, (x, s, h) = kernel("everything", [U64, S32, RegType("f16")])
    f = one(b, Load("global", "f32"), x)
    for op in ("add", "sub", "mul", "div", "min", "max"):
        f = one(b, Binary(op, "f32"), f, f)
    for op in ("neg", "abs", "sqrt", "rcp", "ex2", "lg2", "mov"):
        f = one(b, Unary(op, "f32"), f)
    i = s
    for op in ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor"):
        i = one(b, Binary(op, "s32"), i, s)
    i = one(b, Binary("shr", "s32"), one(b, Binary("shl", "s32"), i, c(b, 3, "u32")),
            c(b, 1, "u32"))
    i = one(b, Unary("not", "s32"), one(b, Unary("neg", "s32"), i))
    p = one(b, Setp("lt", "s32"), i, s)
    q = one(b, Setp("geu", "f32"), f, f)
    pq = one(b, Selp("pred"), p, q, one(b, Binary("xor", "pred"), p, q))
    f = one(b, Selp("f32"), f, one(b, Cvt("f32", "s32"), i), pq)
    (f,) = if_(b, pq, lambda t: [f], lambda t: [one(t, Binary("mul", "f32"), f, f)], (F32,))
    i = one(b, Cvt("s32", "f32"), f)
    d = one(b, Binary("add", "f64"), one(b, Cvt("f64", "f32"), f), c(b, 0.1, "f64"))
    f = one(b, Binary("add", "f32"), f, one(b, Cvt("f32", "f64"), d))
    f = one(b, Binary("add", "f32"), f, one(b, Cvt("f32", "f16"), h))
    bf = one(b, Cvt("bf16x2", "f32"), f, f)
    lo, hi = b.create(Unpack("b16", 2), [bf])
    w = one(b, Pack("b64"), one(b, Pack("b32"), lo, hi), one(b, Cvt("u32", "s32"), i))
    do(b, Store("global", "b64"), x, w)
    do(b, Store("global", "f16", offset=8), x, one(b, Cvt("f16", "f32"), f))
    do(b, Store("global", "bf16", offset=10), x, c(b, 1.5, "bf16"))
    do(b, Store("global", "f16", offset=12), x, c(b, -2.0, "f16"))
    do(b, Store("global", "s64", offset=16), x, c(b, -3, "s64"))
    lane = one(b, Special("laneid"))
    do(b, Reduce("global", "add", "u32"), x, one(b, Shfl("bfly"), lane, c(b, 1, "u32")))
    bar = one(b, SharedAlloc("mbar", 8, 8))
    do(b, MbarrierInit(32), bar)
    do(b, Bar(0))
    do(b, MbarrierArrive(), bar)
    do(b, Fence("acq_rel_cta"))
    do(b, MbarrierWait(), bar, c(b, 0, "u32"))
    do(b, Fence("sc_gpu"))
    do(b, Fence("membar_cta"))
    flag = one(b, Load("shared", "u32", order="acquire.cta"), bar)
    do(b, Store("global", "u32", offset=24, order="release.gpu"), x, flag)
    do(b, Store("global", "u32", offset=28, order="volatile"), x, flag)
    do(b, Reduce("global", "add", "u32", order="relaxed.sys"), x, flag)
    lo2 = one(b, Load("shared", "f32", 2), bar)
    a0, a1 = b.create(Unpack("f32", 2), [lo2])
    r = b.create(For(), [c(b, 0, "s32"), s, c(b, 1, "s32"), a0, a1],
                 regions=[region([S32, F32, F32], lambda t, k, u, v: [v, u])])
    do(b, Store("global", "f32", 2), x, one(b, Pack("f32"), *r))
    do(b, Return())
    return fn


def test_everything_sm80_assembles(tmp_path: Path) -> None:
    text = render(everything_sm80())
    # PTX ISA sec. 9.7.13.15.16: mbarrier.test_wait.parity needs PTX 7.1 (try_wait: sm_90)
    assert text.startswith(".version 7.1\n.target sm_80\n")
    assert "\tfence.acq_rel.cta;\n" in text  # PTX ISA sec. 9.7.13.4: sm_70 on
    for line in ("fence.sc.gpu;", "membar.cta;", "ld.acquire.cta.shared.u32 ",
                 "st.release.gpu.global.u32 ", "st.volatile.global.u32 ",
                 "red.relaxed.sys.global.add.u32 "):  # sec. 9.7.9.8, 9.7.9.10, 9.7.13.6
        assert f"\t{line}" in text
    ptxas(text, "sm_80", tmp_path)


@pytest.mark.parametrize("op, operands", [
    (Load("shared", "u32", order="release.cta"), [RegType("u32")]),  # ld takes no release
    (Load("shared", "u32", order="relaxed"), [RegType("u32")]),  # a semantics needs a scope
    (Store("global", "u32", order="acquire.gpu"), [RegType("u64"), RegType("u32")]),
    (Store("global", "u32", order="volatile.cta"), [RegType("u64"), RegType("u32")]),
    (Reduce("global", "add", "u32", order="acquire"), [RegType("u64"), RegType("u32")]),
    (Reduce("global", "add", "u32", order="cta.gpu"), [RegType("u64"), RegType("u32")]),
])
def test_memory_orders_the_ptx_isa_does_not_define_fail_to_verify(op: Op,
                                                                  operands: list) -> None:
    with pytest.raises(IRVerifyError, match="has no memory order"):
        op.verify(operands, op.infer(operands))


def test_op_without_rule_raises() -> None:
    @dataclass(frozen=True)
    class Mystery(Op):
        name: ClassVar[str] = "test.mystery"

        def infer(self, operands: object) -> tuple:
            return ()

    fn, b, _ = kernel("k", [])
    b.create(Mystery(), [])
    with pytest.raises(RenderError, match=r"no PTX rule for op test\.mystery"):
        render(fn)


def test_wgmma_accumulator_used_after_raises() -> None:
    with pytest.raises(RenderError, match=r"accumulator of ptx\.wgmma is used after"):
        render(wgmma_sm90(reuse_acc=True))


def test_wgmma_accumulator_from_outside_loop_raises() -> None:
    fn, b, _ = kernel("k", [], target="sm_90a")
    zero = c(b, 0.0, "f32")
    acc = one(b, Pack("f32"), *[zero] * 4)
    desc, p = c(b, 0, "u64"), c(b, True, "pred")

    def body(t: Builder, i: Value) -> list[Value]:
        one(t, Wgmma(8, "bf16", "bf16"), acc, desc, desc, p)
        return []

    n = c(b, 4, "s32")
    b.create(For(), [n, n, n], regions=[region([S32], body)])
    with pytest.raises(RenderError, match="defined outside the loop"):
        render(fn)


def test_sm90_instruction_on_sm80_raises() -> None:
    fn, b, _ = kernel("k", [])
    do(b, WgmmaFence())
    with pytest.raises(RenderError, match="needs target sm_90a"):
        render(fn)


def test_line_map_points_at_source_lines() -> None:
    text, locs = render(saxpy(), line_map=True)
    lines = text.splitlines()
    assert set(locs.values()) == {Loc("saxpy.py", 5), Loc("saxpy.py", 7)}
    assert [lines[n - 1].strip().split()[0] for n in sorted(locs)] == ["setp.lt.u32",
                                                                       "fma.rn.f32"]


def test_versions_are_minimal(tmp_path: Path) -> None:
    """PTX ISA sec. 9.7.15 (wgmma) and 9.7.9.27 (cp.async.bulk.tensor) need PTX 8.0:
    the rendered 8.0 assembles and the same text at 7.8 does not."""
    text = render(wgmma_sm90())
    assert text.startswith(".version 8.0\n")
    ptxas(text, "sm_90a", tmp_path)
    with pytest.raises(AssertionError):
        ptxas(text.replace(".version 8.0", ".version 7.8", 1), "sm_90a", tmp_path)


def _run_moves(lines: list[str], regs: dict[str, int]) -> dict[str, int]:
    for line in lines:
        _, dst, src = line.replace(",", "").rstrip(";").split()
        regs[dst] = regs[src]
    return regs


@given(st.permutations(range(5)))
def test_parallel_move_is_a_simultaneous_assignment(perm: list[int]) -> None:
    """Yield moves into loop-carried registers must act as one parallel assignment."""
    e = PtxWriter(Registers(), "sm_80", (7, 0))
    dsts = list(e.regs.fresh("u32", 5))
    srcs = [dsts[k] for k in perm]
    e.move(dsts, srcs, "u32")
    start = {r: i for i, r in enumerate(dsts)}
    start.update({f"%r{k}": -1 for k in range(5, 20)})
    after = _run_moves([t for t, _ in e.lines], start)
    assert [after[d] for d in dsts] == list(perm)


def _bf16_bits(x: float) -> int:
    """Round-to-nearest-even f32 -> bf16 by integer arithmetic (finite inputs)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


@given(st.floats(width=32, allow_nan=False))
def test_float_immediates_are_exact_hex(x: float) -> None:
    """PTX ISA sec. 4.5.1: 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX are IEEE bit patterns."""
    assert immediate(x, "f32") == f"0f{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"
    assert immediate(x, "f64") == f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"
    if abs(x) < 3.3e38:  # below the bf16 overflow threshold
        assert immediate(x, "bf16") == f"0x{_bf16_bits(x):04X}"


def test_integer_immediates() -> None:
    assert immediate(-1, "u32") == "4294967295"
    assert immediate(-1, "s32") == "-1"
    assert immediate(-1, "b16") == "0xFFFF"
    assert immediate(True, "pred") == "1"
    assert immediate((1.0, -2.0), "f16x2") == "0xC0003C00"


def test_missing_wgmma_wait_is_caught(tmp_path: Path) -> None:
    """PTX ISA sec. 9.7.15.6.3: accumulators are read only after wgmma.wait_group. ptxas
    repairs a missing wait with a (C7517) note, which the ptxas helper treats as failure."""
    text = render(wgmma_sm90()).replace("\twgmma.wait_group.sync.aligned 0;\n", "")
    with pytest.raises(AssertionError, match="C7517"):
        ptxas(text, "sm_90a", tmp_path)


def test_wgmma_transpose_immediates_follow_the_op() -> None:
    """imm-trans-b (PTX ISA sec. 9.7.15.5.1) is 1 for an MN-major B (a row-major K x N
    tile, as the example GEMM's B), 0 for K-major; the interpreter decodes the
    descriptor the same way, so the PTX must say which."""
    import ml_dtypes
    import numpy as np

    import tessera as ts
    from tests.lower.sm90a.test_pipeline import GEMM

    a = np.zeros((128, 64), ml_dtypes.bfloat16)
    b = np.zeros((64, 128), ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    ptx = ts.compile_kernel(GEMM, a, b, c, target="sm_90a", tile_shape=(64, 64, 64)).ptx
    lines = [t for t in ptx.splitlines() if "wgmma.mma_async" in t]
    assert lines and all(t.rstrip().endswith(", 1, 1, 0, 1;") for t in lines)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_bf16_arithmetic_keeps_its_type_name(op: str, tmp_path: Path) -> None:
    """bf16 is a float type: ``add.rn.bf16`` (sm_90), never an untyped ``bN`` register's
    ``uN`` suffix (a ``.uf16`` that ptxas rejects)."""
    from tests.interp.target.kit import Kernel

    k = Kernel("bf16_arith", [RegType("u64")], block=(32,), target="sm_90a")
    x = k.const(1.5, "bf16")
    y = k.bin(op, "bf16", x, x, mode="rn")
    k.st("global", "bf16", k.elem_addr(k.args[0], k.tid(), 2), y)
    text = render(k.build())
    assert f"{op}.rn.bf16 " in text and "uf16" not in text
    ptxas(text, "sm_90a", tmp_path)


@pytest.mark.parametrize(("build", "what"), [
    (lambda k: k.bin("add", "bf16", k.const(1.5, "bf16"), k.const(1.5, "bf16"), mode="rn"),
     "bin"),
    (lambda k: k.cvt("bf16", "f64", k.const(1.5, "f64"), rnd="rn"), "cvt"),
    (lambda k: k.cvt("bf16", "s32", k.const(3, "s32"), rnd="rn"), "cvt"),
])
def test_sm90_bf16_forms_are_refused_on_sm80(build: Callable, what: str) -> None:
    """bf16 add/sub/mul and conversions between bf16 and anything but f32 exist from
    sm_90 on (ptxas: "requires .target sm_90 or higher"): refused when rendering, at the
    instruction, instead of failing in ptxas."""
    from tests.interp.target.kit import Kernel

    k = Kernel("bf16_sm80", [RegType("u64")], block=(32,), target="sm_80")
    k.st("global", "bf16", k.elem_addr(k.args[0], k.tid(), 2), build(k))
    with pytest.raises(RenderError, match=f"ptx.{what}.*needs target sm_90a"):
        render(k.build())


def test_cvt_f32_from_bf16_declares_ptx_7_1(tmp_path: Path) -> None:
    """cvt.f32.bf16 needs PTX ISA 7.1 (ptxas refuses it under an older .version)."""
    from tests.interp.target.kit import Kernel

    k = Kernel("bf16_f32", [RegType("u64")], block=(32,), target="sm_80")
    v = k.cvt("f32", "bf16", k.const(1.5, "bf16"))
    k.st("global", "f32", k.elem_addr(k.args[0], k.tid(), 4), v)
    text = render(k.build())
    version = tuple(int(x) for x in text.split(".version ")[1].split()[0].split("."))
    assert version >= (7, 1)
    ptxas(text, "sm_80", tmp_path)


def test_a_vector_unary_is_one_instruction_per_register() -> None:
    """``mov`` (or any unary) of a 4-register vector: four element instructions, and
    the text runs to the same bits as the structured kernel."""
    import numpy as np

    import tessera as ts
    from tessera.interp.target import run_target

    fn, b, (x,) = kernel("vmov", [U64], block=32)
    v = one(b, Pack("f32"), *(one(b, Load("global", "f32", offset=4 * i), x) for i in range(4)))
    w = one(b, Unary("neg", "f32"), one(b, Unary("mov", "f32"), v))
    for i, e in enumerate(b.create(Unpack("f32", 4), [w])):
        do(b, Store("global", "f32", offset=16 + 4 * i), x, e)
    do(b, Return())
    text = render(fn)
    assert text.count("\tneg.f32") == 4
    structured, from_text = (np.arange(8, dtype=np.float32) for _ in range(2))
    run_target(fn, [structured], grid=(1,), block=(32,))
    ts.ptx.load(text).kernel("vmov").run(grid=1, block=32, args=[from_text])
    assert structured[4:].tolist() == [-0.0, -1.0, -2.0, -3.0]
    np.testing.assert_array_equal(from_text, structured)
