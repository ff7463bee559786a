"""nvcc's PTX for sm_90 (tests/ir/text/ptx/ptx_corpus/kernels_sm90.cu): packed half
arithmetic, fp8 pairs, half-precision atomics, a bulk copy through an mbarrier,
device-function calls, printf and a histogram in the shared memory of a cluster, run on
the CPU by ``ts.ptx`` and compared bit for bit with NumPy references (float64 arithmetic, exact
for these inputs, rounded once per operation through ``ml_dtypes``)."""

from __future__ import annotations

import ctypes
import platform
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.driver import ToolchainMissing, find_ptxas
from tessera.interp.target.state import TargetFault
from tessera.ir.text.ptx import PtxSyntaxError, PtxUnsupportedError
from tests.frontend.ptx.corpus import CORPUS, rounded

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
rng = np.random.default_rng(90)


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(CORPUS / "kernels_sm90.ptx")


def wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def test_packed_half_arithmetic(mod) -> None:
    n = 200
    a, b = (rng.standard_normal(2 * n).astype(F16) for _ in range(2))
    a[:6] = [0, -0.0, np.inf, np.nan, 6e-5, -2**-24]
    b[:6] = [-0.0, 3, -2, 1, 2**-24, 65504]
    out, e = np.zeros(2 * n, F16), np.zeros(2 * n, F16)
    mod.kernel("half2_ops").run(grid=2, block=128, args=[a, b, out, e, np.int32(n)])
    x, y = wide(a), wide(b)
    with np.errstate(invalid="ignore", over="ignore"):
        s, p = (wide(v.view(F16)) for v in (rounded(x + y, F16), rounded(x * y, F16)))
        f = wide(rounded(x * y + s, F16).view(F16))
        m = np.fmax(-p, np.abs(f))  # max.f16x2 returns the number beside a NaN
        want = rounded(m - np.fmin(x, y), F16)
        # h2exp2: ex2.approx.ftz.f32 of each half, times (1 + 2^-24) by an fma, to f16
        e32 = np.exp2(x).astype(np.float32)
        want_e = rounded(wide((wide(e32) * 2.0**-24 + wide(e32)).astype(np.float32)), F16)
    np.testing.assert_array_equal(out.view(np.uint16), want)
    np.testing.assert_array_equal(e.view(np.uint16), want_e)


def test_packed_bf16_arithmetic(mod) -> None:
    n = 200
    a, b = (rng.standard_normal(2 * n).astype(BF16) for _ in range(2))
    out = np.zeros(2 * n, BF16)
    mod.kernel("bf162_ops").run(grid=2, block=128, args=[a, b, out, np.int32(n)])
    x, y = wide(a), wide(b)
    f = wide(rounded(x * y + x, BF16).view(BF16))
    mul = wide(rounded(x * f, BF16).view(BF16))
    want = rounded(np.fmax(-f, np.abs(y)) + mul, BF16)
    np.testing.assert_array_equal(out.view(np.uint16), want)


def test_fp8_pairs(mod) -> None:
    n = 200
    v = (rng.standard_normal(2 * n) * 100).astype(np.float32)
    v[:8] = [500, -1e9, np.inf, np.nan, 1e-4, 449, -464, 2**-10]
    q4, q5 = np.zeros(2 * n, np.uint8), np.zeros(2 * n, np.uint8)
    back = np.zeros(2 * n, F16)
    mod.kernel("fp8_pairs").run(grid=2, block=128, args=[v, q4, back, q5, np.int32(n)])
    w4 = rounded(wide(v), E4M3)  # beyond 448 saturates; 464 is the tie that rounds down
    np.testing.assert_array_equal(q4, w4)
    widened = wide(w4.view(E4M3))  # every e4m3 value is an f16 value
    np.testing.assert_array_equal(back.view(np.uint16), rounded(widened, F16))
    with np.errstate(invalid="ignore", over="ignore"):
        square = wide(rounded(widened * widened, F16).view(F16))
    np.testing.assert_array_equal(q5, rounded(square, E5M2))


def test_half_precision_atomics(mod) -> None:
    """Small integers: every order of the adds gives the same exact sums."""
    n = 96
    v = rng.integers(-8, 9, n).astype(np.float32)
    h, h2 = np.zeros(4, F16), np.zeros(4, F16)
    bh, flag = np.zeros(4, BF16), np.zeros(8, np.uint16)
    mod.kernel("half_atomics").run(grid=2, block=64, args=[v, h, bh, h2, flag, np.int32(n)])
    sums = np.array([v[k::4].sum() for k in range(4)])
    np.testing.assert_array_equal(wide(h), sums)
    np.testing.assert_array_equal(wide(bh), sums)
    pairs = np.array([v[0::2].sum(), -2 * v[0::2].sum(), v[1::2].sum(), -2 * v[1::2].sum()])
    np.testing.assert_array_equal(wide(h2), pairs)  # (x, y): x in the low half
    np.testing.assert_array_equal(flag, np.arange(1, 9))  # the first swap of each flag wins


def test_a_bulk_copy_through_an_mbarrier(mod) -> None:
    """CUB's Hopper copy: the byte count announced on the mbarrier from a register, one
    cp.async.bulk per CTA, every thread waiting on the phase; elect.sync with each
    half-warp's own member mask in a register; griddepcontrol around it all."""
    x = rng.standard_normal(3 * 256).astype(np.float32)
    out, elected = np.zeros_like(x), np.zeros(1, np.int32)
    k = mod.kernel("bulk_double")
    k.run(grid=3, block=256, args=[x, out, elected, np.int32(256)])
    np.testing.assert_array_equal(out, 2 * x)
    assert elected[0] == 3 * 256 // 16  # one lane of each half-warp
    short = np.zeros(3 * 200, np.float32)  # 800 bytes: the copy's size is a register
    k.run(grid=3, block=256, args=[x[:600].copy(), short, elected, np.int32(200)])
    np.testing.assert_array_equal(short, 2 * x[:600])


def test_a_bulk_copy_larger_than_its_announced_bytes_is_reported() -> None:
    """The phase would complete before the copy lands: announce 16 bytes for 1024."""
    text = (CORPUS / "kernels_sm90.ptx").read_text()
    line = next(ln for ln in text.splitlines() if "mbarrier.arrive.expect_tx" in ln)
    short = text.replace(line, line.rsplit(",", 1)[0] + ", 16;")
    x = np.ones(256, np.float32)
    with pytest.raises(TargetFault, match="expect-tx count too small"):
        ts.ptx.load(short).kernel("bulk_double").run(
            grid=1, block=256, args=[x, np.zeros_like(x), np.zeros(1, np.int32),
                                     np.int32(256)])


def test_device_function_calls(mod) -> None:
    n = 150
    v = rng.standard_normal(n).astype(np.float32)
    out, nd = np.zeros(n, np.float32), np.zeros(n, np.int32)
    mod.kernel("device_calls").run(grid=2, block=128, args=[v, out, nd, np.int32(n)])
    i = np.arange(n)
    x = wide(v)

    def f32(t: np.ndarray) -> np.ndarray:
        return wide(t.astype(np.float32))

    def weigh(k: np.ndarray) -> np.ndarray:
        return f32(wide(k) * x + 1)  # fma(k, v, 1)

    dot3 = f32(-x * 0.5 + f32(x * 2 + x))  # nvcc folded b = {2, v, 0.5} and a.y = 1
    outer = f32(weigh(i % 5) + weigh(-(i % 5)))
    np.testing.assert_array_equal(out, f32(f32(weigh(i) + dot3) + outer).astype(np.float32))
    np.testing.assert_array_equal(nd, [len(str(k * 977)) for k in i])


def test_printf_writes_each_threads_line_in_thread_order(
        mod, capsys: pytest.CaptureFixture[str]) -> None:
    """printf's text, compared with the C library formatting the same arguments; the
    pointers (generic addresses of the interpreter's global memory) advance by 4."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the reference is glibc's snprintf")
    libc = ctypes.CDLL(None)
    x = np.array([1.5, -2.25, 1e-3, np.inf, np.nan, 3e5, -0.0, 7], np.float32)
    n = 6
    mod.kernel("formatted").run(grid=1, block=8, args=[x, np.int32(n)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == n + 1 and lines[-1] == "done"
    pointers = [int(line.rsplit("|", 1)[1], 16) for line in lines[:n]]
    assert np.all(np.diff(pointers) == 4)
    fmt = b"%d/%u: x=%f %.3e %g|%8.2f|%-6d|%+d|%05x|%#o|%s|%c|%lld|%hd|%p"
    for i, (line, pointer) in enumerate(zip(lines, pointers)):
        v = float(x[i])
        buf = ctypes.create_string_buffer(512)
        libc.snprintf(buf, 512, fmt, ctypes.c_int(i), ctypes.c_uint(n), ctypes.c_double(v),
                      ctypes.c_double(v * 1e6), ctypes.c_double(float(x[i] / np.float32(3))),
                      ctypes.c_double(v), ctypes.c_int(i), ctypes.c_int(-i),
                      ctypes.c_int(i * 4099), ctypes.c_int(i),
                      ctypes.c_char_p(b"odd" if i % 2 else b"even"), ctypes.c_int(65 + i % 26),
                      ctypes.c_longlong(i << 40), ctypes.c_int(i * 5000),
                      ctypes.c_void_p(pointer))
        assert line == buf.value.decode()


CALLS = """.version 8.0
.target sm_80
.address_size 64
.func (.param .b32 r) twice(.param .b32 a)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    ld.param.b32 %r1, [a];
    setp.eq.s32 %p1, %r1, 0;
    @%p1 bra $L__BB0_1;
    add.s32 %r2, %r1, %r1;
    st.param.b32 [r], %r2;
    ret;
$L__BB0_1:
    st.param.b32 [r], 7;
    ret.uni;
}
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
$L__BB0_1:
    {
    .param .b32 p0;
    st.param.b32 [p0], %r1;
    .param .b32 q0;
    call.uni (q0), twice, (p0);
    ld.param.b32 %r2, [q0];
    }
    {
    .param .b32 p0;
    st.param.b32 [p0], %r2;
    .param .b32 q0;
    call.uni (q0), twice, (p0);
    ld.param.b32 %r3, [q0];
    }
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""


def test_each_call_has_its_own_labels_and_returns() -> None:
    """Two calls of one function whose label repeats the kernel's, each with an early
    ``ret``: 4x, or 7 then 14 for thread 0."""
    out = np.zeros(64, np.uint32)
    ts.ptx.load(CALLS).kernel("k").run(grid=1, block=64, args=[out])
    np.testing.assert_array_equal(out, np.r_[14, 4 * np.arange(1, 64)])


@pytest.mark.parametrize("change, error, message", [
    ("call.uni (q0), twice, (p0);", PtxUnsupportedError, "recursive call of twice"),
    ("call.uni (q0), twice, (p0, p0);", PtxSyntaxError, "takes 1 parameters"),
    ("call.uni (q0), twice, (%r1);", PtxSyntaxError, "not a .param variable"),
    ("call.uni (q0), puts, (p0);", PtxUnsupportedError, "declares without a body"),
])
def test_call_errors_name_the_line(change: str, error: type, message: str) -> None:
    text = CALLS.replace(".func (.param .b32 r) twice",
                         ".extern .func (.param .b32 r) puts(.param .b64 f);\n"
                         ".func (.param .b32 r) twice")
    if "recursive" in message:  # the function calls itself
        text = text.replace("    add.s32 %r2, %r1, %r1;\n",
                            "    {\n    .param .b32 p0;\n    .param .b32 q0;\n"
                            f"    {change}\n    }}\n    add.s32 %r2, %r1, %r1;\n")
    else:
        text = text.replace("call.uni (q0), twice, (p0);", change, 1)
    line = next(k for k, t in enumerate(text.splitlines(), 1) if change in t)
    with pytest.raises(error, match=message) as err:
        ts.ptx.load(text)
    assert err.value.loc.line == line


UNCALLED = CALLS[:CALLS.index(".visible .entry")] + ".visible .entry k()\n{\n    ret;\n}\n"


@pytest.mark.parametrize("change, message", [
    (None, None),
    (("ld.param.b32 %r1, [a];", "ld.b32 %r1, [a];"), "ld.param accesses it"),
    (("add.s32 %r2, %r1, %r1;", "add.s32 %r2, %r1, %r9;"), "%r9 is not declared"),
    (("@%p1 bra $L__BB0_1;", "@%p1 bra $L__BB0_9;"), r"unknown label \$L__BB0_9$"),
    (("add.s32 %r2, %r1, %r1;\n", "{\n.param .b32 p0;\n.param .b32 q0;\n"
      "call.uni (q0), twice, (p0);\n}\nadd.s32 %r2, %r1, %r1;\n"), None),
])
def test_a_function_no_kernel_calls_is_read_as_ptxas_reads_it(
        change: tuple[str, str] | None, message: str | None,
        tmp_path: Path) -> None:
    """ptxas checks every function a module defines (a relocatable module's functions
    are called from elsewhere): a mistake in one that no kernel calls is refused at its
    line, and what the reader would not model there (a recursive call) is no error, as
    nothing here runs it; ptxas, where installed, gives the same verdicts."""
    text = UNCALLED if change is None else UNCALLED.replace(*change)
    if message is None:
        assert list(ts.ptx.load(text).kernels) == ["k"]
    else:
        line = next(k for k, t in enumerate(text.splitlines(), 1) if change[1] in t)
        with pytest.raises(PtxSyntaxError, match=message) as err:
            ts.ptx.load(text)
        assert err.value.loc.line == line
    verdict = ptxas_verdict(text, "sm_80", tmp_path)
    assert verdict is None or (verdict == "") == (message is None), verdict


def ptxas_verdict(text: str, arch: str, where: Path) -> str | None:
    """ptxas's errors on ``text`` ("" when it assembles), or None without ptxas."""
    try:
        ptxas = find_ptxas()
    except ToolchainMissing:
        return None
    (where / "k.ptx").write_text(text)
    run = subprocess.run([ptxas, f"-arch={arch}", "k.ptx", "-o", "k.cubin"], cwd=where,
                         capture_output=True, text=True, check=False)
    return "" if run.returncode == 0 else run.stderr or "failed"


@pytest.mark.parametrize("ctas, bins", [(2, 8), (8, 64)])
def test_a_histogram_split_across_the_ctas_of_a_cluster(mod, ctas: int, bins: int) -> None:
    """nvcc's __cluster_dims__(2, 1, 1) kernel: each thread adds its value's bin in the
    shared memory of whichever CTA of its cluster holds it (map_shared_rank and a shared
    atomic); each cluster's counts reach the grid's histogram."""
    values = rng.integers(-3, bins + 3, 5000).astype(np.int32)
    histogram = np.zeros(bins, np.int32)
    mod.kernel("cluster_histogram").run(grid=ctas, block=128, shared_bytes=bins // 2 * 4,
                                        args=[values, histogram, np.int32(5000),
                                              np.int32(bins)])
    np.testing.assert_array_equal(histogram,
                                  np.bincount(np.clip(values, 0, bins - 1), minlength=bins))


def test_a_multicast_load_and_arrivals_on_another_ctas_barrier(mod) -> None:
    """nvcc's 2-CTA cluster kernel: each CTA multicasts half of a 32x32 tile into both
    CTAs' shared memory (``.multicast::cluster``), whose barriers expect both halves, and
    tells the other CTA it is done by an arrival on the other's barrier (``mapa`` and
    ``mbarrier.arrive.shared::cluster``), which the other waits for."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    out = np.zeros((4, 32, 32), np.float32)
    mod.kernel("multicast_tile").run(grid=4, block=128,
                                     args=[ts.ptx.tensor_map(x, box=(16, 32)), out])
    want = x.reshape(2, 32, 32)[np.arange(4) // 2] * (np.arange(4) % 2 + 1)[:, None, None]
    np.testing.assert_array_equal(out, want)


def with_cache_hint(text: str) -> str:
    """kernels_sm90.ptx with an L2 cache policy on multicast_tile's TMA load, as CUTLASS
    gives every TMA load (``.L2::cache_hint``, the policy ``createpolicy`` made last)."""
    entry = text.index(".entry multicast_tile")
    body = text.index("{", entry) + 1
    at = text.index("cp.async.bulk.tensor", entry)
    end = text.index(";", at)
    hinted = text[at:end].replace("multicast::cluster", "multicast::cluster.L2::cache_hint")
    return (text[:body] + "\n\t.reg .b64 %rdh;\n\tcreatepolicy.fractional.L2::evict_last.b64 "
            "%rdh, 1.0;" + text[body:at] + hinted + ", %rdh" + text[end:])


def test_a_tma_load_with_an_l2_cache_hint(tmp_path: Path) -> None:
    """The cache policy changes no value: the same tiles land. ptxas assembles it."""
    text = with_cache_hint((CORPUS / "kernels_sm90.ptx").read_text())
    x = rng.standard_normal((64, 32)).astype(np.float32)
    out = np.zeros((4, 32, 32), np.float32)
    ts.ptx.load(text).kernel("multicast_tile").run(
        grid=4, block=128, args=[ts.ptx.tensor_map(x, box=(16, 32)), out])
    want = x.reshape(2, 32, 32)[np.arange(4) // 2] * (np.arange(4) % 2 + 1)[:, None, None]
    np.testing.assert_array_equal(out, want)
    assert ptxas_verdict(text, "sm_90a", tmp_path) in ("", None)


@pytest.mark.parametrize("change, message", [
    # no arrival on the other CTA's barrier: its wait never completes
    ("mbarrier.arrive.release.cluster.shared::cluster.b64", "mbarrier phase never completes"),
    # a multicast to a third CTA of a cluster of two
    ("mov.u16 \t%rs1, 3;", "multicast TMA load to CTA mask 0x0007: the cluster has 2 CTAs"),
])
def test_multicast_and_remote_arrival_mistakes(change: str, message: str) -> None:
    text = (CORPUS / "kernels_sm90.ptx").read_text()
    entry = text.index(".entry multicast_tile")
    at = text.index(change, entry)
    end = text.index("\n", at)
    broken = "\tmov.u16 \t%rs1, 7;" if "rs1" in change else "\t// (the arrival removed)"
    text = text[:at] + broken + text[end:]
    x = np.zeros((64, 32), np.float32)
    with pytest.raises(TargetFault, match=message):
        ts.ptx.load(text).kernel("multicast_tile").run(
            grid=4, block=128, args=[ts.ptx.tensor_map(x, box=(16, 32)),
                                     np.zeros(4096, np.float32)])
