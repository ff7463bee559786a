"""``tessera check-ptx``: run a kernel of any PTX file on the CPU and report.

    tessera check-ptx FILE.ptx --kernel NAME --grid 4 --block 256
                      --arg u32=1000 --arg f32=2.5 --arg 'f32[1000]=randn' --arg y.npy
                      [--shared-bytes N] [--reference REF.py:FUNC] [--seed 0]

Arguments, one per ``.param`` in order:

* ``TYPE=VALUE`` a scalar (``u32=1000``, ``s32=-3``, ``f32=2.5``);
* ``TYPE[D0,D1,...]=INIT`` an array, ``INIT`` one of ``zeros``, ``ones``, ``arange``,
  ``randn``, ``rand`` (uniform in [0, 1)), ``randint:LO:HI``;
* ``PATH.npy`` an array read from a file;
* ``tmap:TYPE[ROWS,COLS]=INIT:BOXROWSxBOXCOLS[:swSWIZZLE]`` a tensor map over a new
  2-D array (``tmap:bf16[128,64]=randn:64x64:sw128``);
* ``tdesc:...`` the same as a Triton tensor descriptor: five parameters, the map, the
  array's two sizes and two strides (``tessera.frontend.ptx.api.triton_descriptor``);
* ``struct{SPEC; SPEC; ...}`` a struct passed by value, its fields in order (arrays are
  pointer fields: ``'struct{f32[64]=randn; s32=64; f32=0.5}'``); the reference gets it
  as the tuple of its fields, and its arrays are outputs in the arguments' order;
* ``tex{ARRAY; KEY=VALUE; ...}`` a texture object over a new array, with ``channels``,
  ``filter``, ``address``, ``read`` and ``coords=normalized`` as ``ts.ptx.texture`` takes
  them (``'tex{f32[4,8]=arange; filter=linear; address=border}'``), and
  ``surf{ARRAY; channels=N}`` a surface object; the reference gets the array, and a
  surface's array is an output.

``--reference REF.py:FUNC`` calls ``FUNC`` with the arguments as they were before the
launch (arrays as copies, scalars as NumPy scalars, tensor maps as their arrays) and
compares what it returns with the arrays after the launch: one array (the last array
argument), a sequence with one entry per array argument (``None`` skips one), or a
dict from argument index to array. Integers must agree exactly; floats within
``rtol = atol_scale = 64 * eps`` of the output format (``--rtol``/``--atol`` override):
``|got - want| <= atol * max|want| + rtol * |want|``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, Loc

_TYPES = {"f16": "float16", "f32": "float32", "f64": "float64", "u8": "uint8",
          "u16": "uint16", "u32": "uint32", "u64": "uint64", "s8": "int8", "s16": "int16",
          "s32": "int32", "s64": "int64", "b32": "uint32", "b64": "uint64"}
_ARRAY = re.compile(r"^(?P<tmap>tmap:|tdesc:)?(?P<t>\w+)\[(?P<dims>[\d,\s]+)\]="
                    r"(?P<init>[^:]+(?::-?\d+:-?\d+)?)(?::(?P<box>\d+x\d+)(?::sw(?P<sw>\d+))?)?$")
WHERE = Loc("<command line>", 0)


def _dtype(name: str) -> np.dtype:
    if name == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name not in _TYPES:
        raise ArgumentError(f"unknown element type {name!r}", loc=WHERE,
                            hint=f"use one of bf16, {', '.join(_TYPES)}")
    return np.dtype(_TYPES[name])


def _init(init: str, shape: tuple[int, ...], dt: np.dtype, rng: np.random.Generator,
          spec: str) -> np.ndarray:
    if init == "zeros":
        return np.zeros(shape, dt)
    if init == "ones":
        return np.ones(shape, dt)
    if init == "arange":
        return np.arange(int(np.prod(shape))).reshape(shape).astype(dt)
    if init == "randn":
        return rng.standard_normal(shape).astype(dt)
    if init == "rand":
        return rng.random(shape).astype(dt)
    if init.startswith("randint:"):
        _, lo, hi = init.split(":")
        return rng.integers(int(lo), int(hi), shape).astype(dt)
    raise ArgumentError(f"bad initialiser {init!r} in --arg {spec!r}", loc=WHERE,
                        hint="zeros, ones, arange, randn, rand or randint:LO:HI")


def parse_args(specs: list[str], rng: np.random.Generator) -> list[tuple[Any, str]]:
    """The ``--arg``s as (value, description) pairs, one per kernel parameter: a
    ``tdesc:`` spec is five (the map, two sizes, two strides)."""
    import tessera as ts

    out = []
    for spec in specs:
        value, text = parse_arg(spec, rng)
        if not spec.replace(" ", "").startswith("tdesc:"):
            out.append((value, text))
            continue
        tmap, *rest = ts.ptx.triton_descriptor(value.array, value.box, value.swizzle,
                                               value.elem)
        out += [(tmap, f"Triton descriptor: {text}"),
                *((v, f"  its {what}: s{8 * v.itemsize}={v}")
                  for v, what in zip(rest, ("rows", "columns", "row stride", "column stride")))]
    return out


def parse_arg(spec: str, rng: np.random.Generator) -> tuple[Any, str]:
    """One ``--arg``: (the value to pass, a short description); a ``tdesc:`` spec gives
    its tensor map (:func:`parse_args` adds the four sizes and strides)."""
    import tessera as ts

    for kind in ("tex", "surf"):
        if spec.replace(" ", "").startswith(kind + "{") and spec.rstrip().endswith("}"):
            return _texture_arg(kind, spec, rng)
    if spec.replace(" ", "").startswith("struct{") and spec.rstrip().endswith("}"):
        inner = spec.strip()[len("struct{"):-1]
        fields = [parse_arg(part.strip(), rng) for part in inner.split(";") if part.strip()]
        if any(isinstance(v, ts.ptx.TensorMapArgument) for v, _ in fields):
            raise ArgumentError(f"--arg {spec!r}: a tensor map is a parameter of its own, "
                                "not a struct field", loc=WHERE)
        return (ts.ptx.struct(*(v for v, _ in fields)),
                f"struct {{{'; '.join(text for _, text in fields)}}}")
    if spec.endswith(".npy"):
        if not Path(spec).is_file():
            raise ArgumentError(f"no file {spec!r}", loc=Loc(spec, 0))
        try:
            a = np.load(spec)
        except (ValueError, OSError, EOFError) as err:
            raise ArgumentError(f"{spec!r} is not an array NumPy can load: {err}",
                                loc=Loc(spec, 0), hint="write it with np.save(path, array) "
                                "(an array of numbers, not Python objects)") from None
        return a, f"{spec} ({a.dtype}{list(a.shape)})"
    m = _ARRAY.match(spec.replace(" ", ""))
    if m:
        dt = _dtype(m.group("t"))
        shape = tuple(int(d) for d in m.group("dims").split(",") if d)
        a = _init(m.group("init"), shape, dt, rng, spec)
        if m.group("tmap"):
            if not m.group("box"):
                raise ArgumentError(f"--arg {spec!r}: a tensor map needs :ROWSxCOLS", loc=WHERE)
            box = tuple(int(x) for x in m.group("box").split("x"))
            tm = ts.ptx.tensor_map(a, box, int(m.group("sw") or 0), elem=m.group("t"))
            return tm, f"tensor map of {m.group('t')}{list(shape)} box {box}"
        return a, f"{m.group('t')}{list(shape)} {m.group('init')}"
    t, sep, value = spec.partition("=")
    if sep and t in _TYPES:
        dt = _dtype(t)
        try:
            number = float(value) if dt.kind == "f" else int(value, 0)
        except ValueError:
            raise ArgumentError(f"bad value {value!r} in --arg {spec!r}", loc=WHERE) from None
        return dt.type(number), f"{t}={value}"
    raise ArgumentError(f"cannot read --arg {spec!r}", loc=WHERE,
                        hint="write u32=1000, 'f32[1024]=randn', x.npy, "
                        "'tmap:bf16[128,64]=randn:64x64:sw128' or 'struct{f32[64]=randn; "
                        "s32=64}'")


def _texture_arg(kind: str, spec: str, rng: np.random.Generator) -> tuple[Any, str]:
    """A ``tex{...}`` or ``surf{...}`` argument: the array first, then its options."""
    import tessera as ts

    array_spec, *options = (p.strip() for p in spec.strip()[len(kind) + 1:-1].split(";")
                            if p.strip())
    a, text = parse_arg(array_spec, rng)
    if not isinstance(a, np.ndarray):
        raise ArgumentError(f"--arg {spec!r}: a {kind} needs an array first", loc=WHERE)
    given = dict(o.partition("=")[::2] for o in options)
    known = {"channels", "filter", "address", "read", "coords"} if kind == "tex" else \
        {"channels"}
    if set(given) - known or given.get("coords", "normalized") != "normalized":
        raise ArgumentError(f"--arg {spec!r}: a {kind} takes {', '.join(sorted(known))}",
                            loc=WHERE, hint="'tex{f32[4,8]=arange; filter=linear; "
                            "address=border; coords=normalized}' or 'surf{u8[8,4]=arange; "
                            "channels=4}'")
    channels = int(given.pop("channels", "1"))
    if kind == "surf":
        return ts.ptx.surface(a, channels=channels), f"surface over {text}"
    normalized = given.pop("coords", "") == "normalized"
    obj = ts.ptx.texture(a, channels=channels, normalized_coords=normalized, **given)
    return obj, f"texture over {text}{''.join(f', {k} {v}' for k, v in given.items())}"


def _tolerance(dt: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    if dt.kind not in "fc" and dt.name != "bfloat16":
        return 0.0, 0.0
    eps = 2.0 ** -7 if dt.name == "bfloat16" else float(np.finfo(dt).eps)
    return (64 * eps if rtol is None else rtol), (64 * eps if atol is None else atol)


def _compare(got: np.ndarray, want: Any, rtol: float | None,
             atol: float | None) -> tuple[bool, str]:
    want = np.asarray(want)
    if want.shape != got.shape:
        return False, f"shape {list(got.shape)} but the reference returns {list(want.shape)}"
    r, a = _tolerance(got.dtype, rtol, atol)
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g - w)
    err = np.where(np.isnan(g) & np.isnan(w), 0.0, err)
    scale = float(np.nanmax(np.abs(w))) if w.size else 0.0
    bad = ~(err <= a * scale + r * np.abs(w))
    worst = float(np.nanmax(err)) if err.size else 0.0
    text = f"max |error| {worst:.3g}"
    text += f" (rtol {r:.3g}, atol {a:.3g} x max|want| {scale:.3g})" if r or a else " (exact)"
    if bad.any():
        k = np.unravel_index(int(np.flatnonzero(bad)[0]), got.shape)
        text += f"; first mismatch at {tuple(int(i) for i in k)}: got {got[k]}, want {want[k]}"
    return not bad.any(), text


def _expected(result: Any, arrays: list[int]) -> dict[int, Any]:
    if isinstance(result, dict):
        return {int(k): v for k, v in result.items() if v is not None}
    if isinstance(result, np.ndarray):
        return {arrays[-1]: result}
    if isinstance(result, (list, tuple)):
        if len(result) != len(arrays):
            raise ArgumentError(f"the reference returns {len(result)} arrays for the "
                                f"{len(arrays)} array arguments", loc=WHERE)
        return {k: v for k, v in zip(arrays, result) if v is not None}
    raise ArgumentError(f"the reference returns a {type(result).__name__}; return an "
                        "array, a sequence or a dict of arrays", loc=WHERE)


#: the options that only a launch of one kernel uses
_LAUNCH = ("grid", "block", "arg", "shared_bytes", "reference", "rtol", "atol",
           "no_race_check", "tensor_cores", "cooperative", "cluster")


def _read_whole(program: Any, args: argparse.Namespace) -> int:
    """Without ``--kernel``: the whole file read and checked against the ISA's rules
    (every instruction's types, operands and qualifiers; a syntax error is raised at
    its line), and what each kernel takes."""
    given = [f"--{k.replace('_', '-')}" for k, v in args.launch_defaults.items()
             if getattr(args, k) != v]
    names = program.kernels
    if given:
        verb = "describes" if len(given) == 1 else "describe"
        raise ArgumentError(f"{', '.join(given)} {verb} a launch of one kernel: name it "
                            f"with --kernel ({', '.join(names) or 'the file has none'})",
                            loc=WHERE)
    module = program.module
    print(f"check-ptx {args.file}: PTX {module.version} for {module.target}, "
          f"{len(names)} kernel(s)")
    for name in names:
        kernel = program.kernel(name)
        ir = kernel.ir
        count = sum(len(block.body) for block in ir.blocks)
        print(f"  {kernel!r}: {count} instructions, {len(ir.registers)} registers, "
              f"{ir.static_shared} bytes of static shared memory (line {ir.loc.line})")
    print("result: OK (every instruction's types, operands and qualifiers as the PTX ISA "
          "allows them; run a kernel with --kernel NAME --grid ... --block ... --arg ...)")
    return 0


def cmd_check_ptx(args: argparse.Namespace) -> int:
    """Run the kernel, report the sanitizer's verdict and the comparison; without a
    kernel, read and check the whole file."""
    import tessera as ts
    from tessera.interp.target import TargetFault

    program = ts.ptx.load(Path(args.file))
    if not args.kernel:
        return _read_whole(program, args)
    kernel = program.kernel(args.kernel)
    args.where = kernel.ir.loc
    rng = np.random.default_rng(args.seed)
    parsed = parse_args(args.arg, rng)
    values = [v for v, _ in parsed]
    grid, block = _dims(args.grid, "--grid"), _dims(args.block, "--block")
    cluster = _dims(args.cluster, "--cluster") if args.cluster else None
    before = [_before(v) for v in values]
    print(f"check-ptx {args.file}: {kernel!r}")
    print(f"  launch: grid {grid} x block {block} = {np.prod(grid) * np.prod(block)} threads, "
          f"{args.shared_bytes} bytes of dynamic shared memory"
          + (f", clusters of {cluster}" if cluster else ""))
    for k, (_, text) in enumerate(parsed):
        print(f"  argument {k}: {text}")
    if args.tensor_cores == "hopper":
        print("  tensor cores: hopper (the truncating sums of an H100/H200, bit for bit)")
    if args.cooperative:
        print("  cooperative launch (a grid workspace for grid.sync())")
    try:
        kernel.run(grid=grid, block=block, args=values, shared_bytes=args.shared_bytes,
                   check_races=not args.no_race_check, tensor_cores=args.tensor_cores,
                   cooperative=args.cooperative, cluster=cluster)
    except TargetFault:
        print("  sanitizer: FAULT (below)")
        raise
    checks = "bounds, alignment, uninitialised shared reads, async copies, barriers"
    print(f"  sanitizer: no faults ({checks}"
          f"{'' if args.no_race_check else ', shared-memory races'})")
    if not args.reference:
        print("result: OK (no reference given)")
        return 0
    from tessera.cli import _load

    ref = _load(args.reference, args)
    arrays: list[Any] = []  # an argument's index, or (index, field) inside a struct
    for k, v in enumerate(values):
        if isinstance(v, ts.ptx.Struct):
            arrays += [(k, j) for j, (_, f) in enumerate(v.fields) if isinstance(f, np.ndarray)]
        elif isinstance(v, (np.ndarray, ts.ptx.TensorMapArgument)) or _surface_of(v) is not None:
            arrays.append(k)
    try:
        result = ref(*before)
    except Exception as err:  # the user's reference failed: report it at its file
        raise ArgumentError(f"the reference {args.reference} raised "
                            f"{type(err).__name__}: {err}", loc=args.where) from err
    ok = True
    print(f"  reference {args.reference}:")
    for k, want in sorted(_expected(result, arrays).items(),
                          key=lambda kv: (kv[0], -1) if isinstance(kv[0], int) else kv[0]):
        out = _output(values, k)
        if not isinstance(out, np.ndarray):
            raise ArgumentError(f"the reference returns a value for argument {k}, which is "
                                "not an array", loc=args.where)
        good, text = _compare(out, want, args.rtol, args.atol)
        ok &= good
        name = f"argument {k}" if isinstance(k, int) else f"argument {k[0]}, field {k[1]}"
        print(f"    {name} ({out.dtype}{list(out.shape)}): {text}: "
              f"{'OK' if good else 'MISMATCH'}")
    print(f"result: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def _before(v: Any) -> Any:
    """An argument as the reference gets it: arrays copied before the launch, a tensor
    map as its array, a struct as the tuple of its fields."""
    import tessera as ts

    if isinstance(v, ts.ptx.TensorMapArgument):
        return v.array.copy()
    if isinstance(v, ts.ptx.TextureArgument):
        return (_surface_of(v) if _surface_of(v) is not None else v.array).copy()
    if isinstance(v, ts.ptx.Struct):
        return tuple(_before(f) for _, f in v.fields)
    return v.copy() if isinstance(v, np.ndarray) else v


def _output(values: list[Any], key: Any) -> Any:
    """The array an output key names: an argument, or (argument, field) of a struct."""
    import tessera as ts

    if not isinstance(key, int):
        k, j = key
        return values[k].fields[j][1]
    v = values[key] if 0 <= key < len(values) else None
    if isinstance(v, ts.ptx.TextureArgument):
        return _surface_of(v)
    return v.array if isinstance(v, ts.ptx.TensorMapArgument) else v


def _surface_of(v: Any) -> np.ndarray | None:
    """The array a surface argument reads and writes, or None."""
    import tessera as ts

    return v.array if isinstance(v, ts.ptx.TextureArgument) and v.writes else None


def _dims(text: str, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ArgumentError(f"bad {what} {text!r}", loc=WHERE, hint="write e.g. 4 or 4,2,1") \
            from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ArgumentError(f"bad {what} {text!r}", loc=WHERE, hint="1 to 3 positive sizes")
    return dims + (1,) * (3 - len(dims))


def add_parser(sub: Any) -> None:
    """Register ``check-ptx`` with the ``tessera`` command's subparsers."""
    p = sub.add_parser("check-ptx", help="run a PTX kernel on the CPU with sanitizer checks, "
                       "or check a whole file against the PTX ISA's rules")
    p.add_argument("file", help="FILE.ptx (from nvcc, Triton, tessera or by hand)")
    p.add_argument("--kernel", default="", help="the .entry to run (without it: read and "
                   "check every kernel, run none)")
    p.add_argument("--grid", default="1", help="CTAs, e.g. 4 or 4,2,1")
    p.add_argument("--block", default="1", help="threads per CTA, e.g. 256 or 32,8")
    p.add_argument("--cluster", default="", help="thread block clusters (sm_90), e.g. 2,1,1")
    p.add_argument("--arg", action="append", default=[],
                   help="one per .param: u32=1000, 'f32[1024]=randn', x.npy, "
                   "'tmap:bf16[128,64]=randn:64x64:sw128' (a Triton descriptor's five: "
                   "'tdesc:...'), 'struct{f32[64]=randn; s32=64}', "
                   "'tex{f32[4,8]=arange; filter=linear}', 'surf{u8[8,4]=arange; channels=4}'")
    p.add_argument("--shared-bytes", type=int, default=0, help="dynamic shared memory")
    p.add_argument("--reference", default="", help="REF.py:FUNC returning expected outputs")
    p.add_argument("--rtol", type=float, default=None)
    p.add_argument("--atol", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisers")
    p.add_argument("--no-race-check", action="store_true",
                   help="skip the shared-memory race check (faster)")
    p.add_argument("--tensor-cores", choices=("exact", "hopper"), default="exact",
                   help="mma/wgmma accumulation: exact sums (the definition) or an "
                        "H100/H200's truncating sums, to predict its output bit for bit")
    p.add_argument("--cooperative", action="store_true",
                   help="launch as cudaLaunchCooperativeKernel does (cooperative groups' "
                        "grid.sync() needs it)")
    p.set_defaults(run=cmd_check_ptx,
                   launch_defaults={k: p.get_default(k) for k in _LAUNCH})


__all__ = ["add_parser", "cmd_check_ptx", "parse_arg"]
