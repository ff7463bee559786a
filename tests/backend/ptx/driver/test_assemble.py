"""ptxas / nvJitLink assembly: statistics, located errors, and the C75xx wgmma-repair check.

Every fact relied on here (which lines ptxas reports, that a missing wgmma.wait_group only
shows as a C7517 info line) was first observed with the nvidia-cuda-nvcc 13.5 ptxas.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.backend.ptx.driver.assemble import (
    PTXAS_ENV,
    AssemblyError,
    ToolchainMissing,
    assemble,
    assemble_nvjitlink,
    find_ptxas,
    parse_only,
    parse_stats,
    raise_for_advisories,
)
from tessera.errors import Loc

HEADER = ".version 8.0\n.target {target}\n.address_size 64\n"

# x[i] += 1.0 for i < n: one global load and store, a bounds check.
ADD_ONE = HEADER.format(target="sm_80") + """
.visible .entry add_one(
    .param .u64 p_x,
    .param .u32 p_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"""

# A 1 KiB static shared buffer and one bar.sync: ptxas reports "1024 bytes smem, 1 barriers".
SHARED = HEADER.format(target="sm_80") + """
.visible .entry k_smem(.param .u64 p_x)
{
    .shared .align 16 .b8 buf[1024];
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_x];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    st.shared.u32 [%r3], %r1;
    bar.sync 0;
    ld.shared.u32 %r2, [%r3];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""

# A dynamically indexed 64-byte .local array cannot live in registers: a 64-byte stack frame.
STACK = HEADER.format(target="sm_80") + """
.visible .entry k_stack(.param .u64 p_x)
{
    .local .align 4 .b8 stk[64];
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p_x];
    mov.u32 %r1, %tid.x;
    mov.u64 %rd2, stk;
    st.local.u32 [%rd2], %r1;
    and.b32 %r2, %r1, 15;
    mul.wide.u32 %rd3, %r2, 4;
    add.u64 %rd3, %rd3, %rd2;
    ld.local.u32 %r3, [%rd3];
    cvta.to.global.u64 %rd4, %rd1;
    st.global.u32 [%rd4], %r3;
    ret;
}
"""


def wgmma_kernel(*, fence: bool = True, wait: bool = True, target: str = "sm_90a") -> str:
    """One m64n8k16 bf16 wgmma from two shared-memory descriptors, then a store.

    PTX ISA 9.x, sec. 9.7.15.5 "wgmma.mma_async": m64n8k16 with .f32 accumulators takes
    N/2 = 4 registers per thread; scale-d 0 means D = A*B.  Sec. 9.7.15.6/7: wgmma.fence
    before the first wgmma, commit_group, and wait_group before the accumulators are read.
    """
    lines = [
        ".visible .entry wg(.param .u64 p_out, .param .u64 p_da, .param .u64 p_db)",
        "{",
        "    .reg .f32 %f<5>;",
        "    .reg .b64 %rd<6>;",
        "    .reg .b32 %r<2>;",
        "    ld.param.u64 %rd1, [p_out];",
        "    ld.param.u64 %rd2, [p_da];",
        "    ld.param.u64 %rd3, [p_db];",
        "    mov.f32 %f1, 0f00000000;",
        "    mov.f32 %f2, 0f00000000;",
        "    mov.f32 %f3, 0f00000000;",
        "    mov.f32 %f4, 0f00000000;",
        *(["    wgmma.fence.sync.aligned;"] if fence else []),
        "    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%f1, %f2, %f3, %f4}, %rd2, %rd3, 0, 1, 1, 0, 0;",
        "    wgmma.commit_group.sync.aligned;",
        *(["    wgmma.wait_group.sync.aligned 0;"] if wait else []),
        "    mov.u32 %r1, %tid.x;",
        "    mul.wide.u32 %rd4, %r1, 16;",
        "    cvta.to.global.u64 %rd5, %rd1;",
        "    add.s64 %rd5, %rd5, %rd4;",
        "    st.global.v4.f32 [%rd5], {%f1, %f2, %f3, %f4};",
        "    ret;",
        "}",
    ]
    return HEADER.format(target=target) + "\n".join(lines) + "\n"


def line_of(ptx: str, fragment: str) -> int:
    """1-based number of the first PTX line containing ``fragment``."""
    return next(i for i, text in enumerate(ptx.splitlines(), 1) if fragment in text)


def raw_ptxas(ptx: str, arch: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "k.ptx").write_text(ptx)
    return subprocess.run([find_ptxas(), f"-arch={arch}", "-v", "k.ptx", "-o", "k.cubin"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)


def _wheel_ptxas(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests look for the wheel's ptxas: without an explicit ``TESSERA_PTXAS``,
    and only where the wheel is installed (a GPU machine may use its toolkit's)."""
    monkeypatch.delenv(PTXAS_ENV, raising=False)
    if not any((Path(root) / "nvidia" / "cu13" / "bin" / "ptxas").is_file()
               for root in sys.path):
        pytest.skip("the nvidia-cuda-nvcc wheel is not installed here")


def test_find_ptxas_is_the_wheel_13_5_or_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    _wheel_ptxas(monkeypatch)
    path = find_ptxas()
    assert "site-packages" in path and os.access(path, os.X_OK)
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    release = version.stdout.split("release ")[1].split(",")[0]
    assert tuple(int(p) for p in release.split(".")) >= (13, 5)  # PTX ISA 9.5


def test_find_ptxas_skips_a_system_ptxas(monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda.pathfinder

    _wheel_ptxas(monkeypatch)
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_binary_utility",
                        lambda name: "/usr/local/cuda/bin/ptxas")
    assert "site-packages" in find_ptxas()


def test_find_ptxas_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda.pathfinder

    monkeypatch.delenv(PTXAS_ENV, raising=False)
    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_binary_utility", lambda name: None)
    monkeypatch.setattr(sys, "path", [])
    with pytest.raises(ToolchainMissing, match="pip install nvidia-cuda-nvcc"):
        find_ptxas()


def test_tessera_ptxas_names_an_explicit_ptxas(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    # a stand-in for a system toolkit's ptxas: records its call, then runs the real one
    real = find_ptxas()
    marker = tmp_path / "called"
    wrapper = tmp_path / "ptxas"
    wrapper.write_text(f'#!/bin/sh\necho "$@" > {marker}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("TESSERA_PTXAS", str(wrapper))
    assert find_ptxas() == str(wrapper)
    built = assemble(ADD_ONE, "sm_80")
    assert built.cubin[:4] == b"\x7fELF" and "-arch=sm_80" in marker.read_text()


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_tessera_ptxas_must_be_an_executable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             kind: str) -> None:
    path = tmp_path / "ptxas"
    if kind == "not executable":
        path.write_text("")
        path.chmod(0o644)
    monkeypatch.setenv("TESSERA_PTXAS", str(path))
    with pytest.raises(ToolchainMissing, match=r"TESSERA_PTXAS=.* is not an executable file"):
        find_ptxas()


def test_valid_kernel_assembles_with_stats() -> None:
    built = assemble(ADD_ONE, "sm_80")
    assert built.cubin[:4] == b"\x7fELF"
    stats = built.stats["add_one"]
    assert stats.registers > 0
    assert stats.cmem > 0  # parameters live in constant bank 0 on sm_80
    assert (stats.smem, stats.spill_stores, stats.spill_loads, stats.stack_frame) == (0, 0, 0, 0)


def test_shared_memory_and_barriers_are_reported() -> None:
    stats = assemble(SHARED, "sm_90a").stats["k_smem"]
    assert (stats.smem, stats.barriers) == (1024, 1)


def test_stack_frame_is_reported() -> None:
    assert assemble(STACK, "sm_80").stats["k_stack"].stack_frame == 64


def test_parse_stats_reads_spills_for_each_entry() -> None:
    log = "\n".join([
        "ptxas info    : Compiling entry function 'a' for 'sm_90a'",
        "ptxas info    : Function properties for a",
        "    16 bytes stack frame, 24 bytes spill stores, 8 bytes spill loads",
        "ptxas info    : Used 255 registers, used 2 barriers, 4096 bytes smem",
        "ptxas info    : Function properties for helper",
        "    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Compiling entry function 'b' for 'sm_90a'",
        "ptxas info    : Function properties for b",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 12 registers, used 0 barriers, 372 bytes cmem[0]",
    ])
    stats = parse_stats(log)
    assert set(stats) == {"a", "b"}  # .func helpers are not kernels
    a, b = stats["a"], stats["b"]
    assert (a.registers, a.barriers, a.smem, a.stack_frame) == (255, 2, 4096, 16)
    assert (a.spill_stores, a.spill_loads) == (24, 8)
    assert (b.registers, b.cmem, b.stack_frame) == (12, 372, 0)


def test_syntax_error_names_the_user_line() -> None:
    bad = ADD_ONE.replace("add.f32 %f2, %f1, 0f3F800000;", "add.f32 %f2, %f1, 0f3F800000 junk;")
    number = line_of(bad, "junk")
    user = Loc("user_kernel.py", 12)
    with pytest.raises(AssemblyError) as info:
        assemble(bad, "sm_80", line_map={number: user}, kernel="add_one")
    assert info.value.loc == user
    text = str(info.value)
    assert str(text).startswith("user_kernel.py:12:")
    assert f"PTX line {number} (from user_kernel.py:12)" in text
    assert "0f3F800000 junk;" in text and "syntax error" in text


def test_several_errors_are_grouped_by_line() -> None:
    bad = ADD_ONE.replace("ld.global.f32 %f1, [%rd4];", "ld.global.f32 %f9, [%rd4];\n    foo.bar;")
    with pytest.raises(AssemblyError) as info:
        assemble(bad, "sm_80")
    text = str(info.value)
    assert f"PTX line {line_of(bad, '%f9')}:" in text
    assert f"PTX line {line_of(bad, 'foo.bar')}:" in text
    assert text.count(f"PTX line {line_of(bad, 'foo.bar')}:") == 1


def test_missing_wait_group_is_only_an_info_line_for_ptxas(tmp_path: Path) -> None:
    # The fact the C75 check rests on: ptxas exits 0 and says (C7517) in an info line.
    proc = raw_ptxas(wgmma_kernel(wait=False), "sm_90a", tmp_path)
    assert proc.returncode == 0
    assert "(C7517)" in proc.stdout + proc.stderr


def test_missing_wait_group_fails_the_build() -> None:
    # PTX ISA 9.x, sec. 9.7.15.7 "wgmma.wait_group": accessing the accumulators before
    # waiting for the wgmma-group that writes them is undefined behaviour.
    ptx = wgmma_kernel(wait=False)
    store = line_of(ptx, "st.global.v4.f32")
    with pytest.raises(AssemblyError) as info:
        assemble(ptx, "sm_90a", line_map={store: Loc("gemm.py", 40)}, kernel="wg")
    text = str(info.value)
    assert "(C7517)" in text and "wgmma.wait_group" in text
    assert info.value.loc == Loc("gemm.py", 40)  # "around line N" is mapped too


def test_fenced_and_waited_wgmma_assembles() -> None:
    built = assemble(wgmma_kernel(), "sm_90a")
    assert built.cubin[:4] == b"\x7fELF"
    assert "(C75" not in built.log
    assert built.stats["wg"].registers >= 4  # at least the four accumulators


def test_any_c75_advisory_fails() -> None:
    log = ("ptxas info    : (C7519) warpgroup.arrive is injected in around line 7 by compiler "
           "to allow use of registers in GMMA in function 'k'\n")
    ptx = "\n".join(f"// line {i}" for i in range(1, 10))
    with pytest.raises(AssemblyError, match=r"\(C7519\)") as info:
        raise_for_advisories(log, ptx, line_map={7: Loc("k.py", 3)})
    assert "`// line 7`" in str(info.value) and info.value.loc == Loc("k.py", 3)
    raise_for_advisories("ptxas info    : Used 8 registers\n", ptx)  # nothing to report


def test_wgmma_needs_sm_90a() -> None:
    # PTX ISA 9.x, sec. 9.7.15.5 "wgmma.mma_async", target ISA notes: requires sm_90a.
    ptx = wgmma_kernel(target="sm_90")
    with pytest.raises(AssemblyError, match=r"not supported on \.target 'sm_90'"):
        assemble(ptx, "sm_90")


def test_unknown_arch_is_refused_before_ptxas() -> None:
    with pytest.raises(AssemblyError, match="unknown target architecture"):
        assemble(ADD_ONE, "hopper")


def test_parse_only() -> None:
    parse_only(wgmma_kernel(), "sm_90a")
    with pytest.raises(AssemblyError, match="Unknown symbol"):
        parse_only(ADD_ONE.replace("%f1, [%rd4]", "%f7, [%rd4]"), "sm_80")


def test_nvjitlink_gives_a_cubin() -> None:
    assert assemble_nvjitlink(ADD_ONE, "sm_80")[:4] == b"\x7fELF"
    assert assemble_nvjitlink(wgmma_kernel(), "sm_90a")[:4] == b"\x7fELF"


def test_nvjitlink_errors_are_located() -> None:
    bad = ADD_ONE.replace("st.global.f32 [%rd4], %f2;", "st.global.f32 [%rd4], %f8;")
    number = line_of(bad, "%f8")
    with pytest.raises(AssemblyError, match="Unknown symbol '%f8'") as info:
        assemble_nvjitlink(bad, "sm_80", line_map={number: Loc("k.py", 5)})
    assert info.value.loc == Loc("k.py", 5) and "nvJitLink" in str(info.value)


def test_nvjitlink_verbose_log_shows_c75_too() -> None:
    with pytest.raises(AssemblyError, match=r"\(C7517\)"):
        assemble_nvjitlink(wgmma_kernel(wait=False), "sm_90a")


def test_assembled_is_frozen() -> None:
    built = assemble(ADD_ONE, "sm_80")
    with pytest.raises(AttributeError):
        built.cubin = b""  # type: ignore[misc]
