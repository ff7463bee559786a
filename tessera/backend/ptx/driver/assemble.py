"""Assemble PTX into a cubin with ptxas (the build check) or nvJitLink (in process).

The ptxas used is the one of the ``nvidia-cuda-nvcc`` wheel (PTX ISA up to 9.5), never a
system CUDA whose ptxas may be older, unless the environment variable ``TESSERA_PTXAS``
names a ptxas explicitly (a system CUDA toolkit on a GPU machine without the wheel; a
ptxas older than the PTX's ``.version`` then rejects it with its own message).

ptxas *repairs* some wgmma ordering mistakes (a missing ``wgmma.fence`` or
``wgmma.wait_group``) and says so only in an info line tagged ``(C75xx)``; the kernel
still assembles.  Such a kernel is serialised at best and a sign that the generated
code disagrees with the PTX ISA's ordering rules (sec. 9.7.15.4 "Asynchronous
Warpgroup Level Matrix Multiply-Accumulate ... wgmma.fence"), so every
``(C75`` line fails the build here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import Loc, TesseraError

#: the environment variable naming an explicit ptxas (e.g. /usr/local/cuda/bin/ptxas)
PTXAS_ENV = "TESSERA_PTXAS"
_INSTALL_HINT = "pip install nvidia-cuda-nvcc (or run `make test`, which installs it)"
_ERROR = re.compile(r"^ptxas[^,\n]*, line (\d+); (error|fatal)\s*: (.*)$", re.MULTILINE)
_ADVISORY = re.compile(r"^.*\(C75\d\d\).*$", re.MULTILINE)
_AROUND_LINE = re.compile(r"line (\d+)")
_ARCH = re.compile(r"^(sm|compute)_\d+[af]?$")


class AssemblyError(TesseraError):
    """PTX that ptxas or nvJitLink rejects, or that ptxas had to repair (C75xx advisories)."""

    kind = "PTX assembly error"


class ToolchainMissing(AssemblyError):
    """The ptxas binary or the nvJitLink library is not installed."""

    kind = "PTX toolchain missing"


@dataclass(frozen=True, slots=True)
class KernelStats:
    """Resource use of one kernel as ptxas ``-v`` reports it (bytes unless noted)."""

    name: str
    registers: int = 0
    smem: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    cmem: int = 0
    barriers: int = 0


@dataclass(frozen=True, slots=True)
class Assembled:
    """A cubin with ptxas's log and per-kernel statistics."""

    cubin: bytes
    arch: str
    log: str
    stats: Mapping[str, KernelStats]


def find_ptxas() -> str:
    """Path of the ptxas to use: ``$TESSERA_PTXAS`` when set (it must be an executable
    file), else the one of the ``nvidia-cuda-nvcc`` wheel; :class:`ToolchainMissing` if
    neither is there."""
    override = os.environ.get(PTXAS_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolchainMissing(f"{PTXAS_ENV}={override} is not an executable file",
                                   hint=f"point {PTXAS_ENV} at a CUDA toolkit's bin/ptxas, or "
                                        f"unset it to use the wheel's ({_INSTALL_HINT})")
        return str(path)
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("ptxas")
    except Exception:  # an absent or broken pathfinder means "not found"
        found = None
    # The pathfinder may fall back to a system CUDA; only a wheel's copy is accepted
    # (wheels install it as .../site-packages/nvidia/cu13/bin/ptxas).
    if found and f"{os.sep}nvidia{os.sep}cu" in found:
        return found
    for root in sys.path:
        candidate = Path(root) / "nvidia" / "cu13" / "bin" / "ptxas"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise ToolchainMissing("ptxas from the nvidia-cuda-nvcc wheel is not installed",
                           hint=f"{_INSTALL_HINT}, or set {PTXAS_ENV}=/path/to/ptxas")


def _check_arch(arch: str) -> None:
    if not _ARCH.match(arch):
        raise AssemblyError(f"unknown target architecture {arch!r}",
                            hint="write it like 'sm_80' or 'sm_90a'")


def _source_line(ptx_lines: list[str], number: int) -> str:
    return ptx_lines[number - 1].strip() if 0 < number <= len(ptx_lines) else "<no such line>"


def _describe(ptx_lines: list[str], number: int, line_map: Mapping[int, Loc] | None) -> str:
    where = f"PTX line {number}"
    if line_map and number in line_map:
        where += f" (from {line_map[number]})"
    return f"{where}: `{_source_line(ptx_lines, number)}`"


def _first_loc(numbers: list[int], line_map: Mapping[int, Loc] | None) -> Loc | None:
    for number in numbers:
        if line_map and number in line_map:
            return line_map[number]
    return None


def raise_for_errors(log: str, ptx: str, *, line_map: Mapping[int, Loc] | None = None,
                     kernel: str = "", tool: str = "ptxas") -> None:
    """Raise :class:`AssemblyError` for the error lines of a ptxas log, located in the source."""
    lines = ptx.splitlines()
    found = [(int(m.group(1)), m.group(3).strip()) for m in _ERROR.finditer(log)]
    name = f" of kernel {kernel!r}" if kernel else ""
    if not found:
        raise AssemblyError(f"{tool} rejected the PTX{name}:\n{log.strip()}",
                            loc=_first_loc([], line_map))
    grouped: dict[int, list[str]] = {}
    for number, text in found:  # ptxas may report one line several times, out of order
        grouped.setdefault(number, []).append(text)
    body = "\n".join(f"  {_describe(lines, n, line_map)}\n" + "\n".join(f"    {t}" for t in texts)
                     for n, texts in grouped.items())
    raise AssemblyError(
        f"{tool} rejected the PTX{name}:\n{body}",
        hint="the PTX generated for these lines is invalid for the target; see the PTX ISA "
             "entry of the instruction named",
        loc=_first_loc([n for n, _ in found], line_map),
    )


def raise_for_advisories(log: str, ptx: str, *, line_map: Mapping[int, Loc] | None = None,
                         kernel: str = "") -> None:
    """Fail on ``(C75xx)`` lines: ptxas repaired wgmma ordering the PTX got wrong."""
    advisories = [m.group(0).strip() for m in _ADVISORY.finditer(log)]
    if not advisories:
        return
    lines = ptx.splitlines()
    numbers: list[int] = []
    parts = []
    for text in advisories:
        part = f"  {text}"
        around = _AROUND_LINE.search(text.split(")", 1)[-1])
        if around:
            numbers.append(int(around.group(1)))
            part += f"\n    near {_describe(lines, numbers[-1], line_map)}"
        parts.append(part)
    name = f" of kernel {kernel!r}" if kernel else ""
    raise AssemblyError(
        f"ptxas had to repair the wgmma ordering{name}:\n" + "\n".join(parts),
        hint="ptxas inserts a missing wgmma.fence (before a wgmma whose accumulator or A "
             "registers were touched) or wgmma.wait_group (before reading its results) on "
             "its own and only reports it as (C75xx); emit them explicitly",
        loc=_first_loc(numbers, line_map),
    )


_STATS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "cmem": re.compile(r"(\d+) bytes cmem\[0\]"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}
_SECTION = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")


def parse_stats(log: str) -> dict[str, KernelStats]:
    """Per-kernel statistics from ``ptxas -v`` output (entry functions only)."""
    entries = re.findall(r"Compiling entry function '([\w$.]+)'", log)
    values: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        section = _SECTION.search(line)
        if section:
            current = section.group(1)
            continue
        if current is None:
            continue
        for field, pattern in _STATS.items():
            match = pattern.search(line)
            if match:
                values.setdefault(current, {})[field] = int(match.group(1))
    return {name: KernelStats(name, **values.get(name, {})) for name in entries}


def _run_ptxas(args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([find_ptxas(), *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def assemble(ptx: str, arch: str, *, line_map: Mapping[int, Loc] | None = None,
             kernel: str = "") -> Assembled:
    """Assemble ``ptx`` for ``arch`` (``sm_90a`` ...) with the ptxas CLI.

    Raises :class:`AssemblyError` on any ptxas error (located through ``line_map``, PTX line
    number -> user source location) and on any ``(C75xx)`` wgmma repair advisory.
    """
    _check_arch(arch)
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as tmp:
        Path(tmp, "kernel.ptx").write_text(ptx)
        proc = _run_ptxas([f"-arch={arch}", "-v", "kernel.ptx", "-o", "kernel.cubin"], tmp)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise_for_errors(log, ptx, line_map=line_map, kernel=kernel)
        raise_for_advisories(log, ptx, line_map=line_map, kernel=kernel)
        cubin = Path(tmp, "kernel.cubin").read_bytes()
    return Assembled(cubin, arch, log, parse_stats(log))


def parse_only(ptx: str, arch: str, *, line_map: Mapping[int, Loc] | None = None) -> None:
    """Check that ``ptx`` parses for ``arch`` (``ptxas -arch=compute_XX``, no code made)."""
    _check_arch(arch)
    virtual = arch.replace("sm_", "compute_", 1)
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as tmp:
        Path(tmp, "kernel.ptx").write_text(ptx)
        proc = _run_ptxas([f"-arch={virtual}", "kernel.ptx"], tmp)
    if proc.returncode != 0:
        raise_for_errors(proc.stdout + proc.stderr, ptx, line_map=line_map)


def assemble_nvjitlink(ptx: str, arch: str, *, line_map: Mapping[int, Loc] | None = None,
                       kernel: str = "") -> bytes:
    """Assemble ``ptx`` in process with nvJitLink and return the cubin.

    Errors are reported like :func:`assemble`'s.  The info log is read with ``-verbose``
    so the ``(C75xx)`` advisories fail the build here too.
    """
    _check_arch(arch)
    try:
        from cuda.bindings import nvjitlink
    except ImportError:
        raise ToolchainMissing("cuda.bindings.nvjitlink is not installed",
                               hint="pip install nvidia-nvjitlink cuda-bindings") from None
    data = ptx.encode()
    try:
        handle = nvjitlink.create(2, [f"-arch={arch}", "-verbose"])
    except Exception as err:  # a missing libnvJitLink surfaces here
        raise ToolchainMissing(f"nvJitLink could not start: {err}",
                               hint="pip install nvidia-nvjitlink") from None

    def read_log(size_fn: Callable[[int], int], read_fn: Callable[[int, bytearray], None]
                 ) -> str:
        buffer = bytearray(size_fn(handle))
        if buffer:
            read_fn(handle, buffer)
        return bytes(buffer).rstrip(b"\0").decode(errors="replace")

    try:
        try:
            # Bad PTX already fails in add_data: nvJitLink compiles PTX inputs on arrival.
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            log = read_log(nvjitlink.get_error_log_size, nvjitlink.get_error_log)
            raise_for_errors(log, ptx, line_map=line_map, kernel=kernel, tool="nvJitLink")
        info = read_log(nvjitlink.get_info_log_size, nvjitlink.get_info_log)
        raise_for_advisories(info, ptx, line_map=line_map, kernel=kernel)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)
