"""Thread block clusters: the cluster special registers against the PTX ISA's
definitions, distributed shared memory (``mapa``, ``.shared::cluster`` loads, stores
and atomics, generic addresses) against NumPy, the cluster barrier and its checks, the
launches a GPU refuses, and the instructions rendered from Target IR, assembled by
ptxas and read back."""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault

HEAD = ".version 8.0\n.target {target}\n.address_size 64\n"

#: nvcc 13's PTX (-O3, sm_90) of a __cluster_dims__(2, 1, 1) kernel whose CTAs add their
#: neighbour's part to their own through cooperative groups' map_shared_rank
RING = """
.visible .entry ring(.param .u64 ring_param_0, .param .u64 ring_param_1)
.explicitcluster
.reqnctapercluster 2, 1, 1
{
    .reg .b32 %r<18>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b8 part[256];
    ld.param.u64 %rd1, [ring_param_0];
    ld.param.u64 %rd2, [ring_param_1];
    cvta.to.global.u64 %rd3, %rd2;
    cvta.to.global.u64 %rd4, %rd1;
    mov.b32 %r1, %cluster_ctarank;
    mov.u32 %r2, %ctaid.x;
    shl.b32 %r3, %r2, 6;
    mov.u32 %r4, %tid.x;
    add.s32 %r5, %r3, %r4;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.u32 %r6, [%rd6];
    shl.b32 %r7, %r4, 2;
    mov.u32 %r8, part;
    add.s32 %r9, %r8, %r7;
    st.shared.u32 [%r9], %r6;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    add.s32 %r10, %r1, 1;
    mov.b32 %r11, %cluster_nctarank;
    rem.u32 %r12, %r10, %r11;
    mapa.shared::cluster.u32 %r13, %r8, %r12;
    ld.shared.u32 %r14, [%r9];
    add.s32 %r15, %r13, %r7;
    ld.shared::cluster.u32 %r16, [%r15];
    add.s32 %r17, %r16, %r14;
    add.s64 %rd7, %rd3, %rd5;
    st.global.u32 [%rd7], %r17;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ret;
}
"""


def cluster_module(body: str, target: str = "sm_90", directives: str = "") -> ts.ptx.PtxProgram:
    """A kernel ``k(out)``: ``%rd1`` the output's address, ``%r1`` the thread's index
    in its CTA (``%tid.x``) and ``%r2`` the CTA's x fastest over the grid; 256 bytes
    of shared memory ``buf``."""
    return ts.ptx.load(HEAD.format(target=target) + f"""
.visible .entry k(.param .u64 out){directives}
{{
    .reg .pred %p<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<12>;
    .shared .align 4 .b8 buf[256];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r30, %ctaid.x;
    mov.u32 %r31, %ctaid.y;
    mov.u32 %r32, %ctaid.z;
    mov.u32 %r33, %nctaid.x;
    mov.u32 %r34, %nctaid.y;
    mad.lo.u32 %r35, %r32, %r34, %r31;
    mad.lo.u32 %r2, %r35, %r33, %r30;
{body}
    ret;
}}
""")


_SPECIALS = [f"%{r}.{c}" for r in ("ctaid", "cluster_ctaid", "clusterid", "nclusterid",
                                    "cluster_nctaid") for c in "xyz"]
_SPECIALS += ["%cluster_ctarank", "%cluster_nctarank"]
_WORDS = len(_SPECIALS) + 1  # and %is_explicit_cluster


def _special_kernel() -> ts.ptx.PtxKernel:
    """Thread 0 of each CTA writes every cluster special register at its CTA's row."""
    lines = ["setp.ne.u32 %p1, %r1, 0;", "@%p1 bra DONE;",
             f"mul.wide.u32 %rd2, %r2, {4 * _WORDS};", "add.s64 %rd3, %rd1, %rd2;"]
    for k, reg in enumerate(_SPECIALS):
        lines += [f"mov.u32 %r3, {reg};", f"st.global.u32 [%rd3+{4 * k}], %r3;"]
    lines += ["mov.pred %p2, %is_explicit_cluster;", "selp.u32 %r3, 1, 0, %p2;",
              f"st.global.u32 [%rd3+{4 * len(_SPECIALS)}], %r3;", "DONE:"]
    return cluster_module("\n".join(lines)).kernel("k")


@pytest.mark.parametrize("grid, cluster", [
    ((4, 1, 1), None), ((4, 1, 1), (2, 1, 1)), ((4, 2, 1), (2, 2, 1)),
    ((2, 4, 2), (1, 2, 2)), ((6, 2, 2), (3, 1, 2)), ((2, 2, 1), (1, 1, 1))])
def test_the_cluster_registers_follow_the_isa(grid: tuple[int, int, int],
                                              cluster: tuple[int, int, int] | None) -> None:
    """Every CTA once; its place in its cluster ``%ctaid mod`` the cluster's shape, the
    cluster's ``%ctaid div`` it, and the rank x fastest (PTX ISA, "Special Registers")."""
    out = np.zeros((np.prod(grid), _WORDS), np.uint32)
    _special_kernel().run(grid=grid, block=32, args=[out], cluster=cluster)
    dims = cluster or (1, 1, 1)
    for row, (z, y, x) in zip(out, product(*(range(g) for g in grid[::-1]))):
        ctaid = np.array([x, y, z])
        inner, outer = ctaid % dims, ctaid // dims
        rank = inner[0] + dims[0] * (inner[1] + dims[1] * inner[2])
        want = [*ctaid, *inner, *outer, *(np.array(grid) // dims), *dims, rank,
                np.prod(dims), int(cluster is not None)]
        assert row.tolist() == want, (row, want)


@pytest.mark.parametrize("ctas", [2, 4, 8])
def test_each_cta_adds_its_neighbours_part_through_distributed_shared_memory(ctas: int) -> None:
    x = np.random.default_rng(ctas).integers(-1000, 1000, ctas * 64).astype(np.int32)
    out = np.zeros_like(x)
    ts.ptx.load(HEAD.format(target="sm_90") + RING).kernel("ring").run(
        grid=ctas, block=64, args=[x, out])  # .reqnctapercluster: clusters of 2
    parts = x.reshape(ctas // 2, 2, 64)
    np.testing.assert_array_equal(out, (parts + parts[:, ::-1]).ravel())


def _counter(space: str = ".shared::cluster", generic: bool = False) -> ts.ptx.PtxKernel:
    """Every thread adds its CTA's rank + 1 into rank 0's ``buf[0]`` (zeroed by each
    CTA first) with an atomic, then thread 0 of rank 0 stores the total, and every
    thread the rank ``getctarank`` gives for the address it updated."""
    if generic:
        address = ["cvta.shared.u64 %rd4, %rd5;", "mapa.u64 %rd6, %rd4, 0;",
                   "atom.add.u32 %r5, [%rd6], %r4;", "getctarank.u64 %r6, %rd6;"]
    else:
        address = ["mapa.shared::cluster.u32 %r7, %r8, 0;",
                   f"atom{space}.add.u32 %r5, [%r7], %r4;",
                   "getctarank.shared::cluster.u32 %r6, %r7;"]
    return cluster_module("\n".join([
        "mov.u32 %r8, buf;", "cvt.u64.u32 %rd5, %r8;", "setp.eq.u32 %p1, %r1, 0;",
        "@%p1 st.shared.u32 [buf], 0;", "barrier.cluster.arrive.aligned;",
        "barrier.cluster.wait.aligned;", "mov.u32 %r3, %cluster_ctarank;",
        "add.u32 %r4, %r3, 1;", *address, "barrier.cluster.arrive;", "barrier.cluster.wait;",
        "mul.wide.u32 %rd7, %r2, 4;", "add.s64 %rd8, %rd1, %rd7;",
        "mad.lo.u32 %r9, %r2, 32, %r1;", "mul.wide.u32 %rd9, %r9, 4;",
        "add.s64 %rd10, %rd1, %rd9;", "st.global.u32 [%rd10+64], %r6;",
        "setp.eq.u32 %p2, %r3, 0;", "and.pred %p3, %p1, %p2;",
        "@%p3 ld.shared.u32 %r10, [buf];", "@%p3 st.global.u32 [%rd8], %r10;",
        "barrier.cluster.arrive;", "barrier.cluster.wait;"])).kernel("k")


@pytest.mark.parametrize("generic", [False, True])
def test_atomics_on_another_ctas_shared_memory(generic: bool) -> None:
    out = np.zeros(16 + 8 * 32, np.uint32)
    _counter(generic=generic).run(grid=8, block=32, args=[out], cluster=4)
    # clusters of 4: 32 threads of each rank r add r + 1 into rank 0's counter
    assert out[[0, 4]].tolist() == [32 * 10, 32 * 10]
    np.testing.assert_array_equal(out[16:], 0)  # every address lies in rank 0's memory


def _fault(kernel: ts.ptx.PtxKernel, **launch: object) -> TargetFault:
    with pytest.raises(TargetFault) as err:
        kernel.run(args=[np.zeros(4096, np.uint32)], **{"grid": 4, "block": 32,
                                                         "cluster": 2, **launch})
    return err.value


def test_a_read_of_a_neighbours_write_before_the_cluster_barrier_is_a_race() -> None:
    racy = RING.replace("barrier.cluster.arrive;\n    barrier.cluster.wait;\n    add.s32",
                        "add.s32", 1)
    text = HEAD.format(target="sm_90") + racy
    with pytest.raises(TargetFault, match="shared memory race: read of shared address 1024 "
                       "of CTA rank 1 written by thread 0 of the cluster's CTA rank 1 "
                       "without a cluster barrier") as err:
        ts.ptx.load(text).kernel("ring").run(
            grid=2, block=64, args=[np.zeros(128, np.int32), np.zeros(128, np.int32)])
    remote = [k for k, line in enumerate(text.splitlines(), 1) if "ld.shared::cluster" in line]
    assert [err.value.loc.line] == remote and err.value.cta == (0, 0, 0)


def test_a_cta_that_may_exit_before_its_neighbour_reads_its_memory() -> None:
    """Without the last cluster barrier, a CTA may exit, and its shared memory be gone,
    while its neighbour still reads it: reported at the mapa."""
    early = RING.replace("barrier.cluster.arrive;\n    barrier.cluster.wait;\n    ret;", "ret;")
    text = HEAD.format(target="sm_90") + early
    with pytest.raises(TargetFault, match="CTA rank 0's shared memory is mapped here, and "
                       "CTA rank 0 waits for no cluster barrier after it") as err:
        ts.ptx.load(text).kernel("ring").run(
            grid=2, block=64, args=[np.zeros(128, np.int32), np.zeros(128, np.int32)])
    assert err.value.what == "cluster exit" and "cluster.sync()" in str(err.value)
    assert err.value.cta == (1, 0, 0)  # rank 1's thread, which reads rank 0's memory
    assert err.value.loc.line == next(k for k, line in enumerate(text.splitlines(), 1)
                                      if "mapa" in line)


def test_the_cluster_barriers_mistakes() -> None:
    wait = _fault(cluster_module("barrier.cluster.wait;").kernel("k"))
    assert wait.what == "cluster barrier" and "with no barrier.cluster.arrive" in str(wait)
    twice = _fault(cluster_module("barrier.cluster.arrive;\nbarrier.cluster.arrive;").kernel("k"))
    assert "barrier.cluster.arrive again before the thread's barrier.cluster.wait" in str(twice)
    # rank 1's second warp waits at a named barrier no other thread reaches instead
    skip = cluster_module("\n".join([
        "mov.u32 %r3, %cluster_ctarank;", "setp.eq.u32 %p1, %r3, 1;", "setp.ge.u32 %p2, %r1, 32;",
        "and.pred %p3, %p1, %p2;", "@%p3 bra SKIP;", "barrier.cluster.arrive;",
        "barrier.cluster.wait;", "bra DONE;", "SKIP:", "bar.sync 1, 64;", "DONE:"])).kernel("k")
    hang = _fault(skip, block=64)
    assert "barrier.cluster.wait never completes: 32 thread(s) of the cluster never arrive, " \
           "the first thread 32 of CTA (1, 0, 0) (rank 1)" in str(hang)
    aligned = _fault(cluster_module(
        "setp.lt.u32 %p1, %r1, 8;\n@%p1 barrier.cluster.arrive.aligned;").kernel("k"))
    assert aligned.what == "warp divergence"


def test_addresses_of_another_cta_need_a_cluster_access() -> None:
    cta = _fault(_counter(space=".shared"))
    assert cta.what == "cluster address" and "only .shared::cluster and generic" in str(cta)
    far = _fault(cluster_module("mov.u32 %r8, buf;\nmapa.shared::cluster.u32 %r7, %r8, 2;")
                 .kernel("k"))
    assert far.what == "cluster rank" and "mapa to CTA rank 2: the cluster has 2 CTAs" \
        in str(far)
    # a cluster address made by hand past the last rank's window
    past = _fault(cluster_module("mov.u32 %r7, 0x800400;\nld.shared::cluster.u32 %r9, [%r7];")
                  .kernel("k"))
    assert "lies in the window of CTA rank 3, and the cluster has 2 CTAs" in str(past)


@pytest.mark.parametrize("launch, message", [
    ({"grid": 3}, r"grid dimension x \(3\) is not a multiple of the cluster's \(2\)"),
    ({"grid": 16, "cluster": 16}, "a cluster of 16 CTAs is more than 8; up to 16 needs the "
                                  "kernel's cudaFuncAttributeNonPortableClusterSizeAllowed"),
    ({"grid": 4, "cluster": (4, 1, 1)},
     r"\.reqnctapercluster asks for clusters of \(2, 1, 1\), not \(4, 1, 1\)"),
])
def test_launches_a_gpu_refuses(launch: dict, message: str) -> None:
    fixed = ts.ptx.load(HEAD.format(target="sm_90") + RING).kernel("ring")
    kernel = cluster_module("").kernel("k") if launch.get("cluster") == 16 else fixed
    args = [np.zeros(1024, np.int32)] * len(kernel.params)
    with pytest.raises(ts.ArgumentError, match=message):
        kernel.run(block=64, args=args, **{"cluster": None, **launch})


def test_clusters_need_sm_90_and_an_explicit_kernel_needs_one() -> None:
    with pytest.raises(ts.ArgumentError, match="clusters need sm_90 or later; the kernel is "
                       "for sm_80"):
        cluster_module("", target="sm_80").kernel("k").run(grid=2, block=32,
                                                     args=[np.zeros(4, np.uint32)], cluster=2)
    explicit = cluster_module("", directives="\n.explicitcluster").kernel("k")
    with pytest.raises(ts.ArgumentError, match=r"marked \.explicitcluster: launch it with "
                       "cluster dimensions"):
        explicit.run(grid=2, block=32, args=[np.zeros(4, np.uint32)])
    bounded = cluster_module("", directives="\n.maxclusterrank 2").kernel("k")
    with pytest.raises(ts.ArgumentError, match=r"the kernel's \.maxclusterrank allows 2"):
        bounded.run(grid=4, block=32, args=[np.zeros(4, np.uint32)], cluster=4)


def test_cluster_instructions_render_assemble_and_read_back(tmp_path: Path) -> None:
    """Target IR of a kernel that stores its rank into its right neighbour's shared
    memory, rendered, assembled by ptxas for sm_90a and run again from its text."""
    from tessera.backend.ptx.render import render
    from tessera.ir.dialects.target import U64, Return
    from tessera.ir.dialects.target.mbarrier_ops import ClusterArrive, ClusterWait
    from tessera.ir.dialects.target.memory_ops import GetCtaRank, Mapa
    from tessera.ir.dialects.target.ops import Binary, Load, SharedAlloc, Special, Store
    from tests.backend.ptx.render.test_render import c, do, elem_addr, kernel, one, ptxas

    fn, b, (out,) = kernel("right", [U64], target="sm_90a", block=32)
    buf = one(b, SharedAlloc("buf", 128))
    tid, rank = one(b, Special("tid.x")), one(b, Special("cluster_ctarank"))
    size = one(b, Special("cluster_nctarank"))
    right = one(b, Binary("rem", "u32"), one(b, Binary("add", "u32"), rank, c(b, 1, "u32")),
                size)
    mine = one(b, Binary("add", "u32"), buf, one(b, Binary("mul", "u32"), tid,
                                                   c(b, 4, "u32")))
    there = one(b, Mapa(), mine, right)
    do(b, Store("shared::cluster", "u32"), there, rank)
    do(b, ClusterArrive(aligned=True))
    do(b, ClusterWait(aligned=True))
    got = one(b, Load("shared", "u32"), mine)
    owner = one(b, GetCtaRank(), there)
    cta = one(b, Special("ctaid.x"))
    row = one(b, Binary("add", "u32"), one(b, Binary("mul", "u32"), cta, c(b, 64, "u32")), tid)
    do(b, Store("global", "u32"), elem_addr(b, out, row, 4), got)
    do(b, Store("global", "u32"), elem_addr(b, out, one(b, Binary("add", "u32"), row,
                                                        c(b, 32, "u32")), 4), owner)
    do(b, ClusterArrive(relaxed=True))
    do(b, ClusterWait())
    do(b, Return())
    text = render(fn)
    for line in ("mapa.shared::cluster.u32", "st.shared::cluster.u32", "getctarank."
                 "shared::cluster.u32", "barrier.cluster.arrive.aligned;",
                 "barrier.cluster.wait.aligned;", "barrier.cluster.arrive.relaxed;",
                 "mov.u32 %r", "%cluster_ctarank;"):
        assert line in text, line
    ptxas(text, "sm_90a", tmp_path)
    out = np.zeros(6 * 64, np.uint32)
    ts.ptx.load(text).kernel("right").run(grid=6, block=32, args=[out], cluster=3)
    rows = out.reshape(6, 2, 32)
    left = (np.arange(6) % 3 + 2) % 3  # each CTA's left neighbour wrote its rank there
    np.testing.assert_array_equal(rows[:, 0], np.repeat(left[:, None], 32, axis=1))
    np.testing.assert_array_equal(rows[:, 1], np.repeat(((np.arange(6) % 3 + 1) % 3)[:, None],
                                                        32, axis=1))


def test_an_arrival_on_another_ctas_mbarrier_needs_a_cluster_address_space() -> None:
    """``mbarrier.arrive.shared::cta`` reaches the CTA's own barriers only; with
    ``.shared::cluster`` the same arrival completes the other CTA's phase."""
    body = "\n".join([
        "mov.u32 %r8, buf;", "mbarrier.init.shared::cta.b64 [%r8], 32;",
        "barrier.cluster.arrive;", "barrier.cluster.wait;",
        "mov.u32 %r3, %cluster_ctarank;", "xor.b32 %r4, %r3, 1;",
        "mapa.shared::cluster.u32 %r7, %r8, %r4;",
        "mbarrier.arrive.release.cluster.shared::SPACE.b64 _, [%r7];",
        "WAIT: mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r8], 0;", "@!%p1 bra WAIT;",
        "barrier.cluster.arrive;", "barrier.cluster.wait;"])
    local = _fault(cluster_module(body.replace("SPACE", "cta")).kernel("k"))
    assert local.what == "cluster address" and "mbarrier.arrive" in local.op
    out = np.zeros(4, np.uint32)
    cluster_module(body.replace("SPACE", "cluster")).kernel("k").run(grid=2, block=32, args=[out],
                                                              cluster=2)


def _multicast_kernel() -> Any:
    """Target IR of a cluster of 2: each CTA multicasts its 16 rows of a 32x32 f32 tile
    into both CTAs (CTA mask 0b11), whose ``full`` barriers expect the whole tile; each
    thread ``t`` stores element (t, t); then each CTA arrives on the other's ``empty``
    barrier through its cluster address and waits for the other's arrival on its own."""
    from tessera.ir.dialects.target import U64, TensorMapType
    from tessera.ir.dialects.target.async_ops import (
        MbarrierArrive,
        MbarrierInit,
        MbarrierWait,
        TmaLoad,
    )
    from tessera.ir.dialects.target.mbarrier_ops import ClusterArrive, ClusterWait
    from tessera.ir.dialects.target.memory_ops import Mapa
    from tests.interp.target.kit import Kernel

    k = Kernel("mc", [TensorMapType(0, "f32", (16, 32)), U64], block=(32,), grid=(4, 1, 1),
               target="sm_90a")
    tile, full, empty = k.shared("tile", 4096, 128), k.shared("full", 8, 8), \
        k.shared("empty", 8, 8)
    tid, rank = k.tid(), k.sreg("cluster_ctarank")
    first = k.setp("eq", "u32", tid, k.const(0, "u32"))

    def init() -> None:
        k.op(MbarrierInit(1), full)
        k.op(MbarrierInit(1), empty)
    k.if_(first, init)
    k.op(ClusterArrive(aligned=True))
    k.op(ClusterWait(aligned=True))
    cluster_row = k.bin("mul", "u32", k.bin("shr", "u32", k.sreg("ctaid.x"), k.const(1, "u32")),
                        k.const(32, "u32"))
    row = k.bin("add", "u32", cluster_row, k.bin("mul", "u32", rank, k.const(16, "u32")))

    def load() -> None:
        k.op(MbarrierArrive(tx=4096), full)
        dst = k.bin("add", "u32", tile, k.bin("mul", "u32", rank, k.const(2048, "u32")))
        k.op(TmaLoad(multicast=True), dst, k.args[0], k.const(0, "s32"),
             k.cvt("s32", "u32", row), full, k.const(3, "u16"))
    k.if_(first, load)
    k.op(MbarrierWait(), full, k.const(0, "u32"))
    value = k.ld("shared", "f32", k.sh_addr(tile, k.bin("mul", "u32", tid, k.const(33, "u32")),
                                             4))
    at = k.bin("add", "u32", k.bin("mul", "u32", k.sreg("ctaid.x"), k.const(32, "u32")), tid)
    k.st("global", "f32", k.elem_addr(k.args[1], at, 4), value)
    k.bar()

    def release() -> None:
        other = k.bin("xor", "u32", rank, k.const(1, "u32"))
        k.op(MbarrierArrive(remote=True), k.op(Mapa(), empty, other))
        k.op(MbarrierWait(), empty, k.const(0, "u32"))
    k.if_(first, release)
    k.op(ClusterArrive())
    k.op(ClusterWait())
    return k.build()


def test_a_multicast_load_and_a_remote_arrival_render_assemble_and_read_back(
        tmp_path: Path) -> None:
    from tessera.backend.ptx.render import render
    from tessera.interp.target import TensorMapArg, run_target
    from tests.backend.ptx.render.test_render import ptxas

    fn = _multicast_kernel()
    text = render(fn)
    assert ".multicast::cluster [" in text and "mbarrier.arrive.shared::cluster.b64 _, [" \
        in text
    ptxas(text, "sm_90a", tmp_path)
    x = np.random.default_rng(5).standard_normal((64, 32)).astype(np.float32)
    want = np.stack([np.diag(x[32 * (c // 2):32 * (c // 2) + 32]) for c in range(4)])
    structured = np.zeros((4, 32), np.float32)
    run_target(fn, [TensorMapArg(x, "f32", (16, 32)), structured], cluster=(2, 1, 1))
    from_text = np.zeros((4, 32), np.float32)
    ts.ptx.load(text).kernel("mc").run(grid=4, block=32, cluster=2, args=[
        ts.ptx.tensor_map(x, box=(16, 32)), from_text])
    np.testing.assert_array_equal(structured, want)
    np.testing.assert_array_equal(from_text, want)
