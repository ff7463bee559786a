"""``tessera run-cuda``: build a CUDA program with tessera's runtime and run it, each
kernel launch on the CPU with the Target IR interpreter's checks.

    tessera run-cuda saxpy.cu [--arch sm_80] [--nvcc-flag=-DN=1024] [-- ARGS...]

The program's output is its own; a kernel fault ends it with status 1 and a report at
the ``.cu`` line (nvcc's ``-lineinfo``) and the PTX instruction.
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_run_cuda(args: argparse.Namespace) -> int:
    """Build (or reuse the cached build of) the program and run its ``main``."""
    from tessera.errors import Loc
    from tessera.frontend.cuda.build import build
    from tessera.frontend.cuda.program import run_program

    args.where = Loc(args.file, 0)
    built = build(args.file, args.arch, flags=tuple(args.nvcc_flag))
    argv = args.args[1:] if args.args[:1] == ["--"] else args.args
    return run_program(built, argv, check_races=not args.no_race_check)


def add_parser(sub: Any) -> None:
    """Register ``run-cuda`` with the ``tessera`` command's subparsers."""
    p = sub.add_parser("run-cuda", help="run a CUDA program with its kernels on the CPU, "
                       "checked (needs nvcc and a host C++ compiler)")
    p.add_argument("file", help="the program's .cu file (one translation unit with main)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments "
                   "(after --)")
    p.add_argument("--arch", default="sm_80", help="the target its PTX is compiled for "
                   "(sm_80, sm_86, sm_89, sm_90a)")
    p.add_argument("--nvcc-flag", action="append", default=[],
                   help="a flag for nvcc (--nvcc-flag=-DN=64, --nvcc-flag=-Iinclude)")
    p.add_argument("--no-race-check", action="store_true",
                   help="skip the shared-memory race check (faster)")
    p.set_defaults(run=cmd_run_cuda)


__all__ = ["add_parser", "cmd_run_cuda"]
