"""Where ``tessera run-cuda``'s reports point: the CUDA source line of a PTX line
(nvcc's ``-lineinfo``), the program's own line that made a runtime call (``addr2line``
over its host debug info), kernels by their C++ names (``c++filt``), and the end of a
program after a report.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tessera.errors import Loc
from tessera.frontend.cuda.build import Built

#: the exit status of a program whose kernel faulted (compute-sanitizer's default too)
FAULT_EXIT = 1


def source_lines(ptx: str) -> dict[int, Loc]:
    """The CUDA source line (``.loc`` of nvcc's ``-lineinfo``) of each PTX line that
    follows one, within its function."""
    lines = ptx.splitlines()
    files = {w[1]: shown(w[2].strip('",')) for w in (line.split() for line in lines)
             if w[:1] == [".file"] and len(w) >= 3}  # nvcc writes them at the end
    out: dict[int, Loc] = {}
    at: Loc | None = None
    for number, line in enumerate(lines, 1):
        words = line.split()
        if words[:1] == [".loc"] and len(words) >= 3 and words[1] in files:
            if words[2] != "0":  # line 0: code of no one line; the last line stands
                at = Loc(files[words[1]], int(words[2]))
        elif words[:1] == ["}"]:
            at = None
        elif at is not None:
            out[number] = at
    return out


def caller_line(built: Built, offset: int) -> Loc | None:
    """The program's own line that made a call, at ``offset`` in its library: the
    outermost of the inlined frames ``addr2line`` gives that lies in the program's
    source (a call inside Thrust's headers is reported where the program called them)."""
    tool = shutil.which("addr2line")
    if tool is None or not offset:
        return None
    out = subprocess.run([tool, "-e", str(built.library), "-i", f"{offset:#x}"],
                         capture_output=True, text=True).stdout.split()
    sources = {x.resolve() for x in built.sources}
    for entry in reversed(out):
        path, _, line = entry.rpartition(":")
        if line.split()[0].isdigit() and Path(path).resolve() in sources:
            return Loc(shown(path), int(line.split()[0]))
    return None


def shown(path: str) -> str:
    """``path`` relative to the working directory when it lies below it (nvcc's line
    table names files by absolute path)."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def demangled(text: str, name: str) -> str:
    """``text`` with the kernel's C++ name for its mangled one (by ``c++filt``)."""
    tool = shutil.which("c++filt")
    if tool is None or not name.startswith("_Z"):
        return text
    plain = subprocess.run([tool, name], capture_output=True, text=True).stdout.strip()
    return text.replace(f"'{name}'", f"'{plain}'") if plain else text


def flush_output() -> None:
    """The program's C output buffers, then Python's, so that output keeps its order."""
    ctypes.CDLL(None).fflush(None)
    sys.stdout.flush()


def end_program(report: str) -> None:
    """Print ``report`` on standard error and end the process with :data:`FAULT_EXIT`
    (no Python or C exit handler runs: the program must not go on)."""
    flush_output()
    print(report, file=sys.stderr, flush=True)
    os._exit(FAULT_EXIT)


__all__ = ["FAULT_EXIT", "caller_line", "demangled", "end_program", "flush_output", "shown",
           "source_lines"]
