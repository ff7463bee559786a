"""``tessera check-ptx`` on nvcc's PTX: the report, the reference comparison, faults
and argument errors at the user's file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera.cli import main
from tessera.cli_ptx import parse_arg
from tests.frontend.ptx.corpus import CORPUS, NVCC_PTX, STRUCT_AXPY, line_of

SAXPY = ["check-ptx", str(NVCC_PTX), "--kernel", "saxpy", "--grid", "4", "--block", "256",
         "--arg", "f32=2.5", "--arg", "f32[1000]=randn", "--arg", "f32[1000]=randn"]


@pytest.fixture()
def reference(tmp_path: Path) -> Path:
    path = tmp_path / "ref.py"
    path.write_text("import numpy as np\n\n"
                    "def saxpy(n, a, x, y):\n"
                    "    return (np.float64(a) * x + y).astype(np.float32)\n\n"
                    "def wrong(n, a, x, y):\n"
                    "    return [None, y + 1]\n")
    return path


def test_report_with_reference(reference: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SAXPY[:8], "--arg", "u32=1000", *SAXPY[8:]]
    assert main([*argv, "--reference", f"{reference}:saxpy"]) == 0
    out = capsys.readouterr().out
    assert "grid (4, 1, 1) x block (256, 1, 1) = 1024 threads" in out
    assert "argument 2: f32[1000] randn" in out
    assert "sanitizer: no faults" in out and "shared-memory races" in out
    assert "argument 3 (float32[1000]): max |error| 0 (rtol 7.63e-06" in out
    assert out.rstrip().endswith("result: OK")


def test_mismatch_exits_1(reference: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SAXPY[:8], "--arg", "u32=1000", *SAXPY[8:]]
    assert main([*argv, "--reference", f"{reference}:wrong"]) == 1
    out = capsys.readouterr().out
    assert "first mismatch at (0,)" in out and out.rstrip().endswith("result: MISMATCH")


def test_fault_names_the_ptx_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SAXPY[:8], "--arg", "u32=1100", *SAXPY[8:]]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "sanitizer: FAULT" in captured.out
    text = NVCC_PTX.read_text()
    start = line_of(text, ".entry saxpy(")
    where = f"{NVCC_PTX}:{line_of(text, 'ld.global.f32', start)}: kernel fault"
    assert captured.err.startswith(f"tessera: {where}")
    assert "out of bounds" in captured.err


def test_argument_errors(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SAXPY[:8], "--arg", "s64=1000", *SAXPY[8:]]
    assert main(argv) == 1
    err = capsys.readouterr().err
    entry = line_of(NVCC_PTX.read_text(), ".entry saxpy(")
    assert err.startswith(f"tessera: {NVCC_PTX}:{entry}: argument error: argument 0")
    assert main([*SAXPY[:8], "--arg", "f32[10]=bogus"]) == 1
    assert "bad initialiser 'bogus'" in capsys.readouterr().err
    assert main([*SAXPY[:3], "nope"]) == 1
    assert "has no kernel 'nope'" in capsys.readouterr().err


def test_a_whole_file_is_read_and_checked_without_a_kernel(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tessera check-ptx FILE`` with no ``--kernel``: every kernel read and checked
    against the ISA's rules, none run; a launch option then asks for a kernel."""
    assert main(["check-ptx", str(NVCC_PTX)]) == 0
    out = capsys.readouterr().out
    assert "22 kernel(s)" in out and out.count("PtxKernel ") == 22
    assert "PtxKernel saxpy(.u32 saxpy_param_0" in out and "result: OK" in out
    assert main(["check-ptx", str(NVCC_PTX), "--grid", "4", "--arg", "u32=3"]) == 1
    err = capsys.readouterr().err
    assert "--grid, --arg describe a launch of one kernel: name it with --kernel (saxpy," in err
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n"
                   "{\n .reg .b32 %r<3>;\n add.b32 %r1, %r2, %r2;\n ret;\n}\n")
    assert main(["check-ptx", str(bad)]) == 1
    assert capsys.readouterr().err.startswith(f"tessera: {bad}:7: PTX syntax error: add takes")


def test_arg_specs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a, _ = parse_arg("u16[2,3]=arange", rng)
    assert a.dtype == np.uint16 and a.tolist() == [[0, 1, 2], [3, 4, 5]]
    s, _ = parse_arg("s32=-7", rng)
    assert s == np.int32(-7) and isinstance(s, np.int32)
    path = tmp_path / "x.npy"
    np.save(path, np.arange(4.0))
    x, text = parse_arg(str(path), rng)
    assert x.tolist() == [0, 1, 2, 3] and "float64[4]" in text
    tm, text = parse_arg("tmap:bf16[128,64]=randn:64x64:sw128", rng)
    assert tm.box == (64, 64) and tm.swizzle == 128 and tm.elem == "bf16"
    r, _ = parse_arg("u32[5]=randint:3:4", rng)
    assert r.tolist() == [3] * 5


def test_hopper_tensor_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--tensor-cores hopper`` runs nvcc's mma.sync with the H100/H200 accumulation."""
    import ml_dtypes

    a = np.ones((16, 16), ml_dtypes.bfloat16).view(np.uint16)
    b = np.ones((16, 8), ml_dtypes.bfloat16).view(np.uint16)
    for name, x in (("a", a), ("b", b)):
        np.save(tmp_path / f"{name}.npy", x)
    argv = ["check-ptx", str(NVCC_PTX), "--kernel", "mma_tile", "--grid", "1", "--block",
            "32", "--arg", str(tmp_path / "a.npy"), "--arg", str(tmp_path / "b.npy"),
            "--arg", "f32[128]=zeros", "--tensor-cores", "hopper"]
    assert main(argv) == 0
    assert "tensor cores: hopper" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv[:-1], "volta"])
    assert "invalid choice: 'volta'" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "why"), [
    (["--block", "2000"], "a block of 2000 along x: at most 1024"),
    (["--block", "64,32"], "a block of 2048 threads: at most 1024"),
    (["--block", "1,1,65"], "a block of 65 along z: at most 64"),
    (["--grid", "1,65536"], "a grid of 65536 along y: at most 65535"),
    (["--shared-bytes", str(228 * 1024)], "233472 bytes of shared memory a CTA"),
])
def test_a_launch_a_gpu_would_refuse_is_refused(extra: list[str], why: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """CUDA's launch limits (CUDA C++ Programming Guide, "Compute Capabilities"): the
    interpreter would run such a launch, a GPU fails it with CUDA_ERROR_INVALID_VALUE."""
    argv = [*SAXPY[:8], "--arg", "u32=1000", *SAXPY[8:]]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 1
    err = capsys.readouterr().err
    entry = line_of(NVCC_PTX.read_text(), ".entry saxpy(")
    assert err.startswith(f"tessera: {NVCC_PTX}:{entry}: argument error: a GPU would refuse")
    assert why in err


def test_the_kernels_thread_directives_bound_its_block() -> None:
    """``.reqntid`` is the CTA's exact shape and ``.maxntid`` bounds its threads (PTX
    ISA sec. 11.4); tessera's own kernels carry ``.maxntid``."""
    import tessera as ts
    from tessera.errors import ArgumentError

    body = NVCC_PTX.read_text()
    for directive, block, ok in ((".reqntid 128", 128, True), (".reqntid 128", 256, False),
                                 (".reqntid 128, 2", 128, False), (".maxntid 256", 256, True),
                                 (".maxntid 256", 512, False)):
        head, rest = body.split(".entry saxpy(", 1)
        params, tail = rest.split(")", 1)
        kernel = ts.ptx.load(f"{head}.entry saxpy({params}) {directive}{tail}").kernel("saxpy")
        x = np.zeros(1000, np.float32)
        launch = {"grid": (1000 + block - 1) // block, "block": block,
                  "args": [np.uint32(1000), np.float32(1), x, x.copy()]}
        if ok:
            kernel.run(**launch)
        else:
            with pytest.raises(ArgumentError, match=directive.split()[0][1:]):
                kernel.run(**launch)


def test_files_that_are_not_ptx_or_arrays(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cubin, npy = tmp_path / "k.cubin", tmp_path / "x.npy"
    cubin.write_bytes(b"\x7fELF\x02\x01\xff\x00")
    npy.write_text("not an array\n")
    assert main(["check-ptx", str(cubin), "--kernel", "saxpy"]) == 1
    err = capsys.readouterr().err
    assert f"argument error: '{cubin}' is not text (byte 6 is not UTF-8)" in err
    assert "not a cubin" in err and "Traceback" not in err
    assert main([*SAXPY[:8], "--arg", "u32=1000", *SAXPY[8:10], "--arg", str(npy),
                 *SAXPY[12:]]) == 1
    err = capsys.readouterr().err
    assert f"'{npy}' is not an array NumPy can load" in err and "Traceback" not in err


def test_tritons_warp_specialised_attention_from_the_command_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Triton tensor descriptor (``tdesc:``) is five parameters: its map, two sizes
    and two strides; the reference gets the maps' arrays. Within 2^-6 max|O|: about
    2^-8 max|V| (test_triton_attention.py), max|V| being about three times max|O|."""
    corpus = NVCC_PTX.parent
    argv = ["check-ptx", str(corpus / "triton_attention_sm90a.ptx"), "--kernel",
            "attn_fwd_ws", "--grid", "4,2", "--block", "384", "--shared-bytes", "74144"]
    for init in ("randn", "randn", "randn", "zeros"):
        argv += ["--arg", f"tdesc:bf16[512,64]={init}:64x64:sw128"]
    argv += ["--arg", "s32=256", "--arg", "f32=0.125", "--arg", "u8[1]=zeros",
             "--arg", "u8[1]=zeros", "--rtol", "0", "--atol", str(2.0 ** -6),
             "--reference", f"{corpus / 'references.py'}:flash_attention"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "argument 15: Triton descriptor: tensor map of bf16[512, 64] box (64, 64)" in out
    assert "argument 18:   its row stride: s64=64" in out
    assert "sanitizer: no faults" in out and out.rstrip().endswith("result: OK")
    assert main([*argv[:-2], "--shared-bytes", "65536"]) == 1  # the mbarriers lie above
    assert "out of bounds" in capsys.readouterr().err


def test_a_triton_descriptor_needs_a_contiguous_matrix() -> None:
    import tessera as ts
    from tessera.errors import ArgumentError

    a = np.zeros((64, 128), np.float32)
    tmap, *rest = ts.ptx.triton_descriptor(a, box=(32, 32), swizzle=128)
    assert [int(x) for x in rest] == [64, 128, 128, 1] and tmap.box == (32, 32)
    with pytest.raises(ArgumentError, match="row-major contiguous"):
        ts.ptx.triton_descriptor(a[:, ::2], box=(32, 32))


def test_a_cooperative_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cooperative`` gives cooperative groups' ``grid.sync()`` its grid workspace;
    without it the kernel traps and the hint says what to add."""
    ref = tmp_path / "ref.py"
    ref.write_text("def grid_sum(x, partial, total):\n"
                   "    return [None, x.reshape(4, -1).sum(axis=1), x.sum(keepdims=True)]\n")
    argv = ["check-ptx", str(CORPUS / "libraries_sm80.ptx"), "--kernel", "grid_sum",
            "--grid", "4", "--block", "256", "--arg", "s32[1024]=randint:-9:9",
            "--arg", "s32[4]=zeros", "--arg", "s32[1]=zeros"]
    assert main([*argv, "--cooperative", "--reference", f"{ref}:grid_sum"]) == 0
    out = capsys.readouterr().out
    assert "cooperative launch" in out and out.rstrip().endswith("result: OK")
    assert main(argv) == 1
    assert "run it with cooperative=True" in capsys.readouterr().err



def test_clusters_from_the_command_line(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--cluster`` launches in thread block clusters; nvcc's histogram kernel names its
    own shape (``__cluster_dims__(2, 1, 1)``), so another one is refused at its line."""
    ref = tmp_path / "ref.py"
    ref.write_text("import numpy as np\n"
                   "def histogram(values, counts, n, bins):\n"
                   "    return [None, np.bincount(values, minlength=16).astype(np.int32)]\n")
    argv = ["check-ptx", str(CORPUS / "kernels_sm90.ptx"), "--kernel", "cluster_histogram",
            "--grid", "4", "--block", "128", "--shared-bytes", "32", "--arg",
            "s32[1000]=randint:0:16", "--arg", "s32[16]=zeros", "--arg", "s32=1000",
            "--arg", "s32=16"]
    assert main([*argv, "--cluster", "2", "--reference", f"{ref}:histogram"]) == 0
    out = capsys.readouterr().out
    assert "clusters of (2, 1, 1)" in out and out.rstrip().endswith("result: OK")
    assert main([*argv, "--cluster", "4"]) == 1
    entry = line_of((CORPUS / "kernels_sm90.ptx").read_text(), ".entry cluster_histogram(")
    assert f"kernels_sm90.ptx:{entry}: argument error: a GPU would refuse" in \
        capsys.readouterr().err


def test_a_struct_passed_by_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``struct{...}``: the fields in order, the array a pointer field; the reference
    gets the fields and its array is an output."""
    ptx, ref = tmp_path / "axpy.ptx", tmp_path / "ref.py"
    ptx.write_text(STRUCT_AXPY)
    ref.write_text("def axpy(s):\n    x, n, k, a = s\n    x[:n] = x[:n] * a + k\n"
                   "    return [x]\n")
    argv = ["check-ptx", str(ptx), "--kernel", "axpy", "--block", "64", "--arg",
            "struct{f32[64]=randn; s32=60; u8=7; f32=0.5}", "--reference", f"{ref}:axpy"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "argument 0: struct {f32[64] randn; s32=60; u8=7; f32=0.5}" in out
    assert "argument 0, field 0 (float32[64]): max |error| 0" in out
    assert main([*argv[:-2], "--arg", "u32=4"]) == 1  # two arguments for one parameter
    assert main(["check-ptx", str(ptx), "--kernel", "axpy", "--arg", "struct{s32=1}"]) == 1
    assert "the struct has 4 bytes, the parameter 24" in capsys.readouterr().err


def test_texture_and_surface_arguments(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``tex{...}`` and ``surf{...}``: the reference gets their arrays; a surface's array
    is an output, compared after the launch."""
    ref = tmp_path / "ref.py"
    ref.write_text("import numpy as np\n"
                   "def brighten(pixels):\n    pixels[:, 0] += 1\n    return pixels\n"
                   "def shifted(image, out, w, dx, dy):\n"
                   "    right = np.concatenate([image[:, 1:], image[:, -1:]], axis=1)\n"
                   "    return ((image + right) / 2).reshape(-1)\n")
    surf = ["check-ptx", str(NVCC_PTX), "--kernel", "surf_bytes", "--block", "8", "--arg",
            "surf{u8[8,4]=arange; channels=4}", "--reference", f"{ref}:brighten"]
    assert main(surf) == 0
    out = capsys.readouterr().out
    assert "argument 0: surface over u8[8, 4] arange" in out
    assert "argument 0 (uint8[8, 4]): max |error| 0 (exact): OK" in out
    tex = ["check-ptx", str(NVCC_PTX), "--kernel", "tex_sample2d", "--grid", "4", "--block",
           "8", "--arg", "tex{f32[4,8]=arange; filter=linear}", "--arg", "f32[32]=zeros",
           "--arg", "s32=8", "--arg", "f32=1.0", "--arg", "f32=0.5", "--reference",
           f"{ref}:shifted"]
    assert main(tex) == 0
    out = capsys.readouterr().out
    assert "argument 0: texture over f32[4, 8] arange, filter linear" in out
    assert "argument 1 (float32[32]): max |error| 0" in out and "result: OK" in out
    assert main([*tex[:9], "tex{f32[4,8]=arange; wrap=1}", *tex[10:]]) == 1
    assert "a tex takes address, channels, coords, filter, read" in capsys.readouterr().err
