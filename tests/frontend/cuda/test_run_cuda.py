"""``tessera run-cuda``: whole CUDA programs (tests/frontend/cuda/programs) built with
nvcc against tessera's runtime and run as a separate process, their kernels on the CPU:
what they print, their exit status, and the reports of their mistakes at the ``.cu``
line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.frontend.cuda.build import CudaBuildError, build, find_nvcc

PROGRAMS = Path(__file__).parent / "programs"


def _toolchain() -> str | None:
    """Why the programs cannot be built here, or None."""
    try:
        find_nvcc()
    except CudaBuildError:
        return "no nvcc (pip install nvidia-cuda-nvcc)"
    return None if shutil.which("g++") else "nvcc needs a host C++ compiler (g++)"


pytestmark = pytest.mark.skipif(_toolchain() is not None, reason=str(_toolchain()))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def command(cache: Path, *argv: str) -> subprocess.CompletedProcess:
    """``tessera run-cuda ARGV`` in a process of its own (a fault ends it), building
    into ``cache``."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "tessera", "run-cuda", *argv],
                          capture_output=True, text=True, env=env, timeout=900)


def run_cuda(cache: Path, program: str, *args: str) -> subprocess.CompletedProcess:
    return command(cache, str(PROGRAMS / program), "--", *args)


def test_a_program_runs_with_its_memory_symbols_and_printf(cache: Path) -> None:
    done = run_cuda(cache, "vector_add.cu", "300")
    assert done.returncode == 0, done.stderr
    # the kernel's printf comes after what the host printed before the launch
    assert done.stdout.splitlines() == [
        "host: launching", "kernel: n = 300", "kernel: n = 300",
        f"host: no error, launches = 2, sum = {sum(range(300)):.1f}"]
    assert done.stderr == "tessera run-cuda: 2 kernel launches checked, no fault\n"


def test_a_program_split_into_files_with_options_among_them(cache: Path) -> None:
    """Host C++ in main.cpp, the kernel and its launch in kernels.cu; options may come
    after the files, the program's arguments after --."""
    split = PROGRAMS / "split"
    done = command(cache, str(split / "main.cpp"), str(split / "kernels.cu"), "--arch",
                   "sm_86", "--no-race-check", "--", "500")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sum {3 * sum(range(500)):.1f}\n"
    missing = command(cache, str(PROGRAMS / "vector_add.cu"), "300")
    assert missing.returncode == 1
    assert "'300' is not a source file nvcc builds" in missing.stderr
    assert "the program's arguments go after --" in missing.stderr


@pytest.mark.parametrize("order", [("first.cu", "second.cu"), ("second.cu", "first.cu")])
def test_file_local_variables_and_kernels_of_one_name_stay_apart(cache: Path,
                                                                  order: tuple[str, ...]) -> None:
    """Each file's `static __device__ counter`, `static __constant__ step` (with its
    initial value) and `static __global__ bump` are its own, in either build order."""
    done = command(cache, *(str(PROGRAMS / "statics" / f) for f in order))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first 5", "second 200", "first 6"]


def _philox4x32_10(counter: list[int], key: list[int]) -> list[int]:
    """Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
    SC 2011): ten rounds of two 32x32 -> 64-bit products, the key bumped by the Weyl
    constants between rounds."""
    c, k, mask = list(counter), list(key), 0xFFFFFFFF
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & mask, (p0 >> 32) ^ c[3] ^ k[1], p0 & mask]
        k = [(k[0] + 0x9E3779B9) & mask, (k[1] + 0xBB67AE85) & mask]
    return c


def _philox_stream(seed: int, subsequence: int, offset: int, count: int) -> list[int]:
    """``count`` outputs of cuRAND's Philox state after ``curand_init(seed, subsequence,
    offset)``: the counter's low half counts blocks of four, its high half is the
    subsequence, the key is the seed."""
    key, out = [seed & 0xFFFFFFFF, seed >> 32], []
    for block in range(offset // 4, (offset + count + 3) // 4 + 1):
        out += _philox4x32_10([block & 0xFFFFFFFF, block >> 32, subsequence & 0xFFFFFFFF,
                               subsequence >> 32], key)
    return out[offset % 4:offset % 4 + count]


def _xorwow_stream(seed: int, offset: int, count: int) -> list[int]:
    """``count`` outputs of cuRAND's XORWOW after ``curand_init(seed, 0, offset)``
    (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 2003), stepped one output at a time
    where cuRAND skips ahead with its precomputed matrices."""
    m = 0xFFFFFFFF
    t0, t1 = (1099087573 * ((seed & m) ^ 0xAAD26B49)) & m, \
        (2591861531 * ((seed >> 32) ^ 0xF7DCEFDD)) & m
    d = (6615241 + t1 + t0) & m
    v = [(123456789 + t0) & m, 362436069 ^ t0, (521288629 + t1) & m, 88675123 ^ t1,
         (5783321 + t0) & m]
    out = []
    for _ in range(offset + count):
        t = v[0] ^ (v[0] >> 2)
        v = [*v[1:], (v[4] ^ (v[4] << 4) ^ t ^ (t << 1)) & m]
        d = (d + 362437) & m
        out.append((v[4] + d) & m)
    return out[offset:]


def _uniform(bits: int) -> float:
    """cuRAND's float in (0, 1]: ``bits * 2^-32 + 2^-33`` in float32."""
    return float(np.float32(bits) * np.float32(2.0**-32) + np.float32(2.0**-33))


def test_curand_device_api_gives_philox_and_xorwow_streams(cache: Path) -> None:
    """cuRAND's header-only device API: the raw bits and uniform floats against NumPy
    references of the two generators; the Box-Muller normals against float64 (they use
    `__sincosf`, the .approx sine and cosine)."""
    done = run_cuda(cache, "curand.cu")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    philox, xorwow = ([r[1:] for r in rows if r[0] == g] for g in ("philox", "xorwow"))
    assert len(philox) == len(xorwow) == 64
    for i, (_, b0, b1, b2, uni, nrm) in enumerate(philox):
        want = _philox_stream(0x123456789ABCDEF, i, 2 * i + 1, 6)
        assert [int(b, 16) for b in (b0, b1, b2)] == want[:3], i
        assert float.fromhex(uni) == _uniform(want[3])
        u, v = _uniform(want[4]), float(np.float32(want[5]) * np.float32(2.0**-32 * 2 * np.pi)
                                        + np.float32(2.0**-33 * 2 * np.pi))
        radius = np.sqrt(-2 * np.log(u))
        assert abs(float.fromhex(nrm) - radius * np.sin(v)) <= 1e-5 * radius + 1e-6, i
    for i, (_, b0, b1, uni) in enumerate(xorwow):
        want = _xorwow_stream(1234, i, 3)
        assert [int(b0, 16), int(b1, 16)] == want[:2], i
        assert float.fromhex(uni) == _uniform(want[2])


def test_graphs_captured_from_streams_and_built_node_by_node(cache: Path) -> None:
    """A graph captured from two streams (fork and join through events) runs only when
    launched, reading the pinned host buffer as it is then; a graph built node by node
    keeps its kernel's arguments after the function that gave them returned."""
    done = run_cuda(cache, "graphs.cu")
    assert done.returncode == 0, done.stderr
    n = 200
    assert done.stdout.splitlines() == [
        "s2 joined the capture: 1", "captured, nothing ran: calls 0, s2 capturing 0",
        *(f"launch {k}: out[0] {2 * k + 3} out[{n - 1}] {2 * (n - 1 + k) + 3} calls {k + 1}"
          for k in range(3)),
        "built: 4 nodes, out[7] 2 calls 4", "capture of the legacy stream refused: 1",
        "done: cudaSuccess"]
    assert done.stderr == "tessera run-cuda: 10 kernel launches checked, no fault\n"


def test_texture_objects_over_arrays_pitched_and_linear_memory(cache: Path) -> None:
    """Textures made by cudaCreateTextureObject: point sampling with a border, bilinear
    filtering with clamping, bytes read as floats, tex1Dfetch, wrapped float4 channels,
    trilinear filtering of a 3-D array from cudaMemcpy3D, a surface a kernel writes; a
    texture a GPU refuses."""
    done = run_cuda(cache, "textures.cu")
    assert done.returncode == 0, done.stderr
    x, y = np.meshgrid(np.arange(8), np.arange(4))
    border = np.where((y >= 1) & (x + 1 < 8), 10 * (y - 1) + x + 1, 0)
    # a quarter texel right and half a row down, clamped at the last column and row
    linear = (0.75 * np.minimum(x, 7) + 0.25 * np.minimum(x + 1, 7)
              + 5 * np.minimum(y, 3) + 5 * np.minimum(y + 1, 3))
    idx = np.arange(14) - 2
    fetch = np.where((idx >= 0) & (idx < 10), 3 * idx, 0)
    wrap = [v for i in range(8) for v in (i % 4, 10 + i % 4, 20 + i % 4, 30 + i % 4)]
    tri = 0.75 * (4 + np.clip(np.arange(8) * 0.25 - 0.5, 0, 3)) + 0.25 * (
        16 + np.clip(np.arange(8) * 0.25 - 0.5, 0, 3))

    def line(name: str, values: object) -> str:
        return " ".join([name, *(f"{v:g}" for v in np.ravel(values))])

    assert done.stdout.splitlines() == [
        line("point border", border), line("linear clamp", linear),
        " ".join(["normalized bytes", *(f"{17 * k / 255:.5f}" for k in range(8))]),
        line("tex1Dfetch", fetch), line("wrap float4", wrap), line("trilinear", tri),
        line("surface", 100 * y + x), "texture refused: 1", "done"]
    assert "linear filtering needs float results" in done.stderr


def _nvrtc_or_skip(done: subprocess.CompletedProcess) -> None:
    if "which is not installed" in done.stderr:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc)")


def test_nvrtc_and_the_driver_api(cache: Path) -> None:
    """A kernel NVRTC compiles at run time, loaded with cuModuleLoadData and launched
    with kernelParams and with a parameter buffer, its __device__ variable read and set
    through cuModuleGetGlobal; a PTX file loaded with cuModuleLoad."""
    done = run_cuda(cache, "nvrtc_driver.cu", str(PROGRAMS / "scale.ptx"))
    _nvrtc_or_skip(done)
    assert done.returncode == 0, done.stderr
    x = np.arange(1000, dtype=np.float64)
    y = 2.5 * x - 92  # y = 1; y = 2x + y + 7; y = 0.5x + y - 100
    assert done.stdout.splitlines() == [
        "missing kernel: 1", "bias 7 (4 bytes)",
        f"y[0] {y[0]:g} y[999] {y[-1]:g} sum {y.sum():.1f}", f"scaled x[999] {3 * 999:g}",
        "done"]
    assert done.stderr == "tessera run-cuda: 3 kernel launches checked, no fault\n"


def test_a_fault_in_an_nvrtc_kernel_is_reported_at_its_source_line(cache: Path) -> None:
    done = run_cuda(cache, "nvrtc_driver.cu", "overrun")
    _nvrtc_or_skip(done)
    assert done.returncode == 1
    assert "axpb.cu:5: kernel fault: kernel 'axpb': ld.global.f32" in done.stderr
    assert "4 bytes past the end of the buffer" in done.stderr
    assert "in PTX: cuModuleLoadData image 1:" in done.stderr
    cubin = run_cuda(cache, "nvrtc_driver.cu", "cubin")
    assert cubin.returncode == 0 and cubin.stdout == "cubin: CUDA_ERROR_INVALID_IMAGE\n"
    assert "tessera runs PTX, not cubins or fat binaries" in cubin.stderr


def test_the_device_heap_outlives_a_launch_and_takes_its_size_limit(cache: Path) -> None:
    done = run_cuda(cache, "device_heap.cu")
    assert done.returncode == 0, done.stderr
    k = np.arange(192)  # every 4096th int of 3 MiB
    assert done.stdout.splitlines() == [
        "default heap 8 MiB", "blocks taken: 4 of 4",
        "sums " + " ".join(str((10 * t + k).sum()) for t in range(4)),
        "a terabyte: NULL", "no error"]


def test_the_leak_check_names_the_line_of_each_allocation_never_freed(
        cache: Path, tmp_path: Path) -> None:
    """``--leak-check``: a cudaMalloc kept, a CUDA array kept and a device heap block no
    kernel gave back, each at the line that made it; the freed ones are not named; a
    program that ends with exit() gets the report too."""
    leaks = str(PROGRAMS / "leaks.cu")
    done = command(cache, leaks, "--leak-check")
    assert done.returncode == 0 and done.stdout == "done\n"
    lines = done.stderr.splitlines()
    assert [(line.split(" at ")[0], Path(line.rsplit(" at ", 1)[1]).name)
            for line in lines[:3]] == [
        ("tessera run-cuda: leak: 4000 bytes", "leaks.cu:9, never freed"),
        ("tessera run-cuda: leak: 256 bytes", "leaks.cu:14, never freed"),
        ("tessera run-cuda: leak: 64 bytes", "leaks.cu:5, never freed")]
    assert "from device malloc at" in lines[2]
    assert lines[3:] == ["tessera run-cuda: 3 allocations never freed",
                         "tessera run-cuda: 1 kernel launch checked, no fault"]
    assert "leak" not in command(cache, leaks).stderr
    early = tmp_path / "early.cu"
    early.write_text("#include <cstdlib>\nint main() {\n  float* p;\n  cudaMalloc(&p, 12);\n"
                     "  std::exit(3);\n}\n")
    ended = command(cache, str(early), "--leak-check")
    assert ended.returncode == 3
    assert "leak: 12 bytes at 0x" in ended.stderr and f"{early}:4, never freed" in ended.stderr


def test_kernels_reach_pinned_and_registered_host_memory(cache: Path) -> None:
    """cudaHostAlloc's memory through cudaHostGetDevicePointer, and a malloc'd buffer
    while it is registered; after cudaHostUnregister a kernel's read of it is out of
    bounds, and pinned memory given to cudaFree is an API misuse at its line."""
    done = run_cuda(cache, "mapped_memory.cu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pinned 1000 1063", "registered sum 0", "done"]
    late = run_cuda(cache, "mapped_memory.cu", "unregistered")
    assert late.returncode == 1 and "mapped_memory.cu:11: kernel fault" in late.stderr
    assert "below every buffer" in late.stderr
    wrong = run_cuda(cache, "mapped_memory.cu", "wrong-free")
    assert wrong.returncode == 1
    assert "mapped_memory.cu:39: CUDA API error: cudaFree(0x" in wrong.stderr
    assert "this memory is given back by cudaFreeHost" in wrong.stderr


def test_dynamic_shared_memory_above_48_kb_needs_the_opt_in(cache: Path) -> None:
    """A launch with 64 KB of dynamic shared memory is refused, and the occupancy
    calculator answers 0, until cudaFuncSetAttribute raises the kernel's limit; so CUB,
    which sizes its tiles by the occupancy calculator, keeps within what it may take."""
    done = run_cuda(cache, "shared_opt_in.cu")
    assert done.returncode == 0, done.stderr
    n = 16 * 1024
    assert done.stdout.splitlines() == [
        "before opting in: occupancy 0, refused 1",
        f"after: max dynamic 65536, occupancy above 0 1, no error, out[0] {3 * (n - 1)} "
        f"out[{n - 1}] 0"]
    assert "65536 bytes of dynamic shared memory, more than the 49152 it may take " \
        "without opting in" in done.stderr


def test_runtime_calls_beside_launches(cache: Path) -> None:
    """A kernel writes a __device__ variable through cudaGetSymbolAddress, and not its
    host shadow, which the host wrote (with a warning at the launch); pointer
    attributes name managed, device and unregistered memory; profiler ranges, peers, the
    default memory pool and a copy between devices 0 and 0 work as on one GPU."""
    done = run_cuda(cache, "runtime_calls.cu")
    assert done.returncode == 0, done.stderr
    assert "warning: host code wrote the host shadow of 'table'; kernels never see it" \
        in done.stderr
    assert done.stdout.splitlines() == [
        "symbol of 32 bytes: 2 16, shadow 100 0",
        "managed 1, symbol device 1, stack unregistered 1",
        "peer access 0, pooled copy 10 30, no error"]


def test_thread_block_clusters_share_their_shared_memory(cache: Path) -> None:
    """A __cluster_dims__ kernel reads its neighbour's shared memory between cluster
    barriers; a cudaLaunchKernelEx launch in clusters of four adds into the first CTA's
    counter with atomics; launches a GPU refuses return cudaErrorInvalidClusterSize."""
    done = command(cache, str(PROGRAMS / "clusters.cu"), "--arch", "sm_90a")
    assert done.returncode == 0, done.stderr
    x = np.arange(256).reshape(4, 64)
    swapped = 1000 * x + x.reshape(2, 2, 64)[:, ::-1, ::-1].reshape(4, 64)
    ranks = np.arange(8) % 4  # rank, its x in the cluster and the cluster's 4 CTAs
    assert done.stdout.splitlines() == [
        f"swap: {swapped[0, 0]} {swapped[0, 63]} {swapped[1, 0]} {swapped[3, 63]}",
        f"clusters of 4: cudaSuccess, totals {32 * 10} {32 * 10}, CTAs "
        + " ".join(str(100 * r + 10 * r + 4) for r in ranks),
        "grid of 6: cudaErrorInvalidClusterSize", "clusters of 16: cudaErrorInvalidClusterSize"]
    assert "grid dimension x (6) is not a multiple of the cluster's (4)" in done.stderr


def test_a_read_of_another_ctas_memory_before_the_cluster_barrier_is_a_race(
        cache: Path, tmp_path: Path) -> None:
    source = tmp_path / "early.cu"
    source.write_text(
        "#include <cooperative_groups.h>\n"
        "namespace cg = cooperative_groups;\n"
        "__global__ void __cluster_dims__(2, 1, 1) early(int* out) {\n"
        "  __shared__ int v[32];\n  cg::cluster_group c = cg::this_cluster();\n"
        "  v[threadIdx.x] = threadIdx.x;\n"
        "  int* other = c.map_shared_rank(v, c.block_rank() ^ 1);\n"
        "  out[blockIdx.x * 32 + threadIdx.x] = other[threadIdx.x];\n"
        "  c.sync();\n}\n"
        "int main() {\n  int* out;\n  cudaMalloc(&out, 256);\n  early<<<2, 32>>>(out);\n"
        "  return cudaDeviceSynchronize();\n}\n")
    done = command(cache, str(source), "--arch", "sm_90a")
    assert done.returncode != 0
    assert "early.cu:8" in done.stderr and "shared memory race" in done.stderr, done.stderr
    assert "of the cluster's CTA rank 1 without a cluster barrier" in done.stderr


def test_3d_copies_between_arrays_with_positions(cache: Path) -> None:
    done = run_cuda(cache, "arrays_3d.cu")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "corner 17 18 21 22, rest 0, no error\n"  # 12 + 4 + 1 = 17
    past = run_cuda(cache, "arrays_3d.cu", "past")
    assert past.returncode == 1
    assert "arrays_3d.cu:26: CUDA API error: cudaMemcpy3D's source: rows 2 to 4 of slices " \
        "1 to 2 pass the array's 3 rows and 2 slices" in past.stderr


def test_tma_through_a_tensor_map_the_program_encodes(cache: Path) -> None:
    """cuTensorMapEncodeTiled (through cudaGetDriverEntryPointByVersion) makes a tensor
    map the kernel's cp.async.bulk.tensor copies tiles with; a map a GPU would refuse
    (a row stride not a multiple of 16) is refused with its reason."""
    done = command(cache, str(PROGRAMS / "tma_tiles.cu"), "--arch", "sm_90a")
    assert done.returncode == 0, done.stderr
    x = np.arange(64 * 96) % 1000
    assert done.stdout.splitlines() == [
        "found 1, encoded 1",
        f"out[0] 0 out[{x.size - 1}] {2 * x[-1]} sum {2 * x.sum():.1f}, no error"]
    bad = command(cache, str(PROGRAMS / "tma_tiles.cu"), "--arch", "sm_90a", "--", "unaligned")
    assert bad.returncode == 0 and bad.stdout == "found 1, encoded 0\n"
    assert "globalStrides[0] = 388 must be a multiple of 16" in bad.stderr


def test_thrust_and_cub_decide_their_own_launches(cache: Path) -> None:
    cccl = Path(find_nvcc()).resolve().parent.parent / "include" / "cccl"
    if not cccl.is_dir():
        pytest.skip("CUB and Thrust need the nvidia-cuda-cccl wheel's headers")
    done = run_cuda(cache, "thrust_and_cub.cu")
    assert done.returncode == 0, done.stderr
    *values, last = done.stdout.splitlines()
    n = 20000
    want = np.sort((np.arange(n) * 7919) % 10007 - 5000)
    np.testing.assert_array_equal(np.array(values, np.int64), want)
    assert last == f"sum {want.sum()} max {want.max()}"


def test_common_patterns(cache: Path) -> None:
    """A tiled matrix product in dynamic shared memory with a __constant__ table, a
    warp-shuffle sum through streams, events and asynchronous copies, and a cooperative
    launch's grid-wide sync, against NumPy."""
    done = run_cuda(cache, "patterns.cu")
    assert done.returncode == 0, done.stdout + done.stderr
    n, i = 64, np.arange(64 * 64)
    a, b = (i % 7 - 3).reshape(n, n), (i % 5 - 2).reshape(n, n)
    rows, cols = np.indices((n, n))
    c = (a @ b) * np.array([1, 2, 3, -1])[(rows + cols) % 4]
    x = (np.arange(5000) * 37) % 101 - 50
    blocks = np.cumsum(x[:512].reshape(4, 128).sum(axis=1))
    assert done.stdout.splitlines() == [
        f"matmul {(c.reshape(-1) * (i % 13 + 1)).sum()}", f"warp_sum {x.sum()} timed",
        f"grid_scan 0 {blocks[0]} {blocks[1]} {blocks[2]}"]
    assert done.stderr == "tessera run-cuda: 3 kernel launches checked, no fault\n"


def test_cubs_hopper_path_on_sm_90a(cache: Path) -> None:
    """CUB's device-wide transform built for sm_90a takes its Hopper path: bulk copies
    into shared memory through an mbarrier, elect.sync, griddepcontrol."""
    done = command(cache, str(PROGRAMS / "hopper_transform.cu"), "--arch", "sm_90a")
    assert done.returncode == 0, done.stderr
    i = np.arange(100000)
    assert done.stdout == f"sum {float((2 * (i % 1000) + i % 7).sum()):.1f}\n"
    ptx = next(cache.rglob("hopper_transform.compute_90a.ptx")).read_text()
    assert "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes" in ptx


@pytest.mark.parametrize("mistake, line, what", [
    ("bounds", 12, "out of bounds: global read of 4 bytes"),
    ("uninitialised", 19, "uninitialised shared read"),
    ("assert", 24, "assertion failed: "),
])
def test_a_kernel_fault_ends_the_program_at_its_source_line(cache: Path, mistake: str,
                                                            line: int, what: str) -> None:
    done = run_cuda(cache, "mistakes.cu", mistake)
    assert done.returncode == 1 and "done" not in done.stdout
    report = done.stderr
    assert f"mistakes.cu:{line}: kernel fault" in report and what in report, report
    assert any(f"kernel '{k}(" in report for k in ("copy_all", "half_written", "positive"))
    assert "in PTX: " in report


@pytest.mark.parametrize("mistake, line, what", [
    ("copy", 46, "cudaMemcpy of 4004 bytes: the destination 0x"),
    ("free", 49, "cudaFree(0x"),
    ("graph", 56, "cudaMemsetAsync (recorded here; checked again when its graph ran): "
     "the destination 0x"),
    ("pitched", 66, "cudaMemcpy2D of 4296 bytes: the source 0x"),
])
def test_a_misused_api_call_ends_the_program_at_its_line(cache: Path, mistake: str,
                                                         line: int, what: str) -> None:
    done = run_cuda(cache, "mistakes.cu", mistake)
    assert done.returncode == 1 and "done" not in done.stdout
    assert f"mistakes.cu:{line}: CUDA API error: {what}" in done.stderr, done.stderr


def test_a_launch_a_gpu_refuses_returns_its_error(cache: Path) -> None:
    done = run_cuda(cache, "mistakes.cu", "launch")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["launch: invalid configuration argument", "done"]
    assert "launch of 'copy_all(int const*, int*, int)' failed" in done.stderr
    assert "a block of 2048 along x: at most 1024" in done.stderr


def test_build_errors_name_the_line_and_the_missing_calls(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k(int* x) { x[0] = 1 }\nint main() { return 0; }\n")
    with pytest.raises(CudaBuildError, match="expected a \";\"") as err:
        build(bad, out=tmp_path / "b1")
    assert (Path(err.value.loc.file).name, err.value.loc.line) == ("bad.cu", 1)
    driver = tmp_path / "driver.cu"
    driver.write_text("#include <cuda.h>\nint main() { CUdeviceptr p; "
                      "cuMemAddressReserve(&p, 1 << 20, 0, 0, 0); return 0; }\n")
    with pytest.raises(CudaBuildError, match="does not provide: cuMemAddressReserve"):
        build(driver, out=tmp_path / "b2")
    with pytest.raises(CudaBuildError, match="sm_80 and newer"):
        build(bad, arch="sm_75")


@pytest.mark.parametrize("program, args", [
    ("vector_add.cu", ["300"]), ("patterns.cu", []), ("thrust_and_cub.cu", []),
    ("hopper_transform.cu", []), ("statics/first.cu statics/second.cu", []),
    ("curand.cu", []), ("graphs.cu", []), ("textures.cu", []), ("device_heap.cu", []),
    ("mapped_memory.cu", []), ("shared_opt_in.cu", []), ("runtime_calls.cu", []),
    ("arrays_3d.cu", []), ("tma_tiles.cu", []), ("clusters.cu", []),
    ("nvrtc_driver.cu", [str(PROGRAMS / "scale.ptx")])])
def test_a_gpu_prints_what_the_cpu_run_prints(cache: Path, tmp_path: Path, program: str,
                                              args: list[str]) -> None:
    """The same program built with CUDA's own runtime and run on a GPU (``make
    gpu-check``): the same output."""
    from tessera.backend.ptx.driver import cuda_available

    usable, why = cuda_available()
    if not usable:
        pytest.skip(f"needs a GPU: {why}")
    exe, files = tmp_path / "native", [str(PROGRAMS / f) for f in program.split()]
    libraries = ["-lcuda", "-lnvrtc"] if "nvrtc" in program else []  # the driver API too
    subprocess.run([find_nvcc(), "-arch=native", "-O3", *files, *libraries, "-o", str(exe)],
                   check=True, capture_output=True)
    native = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    # TMA and clusters: sm_90 on
    arch = ["--arch", "sm_90a"] if program.startswith(("tma", "clusters")) else []
    here = command(cache, *files, *arch, "--", *args)
    assert native.returncode == here.returncode == 0, (native.stderr, here.stderr)
    assert native.stdout == here.stdout
