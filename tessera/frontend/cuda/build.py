"""Building a CUDA program for ``tessera run-cuda``: one nvcc call makes both the PTX
of its kernels (kept from nvcc's intermediate files, one module per ``.cu`` file) and a
shared library of its host code linked with tessera's runtime (``runtime*.cpp``) instead
of CUDA's.

nvcc is ``$TESSERA_NVCC``, the ``nvidia-cuda-nvcc`` wheel's or the one on ``PATH``; it
needs a host C++ compiler. CUB, Thrust and libcu++ come from the ``nvidia-cuda-cccl``
wheel where it is installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import Loc, TesseraError

NVCC_ENV = "TESSERA_NVCC"
#: tessera's CUDA runtime, compiled into every program (and the header they share)
RUNTIME = tuple(sorted(Path(__file__).parent.glob("runtime*.cpp")))
RUNTIME_HEADER = Path(__file__).with_name("runtime.h")
#: what nvcc says of a line of the user's source: ``file(line): error: ...``
_SOURCE_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error",
                           re.MULTILINE)
_UNDEFINED = re.compile(r"undefined reference to `(\w+)")
_ARCH = re.compile(r"^sm_(\d+)a?$")


class CudaBuildError(TesseraError):
    """A CUDA program that nvcc does not build for ``tessera run-cuda``."""

    kind = "CUDA build error"


@dataclass(frozen=True)
class Built:
    """A built program: its host code as a shared library, the PTX of each ``.cu``
    file's kernels and its source files."""

    library: Path
    ptx: tuple[Path, ...]
    sm: int
    sources: tuple[Path, ...]


#: the files nvcc builds: CUDA sources (device code too) and host C/C++
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def find_nvcc() -> str:
    """The nvcc to use, or :class:`CudaBuildError` when there is none."""
    override = os.environ.get(NVCC_ENV, "").strip()
    if override:
        return override
    for root in sys.path:
        candidate = Path(root) / "nvidia" / "cu13" / "bin" / "nvcc"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nvcc")
    if found is None:
        raise CudaBuildError("no nvcc found", loc=Loc("nvcc", 0),
                             hint=f"pip install nvidia-cuda-nvcc, or set {NVCC_ENV}")
    return found


def _nvrtc(nvcc: str, srcs: Sequence[Path]) -> list[str]:
    """Linker options for NVRTC (from the ``nvidia-cuda-nvrtc`` wheel, or the toolkit
    beside nvcc) where a source calls it: the library by its path, found at run time by
    its folder."""
    if not any(b"nvrtc" in src.read_bytes() for src in srcs):
        return []
    root = Path(nvcc).resolve().parent.parent
    found = sorted(x for d in ("lib", "lib64") for x in (root / d).glob("libnvrtc.so*")
                   if "builtins" not in x.name)
    if not found:
        return []  # the link then names the missing nvrtc calls
    return ["-Xlinker", str(found[0]), "-Xlinker", f"-rpath={found[0].parent}"]


def _includes(nvcc: str) -> list[str]:
    """CCCL's headers (CUB, Thrust) beside the wheel's nvcc, where that wheel is there."""
    cccl = Path(nvcc).resolve().parent.parent / "include" / "cccl"
    return [f"-I{cccl}"] if cccl.is_dir() else []


def build(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
          arch: str = "sm_80", out: Path | None = None, flags: tuple[str, ...] = ()) -> Built:
    """Build a program's files (``.cu`` with kernels, host ``.cpp``; one has ``main``)
    for ``arch`` into ``out`` (by default a cache folder keyed by the sources, the flags
    and the runtime), reusing an earlier build."""
    srcs = [Path(sources)] if isinstance(sources, (str, os.PathLike)) else \
        [Path(x) for x in sources]
    for src in srcs:
        if src.suffix not in SOURCE_SUFFIXES:
            raise CudaBuildError(f"{str(src)!r} is not a source file nvcc builds",
                                 loc=Loc(str(src), 0), hint="give .cu files (and host "
                                 ".cpp files); the program's arguments go after --")
        if not src.is_file():
            raise CudaBuildError(f"no file {str(src)!r}", loc=Loc(str(src), 0))
    first = srcs[0]
    if not any(x.suffix == ".cu" for x in srcs):
        raise CudaBuildError("no .cu file: the kernels and their launches are CUDA C++",
                             loc=Loc(str(first), 0), hint="give the program's .cu files")
    m = _ARCH.match(arch)
    if m is None or int(m.group(1)) < 80:
        raise CudaBuildError(f"target {arch!r}: tessera runs sm_80 and newer",
                             loc=Loc(str(first), 0), hint="give --arch sm_80, sm_86, sm_89 "
                             "or sm_90a")
    sm = int(m.group(1))
    nvcc = find_nvcc()
    key = hashlib.sha256(b"\0".join([*(f"{x}".encode() + x.read_bytes() for x in srcs),
                                     *(f.read_bytes() for f in (*RUNTIME, RUNTIME_HEADER)),
                                     Path(__file__).read_bytes(),
                                     arch.encode(), *(f.encode() for f in flags)]))
    out = out or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "tessera" / "run-cuda" / f"{first.stem}-{key.hexdigest()[:16]}"
    compute = f"compute_{arch[3:]}"  # PTX only: tessera runs it, nothing needs SASS

    def found() -> Built:  # where the build's files are (nvcc names some PTX it keeps)
        return Built(out / f"lib{first.stem}.so", tuple(
            _kept_ptx(out, x.stem, compute) for x in srcs if x.suffix == ".cu"), sm, tuple(srcs))

    built = found()
    if built.library.is_file() and all(p.is_file() for p in built.ptx):
        return built
    out.mkdir(parents=True, exist_ok=True)
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-Xlinker", "--no-undefined",
           "-cudart", "none", f"-arch={compute}", "-O3", "-lineinfo", "-g",
           f"-DTESSERA_SM={sm}", "--keep", f"--keep-dir={out}", *_includes(nvcc), *flags,
           *(str(x) for x in srcs), *(str(f) for f in RUNTIME), *_nvrtc(nvcc, srcs), "-o",
           str(built.library)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise _failure(first, done.stdout + done.stderr)
    return found()


def _kept_ptx(out: Path, stem: str, compute: str) -> Path:
    """The PTX nvcc kept of one ``.cu`` file: ``stem.ptx``, or ``stem.compute_90a.ptx``
    where it names the virtual architecture (it does for the ``a`` targets)."""
    named = out / f"{stem}.{compute}.ptx"
    return named if named.is_file() else out / f"{stem}.ptx"


def _failure(src: Path, log: str) -> CudaBuildError:
    """The build's error, at the user's line where nvcc names one."""
    missing = sorted(set(_UNDEFINED.findall(log)))
    if missing and all(m.startswith("nvrtc") for m in missing):
        return CudaBuildError(f"the program calls NVRTC ({', '.join(missing)}), which is not "
                              "installed", loc=Loc(str(src), 0),
                              hint="pip install nvidia-cuda-nvrtc")
    if missing:
        return CudaBuildError(
            f"the program calls CUDA functions tessera's runtime does not provide: "
            f"{', '.join(missing)}", loc=Loc(str(src), 0),
            hint="tessera runs kernels through the CUDA runtime API's and the driver "
            "API's launch, memory, module, device, stream, event, graph and texture calls "
            "(docs/ptx-backend.md, \"Whole CUDA programs\"); libraries with kernels of "
            "their own, such as cuBLAS, are not modelled")
    at = _SOURCE_ERROR.search(log)
    loc = Loc(at.group("file"), int(at.group("line"))) if at else Loc(str(src), 0)
    hint = ("nvcc needs a host C++ compiler (g++) on PATH"
            if "failed to find host compiler" in log or "g++: not found" in log else
            "fix the source where nvcc points")
    return CudaBuildError(f"nvcc failed:\n{log.strip()}", loc=loc, hint=hint)


__all__ = ["NVCC_ENV", "SOURCE_SUFFIXES", "Built", "CudaBuildError", "build", "find_nvcc"]
