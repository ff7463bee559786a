"""The ``tessera`` command line.

    tessera ir FILE.py:FUNC [--stage graph|schedule|tile|target] [--target sm_90a]
                            [--arg NAME=4x8:f32 ...] [--const K=V]
    tessera run FILE.py [ARGS...]
    tessera opt FILE.tir --passes canonicalize,cse,dce [--print-after all] [--timing]
    tessera passes
    tessera ptx FILE.py:FUNC --target sm_90a [--arg A=128x64:bf16 ...] [--mode fast]
                [-o out.ptx] [--stats] [--estimate]
    tessera conformance [--backend interp|tile|target|cuda] [--report out.html]
                        [--junit out.xml] [-k PATTERN] [--slow]
    tessera check-ptx FILE.ptx --kernel NAME --grid 4 --block 256 --arg ... (tessera.cli_ptx)
    tessera run-cuda FILE.cu [FILE.cpp ...] [--arch sm_80] [-- ARGS...] (frontend.cuda)
    tessera explain FILE.py:FUNC [--arg ...] --html out.html (tessera.explain.command)

``FUNC`` is a ``@ts.kernel`` or a graph function (a plain ``def`` or ``@ts.jit``); its
example arguments are ``--arg``/``--const`` options (zeros of a statically annotated
parameter are made without one). A graph function's PTX is every generated kernel's,
each after a ``// kernel NAME`` line.

Errors print tessera's one-line message (with the user's file:line) and exit with 1.
"""

from __future__ import annotations

import argparse
import linecache
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tessera import cli_ptx
from tessera.cli_examples import examples_needed
from tessera.conformance.command import add_parser as add_conformance_parser
from tessera.errors import ArgumentError, Loc, TesseraError
from tessera.explain.command import add_parser as add_explain_parser
from tessera.files import read_text, write_output
from tessera.frontend.cuda.command import add_parser as add_run_cuda_parser


def _load(target: str, args: argparse.Namespace) -> Any:
    """The object ``FILE.py:NAME`` names; ``args.where`` becomes its definition's line."""
    if ":" not in target:
        raise ArgumentError(f"{target!r} should be FILE.py:FUNCTION",
                            hint="name the function after a colon, e.g. model.py:attention",
                            loc=Loc(target, 0))
    path, _, name = target.rpartition(":")
    args.where = Loc(path, 0)
    namespace = _run_path(path, "__tessera_cli__")
    if name not in namespace:
        found = [k for k, v in namespace.items() if callable(v) and not k.startswith("_")
                 and getattr(v, "__module__", None) in (None, "__tessera_cli__")]
        raise ArgumentError(f"{Path(path).name} defines no {name!r}", loc=Loc(path, 0),
                            hint=f"functions there: {', '.join(found) or 'none'}")
    obj = namespace[name]
    code = getattr(getattr(obj, "fn", obj), "__code__", None)
    if code is not None and os.path.abspath(code.co_filename) == os.path.abspath(path):
        args.where = Loc(path, _def_line(path, code.co_firstlineno))
    return obj


def _def_line(path: str, first: int) -> int:
    """The ``def`` line of a function whose code starts at ``first`` (its decorators)."""
    for line in range(first, first + 50):
        text = linecache.getline(path, line).lstrip()
        if text.startswith(("def ", "async def ")):
            return line
    return first


def _run_path(path: str, run_name: str) -> dict[str, Any]:
    """Run a user's file; an exception outside tessera's becomes an ArgumentError at the
    line of that file that raised it (tessera's own errors already name their line)."""
    if not Path(path).is_file():
        raise ArgumentError(f"no such file: {path}", loc=Loc(path, 0),
                            hint="give the path of a Python file, e.g. model.py:attention")
    try:
        return runpy.run_path(path, run_name=run_name)
    except TesseraError:
        raise
    except SyntaxError as err:
        raise ArgumentError(f"{path} is not valid Python: {err.msg}",
                            loc=Loc(err.filename or path, err.lineno or 0)) from None
    except Exception as err:
        line = max((f.lineno for f in traceback.extract_tb(err.__traceback__)
                    if os.path.abspath(f.filename) == os.path.abspath(path)), default=0)
        raise ArgumentError(f"running {path} raised {type(err).__name__}: {err}",
                            loc=Loc(path, line or 0),
                            hint="the file is run (without its __main__ block) to find the "
                                 "function; fix the error there") from None


def _example(spec: str) -> tuple[str, np.ndarray]:
    """``NAME=4x8:f32`` -> (name, zeros of that shape and format)."""
    from tessera.numerics import dtype

    name, _, rest = spec.partition("=")
    shape_text, _, fmt = rest.partition(":")
    try:
        shape = tuple(int(d) for d in shape_text.split("x")) if shape_text else ()
    except ValueError:
        raise ArgumentError(f"bad --arg {spec!r}", hint="write NAME=4x8:f32") from None
    return name, np.zeros(shape, dtype(fmt or "f32").np_dtype)


def cmd_ir(args: argparse.Namespace) -> int:
    from tessera.frontend.graph.jit import inspect_ir

    fn = _load(args.target, args)
    examples: dict[str, Any] = dict(_example(s) for s in args.arg)
    examples.update(_const(s) for s in args.const)
    examples.update(examples_needed(fn, examples, args.target, args.where))
    if args.stage == "target":
        examples.setdefault("target", args.arch)
    print(inspect_ir(fn, args.stage, **examples), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if not Path(args.file).is_file():
        raise ArgumentError(f"no such file: {args.file}", loc=Loc(args.file, 0))
    sys.argv = [args.file, *args.args]
    try:
        runpy.run_path(args.file, run_name="__main__")
    except TesseraError:
        raise  # its message names the program's line
    except Exception as err:  # the program's own error, shown as ``python FILE`` would
        _print_program_error(err)
        return 1
    return 0


def _print_program_error(err: Exception) -> None:
    """The traceback of an error of a program ``tessera run`` ran, from the program's
    first frame (the command's and ``runpy``'s frames are not the user's); a syntax
    error as its line and caret alone."""
    tb = err.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == __file__ or
                              tb.tb_frame.f_code.co_filename.startswith("<frozen")):
        tb = tb.tb_next
    if isinstance(err, SyntaxError) or tb is None:
        lines = traceback.format_exception_only(type(err), err)
    else:
        lines = traceback.format_exception(type(err), err, tb)
    print("".join(lines), end="", file=sys.stderr)


def cmd_opt(args: argparse.Namespace) -> int:
    from tessera.ir import PassManager, parse_module

    text = sys.stdin.read() if args.file == "-" else read_text(
        args.file, "IR text file", hint="give an IR text file, or - for standard input")
    module = parse_module(text, args.file)
    names = [n for n in args.passes.split(",") if n]
    after: Any = "all" if args.print_after == "all" else set(args.print_after.split(",")) \
        if args.print_after else set()
    pm = PassManager.from_names(names, print_after=after)
    module = pm.run(module)
    print(module, end="")
    if args.timing:
        print(pm.timing_report(), file=sys.stderr)
    return 0


def _ints(text: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ArgumentError(f"bad integer list {text!r}", hint="write e.g. 64,64,32") from None


def _const(spec: str) -> tuple[str, Any]:
    """``NAME=LITERAL`` -> (name, Python value), for scalars and flags."""
    import ast

    name, _, text = spec.partition("=")
    try:
        return name, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ArgumentError(f"bad --const {spec!r}", hint="write NAME=2.5 or NAME=False") \
            from None


def cmd_ptx(args: argparse.Namespace) -> int:
    from tessera.frontend.kernel import Kernel
    from tessera.frontend.kernel.backends.compile import compile_kernel

    kernel = _load(args.target, args)
    kwargs: dict[str, Any] = dict(_example(s) for s in args.arg)
    kwargs.update(_const(s) for s in args.const)
    filled = examples_needed(kernel, kwargs, args.target, args.where)
    if not isinstance(kernel, Kernel) and callable(kernel):
        return _graph_ptx(kernel, {**kwargs, **filled}, args)
    for key, value in (("grid", _ints(args.grid)), ("tile_shape", _ints(args.tile_shape))):
        if value is not None:
            kwargs[key] = value if key != "grid" or len(value) > 1 else value[0]
    if args.group_size:
        kwargs["group_size"] = args.group_size
    compiled = compile_kernel(kernel, target=args.arch, mode=args.mode, **kwargs)
    if args.output:
        write_output(args.output, compiled.ptx, "PTX")
    else:
        print(compiled.ptx, end="")
    if args.stats:
        _print_stats(compiled.name, args.arch, compiled.assemble().stats[compiled.name])
        for key in ("kv_ring", "raster"):  # how K/V blocks stream, the CTAs' tile order
            if compiled.kernel.attrs.get(key):
                print(f"{compiled.name}: {compiled.kernel.attrs[key]}", file=sys.stderr)
    if args.estimate:
        from tessera.backend.ptx.estimate import estimate_compiled, format_estimate

        arrays = [v for v in kwargs.values() if isinstance(v, np.ndarray)]
        print(format_estimate(estimate_compiled(compiled, arrays)), file=sys.stderr)
    return 0


def _graph_ptx(fn: Any, examples: dict[str, Any], args: argparse.Namespace) -> int:
    """``tessera ptx`` of a graph function: the PTX of each generated kernel."""
    from tessera.frontend.graph.jit import jit

    for flag, value in (("--grid", args.grid), ("--tile-shape", args.tile_shape),
                        ("--group-size", args.group_size), ("--mode", args.mode)):
        if value:
            raise ArgumentError(f"{flag} is a kernel's option; a graph function's kernels "
                                "are scheduled and generated from its graph", loc=args.where,
                                hint=f"drop {flag}")
    target = jit(fn).lower(**examples).target(args.arch)
    text = str(target.ptx())
    if args.output:
        write_output(args.output, text, "PTX")
    else:
        print(text, end="")
    if args.stats:
        for k in target.kernels:
            _print_stats(k.name, args.arch, k.assemble().stats[k.name])
    return 0


def _print_stats(name: str, arch: str, stats: Any) -> None:
    print(f"{name} {arch}: {stats.registers} registers, {stats.smem} bytes shared memory, "
          f"{stats.spill_stores} bytes spill stores, {stats.spill_loads} bytes spill loads, "
          f"{stats.stack_frame} bytes stack frame", file=sys.stderr)


def cmd_passes(args: argparse.Namespace) -> int:
    from tessera.ir import PASSES

    for name, cls in sorted(PASSES.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        print(f"{name:<16} {doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: tile-first GPU "
                                     "programming, interpreted exactly on the CPU.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ir", help="print a function's IR at one stage")
    p.add_argument("target", help="FILE.py:FUNCTION")
    p.add_argument("--stage", default="graph", help="graph, schedule, tile or target")
    p.add_argument("--target", dest="arch", default="sm_90a",
                   help="the PTX target of --stage target: sm_80, sm_86, sm_89 or sm_90a")
    p.add_argument("--arg", action="append", default=[],
                   help="example argument NAME=SHAPE:FORMAT, e.g. x=4x8:bf16")
    p.add_argument("--const", action="append", default=[],
                   help="scalar argument or flag NAME=VALUE, e.g. alpha=2.5 or target='sm_80'")
    p.set_defaults(run=cmd_ir)
    p = sub.add_parser("run", help="run a tessera program")
    p.add_argument("file")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(run=cmd_run)
    p = sub.add_parser("opt", help="run passes over IR text")
    p.add_argument("file", help="IR text file, or - for standard input")
    p.add_argument("--passes", default="", help="comma-separated pass names")
    p.add_argument("--print-after", default="", help="pass names, or 'all'")
    p.add_argument("--timing", action="store_true", help="report time per pass")
    p.set_defaults(run=cmd_opt)
    p = sub.add_parser("ptx", help="compile a @ts.kernel or a graph function to PTX")
    p.add_argument("target", help="FILE.py:KERNEL or FILE.py:FUNCTION")
    p.add_argument("--target", dest="arch", default="sm_90a", help="sm_80, sm_86, sm_89 or sm_90a")
    p.add_argument("--arg", action="append", default=[],
                   help="example array argument NAME=SHAPE:FORMAT, e.g. A=128x64:bf16")
    p.add_argument("--const", action="append", default=[],
                   help="scalar argument or flag NAME=VALUE, e.g. alpha=2.5")
    p.add_argument("--grid", default="", help="grid of groups, e.g. 4 or 2,2")
    p.add_argument("--tile-shape", default="", help="e.g. 64,64,32")
    p.add_argument("--group-size", type=int, default=0)
    p.add_argument("--mode", choices=("checked", "fast"), default=None,
                   help="checked: the tile interpreter's bits; fast: approximate math "
                        "(ex2.approx, no f64); default: the kernel's own mode")
    p.add_argument("-o", "--output", default="", help="write the PTX here")
    p.add_argument("--stats", action="store_true",
                   help="assemble with ptxas -v; print registers, shared memory, spills")
    p.add_argument("--estimate", action="store_true",
                   help="print a static performance estimate of one launch on an H100 SXM")
    p.set_defaults(run=cmd_ptx)
    p = sub.add_parser("passes", help="list the registered passes")
    p.set_defaults(run=cmd_passes)
    add_conformance_parser(sub)
    cli_ptx.add_parser(sub)
    add_run_cuda_parser(sub)
    add_explain_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tessera`` command."""
    args = build_parser().parse_args(argv)
    # Errors raised by tessera on the command line's behalf would name the frame that
    # called main (the installed script, runpy, a test): report them at the user's file.
    callers = _caller_files()
    args.where = _default_where(args)
    try:
        return int(args.run(args))
    except TesseraError as err:
        if err.loc.file in callers or err.loc.file.startswith("<"):
            err = err.relocated(args.where)
        print(f"tessera: {err}", file=sys.stderr)
        return 1


def _caller_files() -> set[str]:
    """The files of the frames that called :func:`main`."""
    files, frame = set(), sys._getframe(2)
    while frame is not None:
        files.add(frame.f_code.co_filename)
        frame = frame.f_back
    return files


def _default_where(args: argparse.Namespace) -> Loc:
    """The user's file of this command (before anything is loaded from it)."""
    target = getattr(args, "target", None)
    if target is not None:  # FILE.py:NAME
        return Loc(target.rpartition(":")[0] or target, 0)
    file = getattr(args, "file", None)
    return Loc("<stdin>" if file == "-" else file or "<command line>", 0)


if __name__ == "__main__":
    sys.exit(main())
