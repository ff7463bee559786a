"""The instructions of other compilers' PTX (``ptx_ops``) render to PTX that ptxas
accepts, and that text, read back by ``ts.ptx``, computes what the structured Target
IR computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.render import RenderError, render
from tessera.interp.target import TargetFault, run_target
from tessera.ir.core import Builder, Function, Value
from tessera.ir.dialects.target import RegType, Return
from tessera.ir.dialects.target import ptx_ops as p
from tessera.ir.dialects.target.async_ops import MbarrierArrive, MbarrierInit, MbarrierWait
from tessera.ir.dialects.target.ops import (
    Bar,
    BarRed,
    Binary,
    Cvt,
    Load,
    Pack,
    Setp,
    SharedAlloc,
    Special,
    Store,
)
from tessera.ir.dialects.target.warp_ops import Match, Redux
from tests.backend.ptx.render.test_render import c, do, kernel, one, ptxas
from tests.interp.target.kit import Kernel

U64 = RegType("u64")
OUTPUTS = 13


def _store(b: Builder, out: Value, tid: Value, k: int, v: Value) -> None:
    """out[k * 128 + tid] = v (a 32-bit value)."""
    index = one(b, Binary("add", "u32"), tid, c(b, 128 * k, "u32"))
    off = one(b, Binary("mul", "u32", "wide"), index, c(b, 4, "u32"))
    addr = one(b, Binary("add", "u64"), out, off)
    do(b, Store("global", v.type.elem), addr, v)  # type: ignore[attr-defined]


def build() -> object:
    fn, b, (out, src, counter, olds) = kernel("ptx_ops", [U64, U64, U64, U64])
    tid = one(b, Special("tid.x"))
    off = one(b, Binary("mul", "u32", "wide"), tid, c(b, 4, "u32"))
    addr = one(b, Binary("add", "u64"), src, off)
    v = one(b, Load("global", "b32"), addr)
    u = one(b, Load("global", "u32"), addr)
    tb = one(b, Pack("b32"), tid)
    results = [
        one(b, p.Shf(True, False), v, tb, tb),
        one(b, p.Prmt(), v, tb, c(b, 0x7531, "b32")),
        one(b, p.Bfe("u32"), u, tid, c(b, 9, "u32")),
        one(b, p.Bfi("b32"), tb, v, c(b, 5, "u32"), c(b, 6, "u32")),
        one(b, p.BitCount("popc", "b32"), v),
        one(b, p.Lop3(0xE8), v, tb, one(b, Binary("xor", "b32"), v, tb)),
        one(b, Redux("add", "u32"), u),
        one(b, Redux("xor", "b32"), v, one(b, p.Vote("active"))),  # a mask in a register
        one(b, BarRed("popc"), one(b, Setp("lt", "u32"), u, c(b, 1 << 31, "u32"))),
        one(b, Match("any", "b32"), one(b, Binary("and", "b32"), v, c(b, 3, "b32"))),
        one(b, p.Vote("ballot"), one(b, Setp("lt", "u32"), u, c(b, 1 << 31, "u32"))),
    ]
    d, _ = b.create(p.ShflSync("bfly"), [v, c(b, 1, "u32"), c(b, 31, "u32"),
                                         c(b, 0xFFFFFFFF, "u32")])
    results.append(d)
    # generic addresses into shared memory: write, barrier, read a neighbour's word
    base = one(b, Cvt("u64", "u32"), one(b, SharedAlloc("buf", 512)))
    gen = one(b, p.Cvta("shared"), base)
    mine = one(b, Binary("add", "u64"), gen, off)
    b.create(p.GenericStore("u32"), [mine, u])
    do(b, Bar())
    do(b, p.WarpSync())
    other = one(b, Binary("xor", "u32"), tid, c(b, 1, "u32"))
    theirs = one(b, Binary("add", "u64"), gen,
                 one(b, Binary("mul", "u32", "wide"), other, c(b, 4, "u32")))
    results.append(one(b, p.GenericLoad("u32"), theirs))
    for k, r in enumerate(results):
        _store(b, out, tid, k, r)
    _store(b, olds, tid, 0, one(b, p.Atom("global", "add", "u32"), counter, c(b, 1, "u32")))
    do(b, Return())
    return fn


def test_rendered_ptx_assembles_and_reads_back(tmp_path: Path) -> None:
    fn = build()
    text = render(fn)
    ptxas(text, "sm_80", tmp_path)
    rng = np.random.default_rng(4)
    src = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    def arguments() -> list[np.ndarray]:
        return [np.zeros(OUTPUTS * 128, np.uint32), src.copy(), np.zeros(1, np.uint32),
                np.zeros(128, np.uint32)]

    structured = arguments()
    run_target(fn, structured, grid=(1,), block=(128,))
    from_text = arguments()
    ts.ptx.load(text).kernel("ptx_ops").run(grid=1, block=128, args=from_text)
    for s, t in zip(structured, from_text):
        np.testing.assert_array_equal(t, s)
    assert structured[2][0] == 128
    np.testing.assert_array_equal(np.sort(structured[3]), np.arange(128))  # each old once


def test_ftz_arithmetic_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    """``ftz`` on add, mul, fma, abs and setp renders as ``.ftz`` and computes, read back
    from the text, what the structured Target IR computes: subnormals flushed."""
    from tessera.ir.dialects.target.ops import Fma, Selp, Unary

    fn, b, (out, src) = kernel("ftz", [U64, U64])
    tid = one(b, Special("tid.x"))
    addr = one(b, Binary("add", "u64"), src, one(b, Binary("mul", "u32", "wide"), tid,
                                                 c(b, 4, "u32")))
    x = one(b, Load("global", "f32"), addr)
    y = one(b, Load("global", "f32", offset=512), addr)
    less = one(b, Setp("lt", "f32", True), x, y)
    for k, v in enumerate([one(b, Binary("add", "f32", "rn", True), x, y),
                           one(b, Binary("mul", "f32", "rn", True), x, y),
                           one(b, Fma("f32", True), x, y, x),
                           one(b, Unary("abs", "f32", "", True), x),
                           one(b, Selp("f32"), c(b, 1.0, "f32"), c(b, 0.0, "f32"), less)]):
        _store(b, out, tid, k, v)
    do(b, Return())
    text = render(fn)
    assert all(f in text for f in ("add.rn.ftz.f32", "mul.rn.ftz.f32", "fma.rn.ftz.f32",
                                   "abs.ftz.f32", "setp.lt.ftz.f32"))
    ptxas(text, "sm_80", tmp_path)
    rng = np.random.default_rng(9)
    vals = np.concatenate([rng.standard_normal(128) * 2.0**-126,
                           rng.standard_normal(128)]).astype(np.float32)
    structured, from_text = ([np.zeros(5 * 128, np.float32), vals.copy()] for _ in range(2))
    run_target(fn, structured, grid=(1,), block=(128,))
    ts.ptx.load(text).kernel("ftz").run(grid=1, block=128, args=from_text)
    np.testing.assert_array_equal(from_text[0].view(np.uint32), structured[0].view(np.uint32))
    flushed = structured[0][3 * 128:4 * 128]  # |x|, x below 2^-126 for the most part
    assert np.array_equal(flushed == 0, np.abs(vals[:128]) < 2.0**-126)


def _wmma_kernel() -> Any:
    """D = A B + C with wmma (bf16, m16n16k16), C loaded row-major, D stored column-major."""
    from tessera.ir.dialects.target.wmma import WmmaLoad, WmmaMma, WmmaStore

    fn, b, (pa, pb, pc) = kernel("wmma", [U64, U64, U64], block=32)
    ld = c(b, 16, "u32")
    fa = one(b, WmmaLoad("a", "row", "global", "bf16"), pa, ld)
    fb = one(b, WmmaLoad("b", "col", "global", "bf16"), pb, ld)
    acc = one(b, WmmaLoad("c", "row", "global", "f32"), pc, ld)
    d = one(b, WmmaMma("bf16"), fa, fb, acc)
    do(b, WmmaStore("col", "global"), pc, d, ld)
    do(b, Return())
    return fn


def _wmma_operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import ml_dtypes

    rng = np.random.default_rng(8)
    a = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    return a, bt, rng.standard_normal((16, 16)).astype(np.float32)


def test_wmma_under_the_hopper_model_gives_the_h200_bits() -> None:
    """An H200 ran this kernel on these operands: 82 of the 256 outputs differed from
    the exact convention, the first at (0, 1) with bits 0x408fcff5."""
    outs = {}
    for model in ("exact", "hopper"):
        args = list(_wmma_operands())
        run_target(_wmma_kernel(), args, grid=(1,), block=(32,), tensor_cores=model)
        outs[model] = args[2]
    differ = np.argwhere(outs["exact"] != outs["hopper"])
    assert len(differ) == 82 and tuple(differ[0]) == (0, 1)
    assert hex(outs["hopper"].view(np.uint32)[0, 1]) == "0x408fcff5"


def test_wmma_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    fn = _wmma_kernel()
    text = render(fn)
    ptxas(text, "sm_80", tmp_path)
    a, bt, acc0 = _wmma_operands()
    structured = [a.copy(), bt.copy(), acc0.copy()]
    run_target(fn, structured, grid=(1,), block=(32,))
    from_text = [a.copy(), bt.copy(), acc0.copy()]
    ts.ptx.load(text).kernel("wmma").run(grid=1, block=32, args=from_text)
    want = (a.astype(np.float64) @ bt.astype(np.float64).T + acc0).astype(np.float32)
    np.testing.assert_array_equal(from_text[2], structured[2])
    np.testing.assert_array_equal(from_text[2].T, want)  # stored column-major


def test_printf_renders_as_a_vprintf_call_and_reads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ptx.printf`` renders as CUDA's call sequence of ``vprintf`` (declared before
    the kernel); ptxas takes it, and the text read back prints what the structured
    Target IR prints: one line per thread, in thread order."""
    from tessera.ir.dialects.target.printf import Printf
    from tessera.ir.dialects.target.tables import ModuleVar

    fmt = b"thread %d: %5.2f\n\0"
    padded = fmt + bytes(-len(fmt) % 4)
    words = tuple(int.from_bytes(padded[k:k + 4], "little") for k in range(0, len(padded), 4))
    fn, b, (out, args) = kernel("hello", [U64, U64], block=4)
    tid = one(b, Special("tid.x"))
    at = one(b, Binary("add", "u64"), args, one(b, Binary("mul", "u32", "wide"), tid,
                                                c(b, 16, "u32")))  # {int, pad, double}
    count = one(b, Printf(), one(b, ModuleVar("fmt", len(padded), 4, words=words)), at)
    _store(b, out, tid, 0, count)
    do(b, Return())
    text = render(fn)
    assert ".extern .func (.param .b32 func_retval0) vprintf(" in text
    ptxas(text, "sm_80", tmp_path)
    buffer = np.zeros((4, 2), np.float64)
    buffer.view(np.int32)[:, 0] = np.arange(4) * 10
    buffer[:, 1] = [0.5, -1.25, 3.14159, 1e3]
    want = "".join(f"thread {10 * k}: {v:5.2f}\n" for k, v in enumerate(buffer[:, 1]))
    for run in (lambda a: run_target(fn, a, grid=(1,), block=(4,)),
                lambda a: ts.ptx.load(text).kernel("hello").run(grid=1, block=4, args=a)):
        counts = np.zeros(128, np.uint32)
        run([counts, buffer.copy()])
        assert capsys.readouterr().out == want
        np.testing.assert_array_equal(counts[:4], 2)  # printf returns the arguments' count


def test_a_failed_assert_renders_as_assertfail_and_reads_back(tmp_path: Path) -> None:
    """``ptx.assertfail`` renders as the call nvcc writes for a failed ``assert``
    (ptxas takes it); the structured Target IR and the text read back report the first
    failing thread with CUDA's message."""
    from tessera.ir.dialects.target.printf import AssertFail
    from tessera.ir.dialects.target.tables import ModuleVar

    def string(b: Builder, name: str, text: bytes) -> Value:
        padded = text + bytes(4 - len(text) % 4)  # NUL-terminated, whole words
        words = tuple(int.from_bytes(padded[k:k + 4], "little")
                      for k in range(0, len(padded), 4))
        return one(b, ModuleVar(name, len(padded), 4, words=words))

    fn, b, _ = kernel("check", [U64], block=4)
    do(b, AssertFail(), string(b, "msg", b"n > 0"), string(b, "file", b"prog.cu"),
       c(b, 12, "u32"), string(b, "func", b"void check(int)"))
    do(b, Return())
    text = render(fn)
    assert ".extern .func __assertfail(" in text
    ptxas(text, "sm_80", tmp_path)
    for run in (lambda a: run_target(fn, a, grid=(1,), block=(4,)),
                lambda a: ts.ptx.load(text).kernel("check").run(grid=1, block=4, args=a)):
        with pytest.raises(TargetFault, match="assertion failed: prog.cu:12: void "
                           r"check\(int\): Assertion `n > 0` failed") as err:
            run([np.zeros(4, np.uint32)])
        assert err.value.thread == 0


def test_a_bulk_copy_and_elect_with_registers_render_and_read_back(tmp_path: Path) -> None:
    """sm_90's 1-D bulk copy (its byte count announced on the mbarrier from a register)
    and elect.sync with the member mask in a register: rendered, assembled by ptxas,
    read back, and run with the same results as the structured Target IR."""
    from tessera.ir.dialects.target.async_ops import BulkLoad

    k = Kernel("bulk", [U64, U64], block=(128,), target="sm_90a")
    tile, bar = k.shared("tile", 512, 128), k.shared("mbar", 8, 8)
    tid = k.tid()
    first = k.setp("eq", "u32", tid, k.const(0, "u32"))
    k.if_(first, lambda: k.op(MbarrierInit(1), bar))
    k.bar()
    size = k.bin("mul", "u32", k.const(4, "u32"), k.sreg("ntid.x"))  # 512, a register

    def issue() -> None:
        k.op(MbarrierArrive(tx_operand=True), bar, size)
        k.op(BulkLoad(), tile, k.args[1], size, bar)
    k.if_(first, issue)
    k.op(MbarrierWait(), bar, k.const(0, "u32"))
    value = k.ld("shared", "u32", k.sh_addr(tile, tid, 4))
    _, elected = k.op(p.Elect(), k.const(0xFFFFFFFF, "b32"))
    out = k.bin("add", "u32", value, k.selp("u32", k.const(1, "u32"), k.const(0, "u32"),
                                           elected))
    k.st("global", "u32", k.elem_addr(k.args[0], tid, 4), out)
    fn = k.build()
    text = render(fn)
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in text
    ptxas(text, "sm_90a", tmp_path)
    src = np.arange(128, dtype=np.uint32) * 3
    want = src + (np.arange(128) % 32 == 0)
    for run in (lambda a: run_target(fn, a, grid=(1,), block=(128,)),
                lambda a: ts.ptx.load(text).kernel("bulk").run(grid=1, block=128, args=a)):
        got = np.zeros(128, np.uint32)
        run([got, src.copy()])
        np.testing.assert_array_equal(got, want)


def _one_arrival_per_warp(count: int, target: str = "sm_90a") -> Function:
    """Lane 0 of each of 4 warps arrives ``count`` times on an mbarrier of 128; every
    thread waits for the phase, then stores 1."""
    k = Kernel("arrive_count", [U64], block=(128,), target=target)
    bar = k.shared("mbar", 8, 8)
    tid = k.tid()
    k.if_(k.setp("eq", "u32", tid, k.const(0, "u32")),
          lambda: k.op(MbarrierInit(128), bar))
    k.bar()
    lane0 = k.setp("eq", "u32", k.bin("and", "u32", tid, k.const(31, "u32")), k.const(0, "u32"))
    k.if_(lane0, lambda: k.op(MbarrierArrive(count=count), bar))
    k.op(MbarrierWait(), bar, k.const(0, "u32"))
    k.st("global", "u32", k.elem_addr(k.args[0], tid, 4), k.const(1, "u32"))
    return k.build()


def test_an_arrival_count_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    """``mbarrier.arrive ... _, [addr], 32``: 32 arrivals at once (sm_90, PTX 7.8), as
    Triton releases a ring stage by one thread of a warpgroup."""
    fn = _one_arrival_per_warp(32)
    text = render(fn)
    assert "mbarrier.arrive.shared::cta.b64 _, [" in text and "], 32;" in text
    ptxas(text, "sm_90a", tmp_path)
    structured, from_text = np.zeros(128, np.uint32), np.zeros(128, np.uint32)
    run_target(fn, [structured], grid=(1,), block=(128,))
    ts.ptx.load(text).kernel("arrive_count").run(grid=1, block=128, args=[from_text])
    assert structured.tolist() == from_text.tolist() == [1] * 128
    with pytest.raises(TargetFault, match="phase never completes"):  # 4 x 31 of 128
        run_target(_one_arrival_per_warp(31), [np.zeros(128, np.uint32)], grid=(1,),
                   block=(128,))
    with pytest.raises(RenderError, match="needs target sm_90a"):
        render(_one_arrival_per_warp(32, "sm_80"))


def test_a_vector_atomic_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    """``atom.global.add.v4.f32`` (sm_90, PTX 8.1): 64 threads add (t, 2t, 3t, 4t) into
    one of two vectors; each element is its own atomic update, in thread order, and
    each thread gets the old values of its four elements."""
    k = Kernel("vector_atom", [U64, U64], block=(64,), target="sm_90a")
    tid = k.tid()
    f = k.cvt("f32", "u32", tid, rnd="rn")
    parts = [k.bin("mul", "f32", f, k.const(float(j), "f32")) for j in (1, 2, 3, 4)]
    which = k.bin("and", "u32", tid, k.const(1, "u32"))
    old = k.op(p.Atom("global", "add", "f32", 4), k.elem_addr(k.args[0], which, 16),
               k.pack("f32", *parts))
    first = k.unpack("f32", 4, old)[3]
    k.st("global", "f32", k.elem_addr(k.args[1], tid, 4), first)
    fn = k.build()
    text = render(fn)
    assert ".version 8.1\n" in text and "atom.global.add.v4.f32 {" in text
    ptxas(text, "sm_90a", tmp_path)
    structured = [np.zeros(8, np.float32), np.zeros(64, np.float32)]
    run_target(fn, structured, grid=(1,), block=(64,))
    from_text = [np.zeros(8, np.float32), np.zeros(64, np.float32)]
    ts.ptx.load(text).kernel("vector_atom").run(grid=1, block=64, args=from_text)
    t = np.arange(64)
    for j in range(4):
        np.testing.assert_array_equal(structured[0][j::4], [(j + 1) * t[w::2].sum()
                                                             for w in (0, 1)])
    earlier = [4 * t[t % 2 == w][t[t % 2 == w] < i].sum() for i, w in zip(t, t % 2)]
    np.testing.assert_array_equal(structured[1], earlier)  # the old fourth elements
    for s, x in zip(structured, from_text):
        np.testing.assert_array_equal(s, x)
    old = Kernel("old", [U64], block=(32,), target="sm_80")
    old.op(p.Atom("global", "add", "f32", 2), old.args[0],
           old.pack("f32", old.const(1.0, "f32"), old.const(2.0, "f32")))
    with pytest.raises(RenderError, match="needs target sm_90a"):
        render(old.build())
