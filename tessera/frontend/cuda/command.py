"""``tessera run-cuda``: build a CUDA program with tessera's runtime and run it, each
kernel launch on the CPU with the Target IR interpreter's checks.

    tessera run-cuda main.cu [more.cu host.cpp ...] [--arch sm_80]
                     [--nvcc-flag=-DN=1024] [--no-race-check] [--leak-check] [-- ARGS...]

The program's output is its own; a kernel fault ends it with status 1 and a report at
the ``.cu`` line (nvcc's ``-lineinfo``) and the PTX instruction. Its arguments go after
``--``; before it, the files and the options may come in any order.
"""

from __future__ import annotations

import argparse
from typing import Any

from tessera.errors import Loc

WHERE = Loc("<command line>", 0)


def _options(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """run-cuda's options; ``suppress``: no defaults (for options after the first file,
    which must not undo those before it)."""
    d = {"default": argparse.SUPPRESS} if suppress else {}
    p.add_argument("--arch", **(d or {"default": "sm_80"}),
                   help="the target its PTX is compiled for (sm_80, sm_86, sm_89, sm_90a)")
    p.add_argument("--nvcc-flag", action="append", **(d or {"default": []}),
                   help="a flag for nvcc (--nvcc-flag=-DN=64, --nvcc-flag=-Iinclude)")
    p.add_argument("--no-race-check", action="store_true", **d,
                   help="skip the shared-memory race check (faster)")
    p.add_argument("--leak-check", action="store_true", **d,
                   help="report, as the program ends, device memory it never freed "
                   "(cudaMalloc and the others, and kernels' malloc)")


def cmd_run_cuda(args: argparse.Namespace) -> int:
    """Build (or reuse the cached build of) the program and run its ``main``."""
    from tessera.errors import ArgumentError
    from tessera.frontend.cuda.build import build
    from tessera.frontend.cuda.program import run_program

    rest = list(args.rest)
    before, argv = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest \
        else (rest, [])
    more = argparse.ArgumentParser(prog="tessera run-cuda", add_help=False)
    more.add_argument("sources", nargs="*")
    _options(more, suppress=True)
    extra = more.parse_args(before, namespace=argparse.Namespace())
    for key, value in vars(extra).items():
        if key == "nvcc_flag":
            value = [*args.nvcc_flag, *value]
        setattr(args, key, value)
    if not args.sources:
        raise ArgumentError("no source file", loc=WHERE, hint="tessera run-cuda prog.cu "
                            "[more files] [-- the program's arguments]")
    args.where = Loc(args.sources[0], 0)
    built = build(args.sources, args.arch, flags=tuple(args.nvcc_flag))
    return run_program(built, argv, check_races=not args.no_race_check,
                       check_leaks=args.leak_check)


def add_parser(sub: Any) -> None:
    """Register ``run-cuda`` with the ``tessera`` command's subparsers."""
    p = sub.add_parser("run-cuda", help="run a CUDA program with its kernels on the CPU, "
                       "checked (needs nvcc and a host C++ compiler)")
    # one list from the first file on: argparse drops a "--" that would open it
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="FILE ... [-- ARGS]",
                   help="the program's .cu (and host .cpp) files and options, then -- and "
                   "its arguments")
    _options(p)
    p.set_defaults(run=cmd_run_cuda)


__all__ = ["add_parser", "cmd_run_cuda"]
