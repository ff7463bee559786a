"""Which types each register instruction takes, as the PTX ISA lists them (version 8.x,
sections 9.7.1-9.7.5 and 9.7.9), so that the reader refuses ``add.b32``, ``shl.u32``,
``popc.u32``, ``mov.f16`` or ``lg2.approx.f64`` as ptxas does, at their line, instead
of giving them a meaning no GPU has.

An instruction's *form* is its opcode with the modifiers that change what it is
(``mul.lo`` and ``mul.wide`` are different instructions; ``.rz``, ``.rm`` and ``.rp``
take what ``.rn`` takes). Modifiers that do not change the type list (``.sat``,
``.relu``) are not part of the form; the handlers judge them. Beside the types the
module checks what applies to every instruction: a modifier given at most once, the
``.sync``/``.aligned`` warp-collective instructions must say, and the sm_90 instructions
an older ``.target`` lacks.

What ``ld`` and ``st`` may say (sections 9.7.9.8 "ld" and 9.7.9.10 "st"): the types they
move, one state space, and which memory-order and cache qualifiers each takes, so that
``ld.release``, ``st.acquire``, ``st.nc``, ``ld.shared.nc``, ``ld.relaxed`` without a
scope or ``ld.global.shared`` are refused at their line, as ptxas refuses them.
"""

from __future__ import annotations

import functools
import re

from tessera.arch.limits import arch_number
from tessera.ir.dialects.target import FP8X2, cvt_needs
from tessera.ir.dialects.target.memory_ops import MEMORY_SCOPES, ORDER_SEMANTICS
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.isa_versions import Version, version_problem

INT = ("u16", "u32", "u64", "s16", "s32", "s64")
SIGNED = ("s16", "s32", "s64")
UNSIGNED = ("u16", "u32", "u64")
BITS = ("b16", "b32", "b64")
FLOAT = ("f32", "f64")
HALF = ("f16", "f16x2", "bf16", "bf16x2")
WORDS = ("u32", "u64", "s32", "s64")

#: the SIMD video instructions (sec. 9.7.16.2), of 2 or 4 lanes
SIMD = {f"{op}{n}" for op in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax")
         for n in (2, 4)}

#: form -> the types it takes. A form missing here is no instruction (``mul.f32`` is
#: ``mul`` of floats; ``div.f32`` needs ``.rn``, ``.approx`` or ``.full``).
TYPES: dict[str, tuple[str, ...]] = {
    "add": INT + FLOAT + HALF, "sub": INT + FLOAT + HALF, "mul": FLOAT + HALF,
    "add.rn": FLOAT + HALF, "sub.rn": FLOAT + HALF, "mul.rn": FLOAT + HALF,
    "mul.lo": INT, "mul.hi": INT, "mul.wide": ("u16", "u32", "s16", "s32"),
    "mad.lo": INT, "mad.hi": INT, "mad.wide": ("u16", "u32", "s16", "s32"),
    "mad.rn": FLOAT, "fma.rn": FLOAT + HALF,
    "div": INT, "div.rn": FLOAT, "div.approx": ("f32",), "div.full": ("f32",), "rem": INT,
    "min": INT + FLOAT + HALF, "max": INT + FLOAT + HALF,
    "min.NaN": ("f32", *HALF), "max.NaN": ("f32", *HALF),
    "abs": SIGNED + FLOAT + HALF, "neg": SIGNED + FLOAT + HALF, "copysign": FLOAT,
    "and": ("pred", *BITS), "or": ("pred", *BITS), "xor": ("pred", *BITS),
    "not": ("pred", *BITS), "cnot": BITS, "shl": BITS, "shr": BITS + INT,
    "popc": ("b32", "b64"), "clz": ("b32", "b64"), "brev": ("b32", "b64"),
    "bfind": WORDS, "bfe": WORDS, "bfi": ("b32", "b64"), "bmsk": ("b32",),
    "addc": WORDS, "subc": WORDS, "madc.lo": WORDS, "madc.hi": WORDS,
    **dict.fromkeys(SIMD, ("u32", "s32")),
    "sqrt.rn": FLOAT, "sqrt.approx": ("f32",), "rcp.rn": FLOAT, "rcp.approx": ("f32",),
    "rcp.approx.ftz": FLOAT, "ex2.approx": ("f32", "f16", "f16x2"),
    "ex2.approx.ftz": ("f32", "bf16", "bf16x2"), "lg2.approx": ("f32",),
    "sin.approx": ("f32",), "cos.approx": ("f32",), "tanh.approx": ("f32", *HALF),
    "rsqrt.approx": FLOAT, "lop3": ("b32",), "sad": INT, "mul24.lo": ("u32", "s32"),
    "mul24.hi": ("u32", "s32"), "szext": ("u32", "s32"),
    "mov": ("pred", *BITS, *INT, *FLOAT), "selp": BITS + INT + FLOAT,
    "setp.eq": BITS + INT + FLOAT + HALF, "setp.lt": INT + FLOAT + HALF,
    "setp.lo": UNSIGNED, "setp.equ": FLOAT + HALF,
}
#: modifiers that make a form (the rest leave the type list alone)
_FORM_MODS = {"lo", "hi", "wide", "rn", "approx", "full", "NaN", "ftz"}
_ROUNDING = {"rz": "rn", "rm": "rn", "rp": "rn"}
#: setp's comparisons by the types they apply to
_COMPARISONS = {**dict.fromkeys(("eq", "ne"), "eq"),
                **dict.fromkeys(("lt", "le", "gt", "ge"), "lt"),
                **dict.fromkeys(("lo", "ls", "hi", "hs"), "lo"),
                **dict.fromkeys(("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"),
                                "equ")}
OPCODES = {form.split(".")[0] for form in TYPES}
#: the modifiers some register instruction takes (sec. 9.7.1-9.7.5); the handlers judge
#: which one takes which, and refuse the ones they do not model
_REGISTER_MODS = _FORM_MODS | {"rz", "rm", "rp", "sat", "satfinite", "relu", "cc", "add",
                               "xorsign", "abs", "shiftamt", "oob", "clamp", "wrap"}
#: bf16 arithmetic that Hopper added: sm_80 and sm_89 have fma, min, max, neg, abs only
_SM90_BF16 = {"add", "sub", "mul", "setp", "ex2", "tanh"}
#: what warp-collective instructions must say (ptxas refuses them without it)
_REQUIRED = {"shfl": ("sync",), "vote": ("sync",), "elect": ("sync",), "wgmma": ("sync",),
             "redux": ("sync",), "match": ("sync",),
             **dict.fromkeys(("ldmatrix", "stmatrix", "mma", "wmma", "setmaxnreg"),
                             ("sync", "aligned"))}
#: register instructions that take no modifier but their type
_BARE = {"mov", "selp", "and", "or", "xor", "not", "cnot", "shl", "shr", "popc", "clz",
         "brev", "bfe", "bfi", "rem", "copysign", "lop3", "sad"}
#: types the reader does not model at all: their own "unsupported" error says so
_UNMODELLED = {"u8", "s8", "b8", "e4m3", "e5m2", "tf32", "b128"}


def form_of(head: str, mods: list[str]) -> str:
    """The form ``mods`` (type last) make of opcode ``head``: ``mul.wide``, ``setp.lt``,
    ``ex2.approx.ftz`` (``.ftz`` only where it changes the types)."""
    if head == "setp":  # ptxas takes .ftz before the comparison too
        cmp = next((f for f in mods[:-1] if f != "ftz"), mods[0])
        return f"setp.{_COMPARISONS.get(cmp, cmp)}" if len(mods) > 1 else head
    flags = [_ROUNDING.get(f, f) for f in mods[:-1]]
    key = ".".join([head] + [f for f in flags if f in _FORM_MODS])
    if key in TYPES:
        return key
    return ".".join([head] + [f for f in flags if f in _FORM_MODS and f != "ftz"])


def _required_problem(head: str, mods: list[str]) -> str | None:
    """Why a warp-collective instruction lacks the ``.sync``/``.aligned`` it must say."""
    missing = [f for f in _REQUIRED.get(head, ()) if f not in mods]
    return f"{head} needs .{' and .'.join(missing)}" if missing else None


def _modifier_problem(head: str, flags: list[str]) -> str | None:
    """Why a register instruction cannot carry ``flags``: one the ISA gives no register
    instruction (``mov.volatile``, ``add.sync``), or any on those that take none."""
    if head in _BARE and flags:
        return f"{head} takes no .{flags[0]} modifier"
    if head == "tanh" and "ftz" in flags:
        return "tanh takes no .ftz modifier"
    odd = [f for f in flags if f not in _REGISTER_MODS]
    return f"{head} takes no .{odd[0]} modifier" if odd else None


_TYPE_NAME = re.compile(r"^([busfe]\d|bf16|tf32|pred$|ue\d)")


def _hopper_problem(head: str, mods: list[str], arch: int, accelerated: bool) -> str | None:
    """Why an sm_90 instruction cannot run on an older ``.target``, or an sm_90a one (the
    architecture-specific ``wgmma`` and ``setmaxnreg``) on a target without the ``a``."""
    if head in ("wgmma", "setmaxnreg") and arch >= 90 and not accelerated:
        return f"{head}.{'.'.join(mods)} needs .target sm_{arch}a, not sm_{arch}"
    if head == "cvt" and len(mods) >= 2 and \
            arch < (sm := cvt_needs(mods[-2], mods[-1], "satfinite" in mods, arch)[1]):
        return f"cvt.{mods[-2]}.{mods[-1]} needs .target sm_{sm} or higher, not sm_{arch}"
    hopper = (head in ("wgmma", "setmaxnreg", "elect", "stmatrix", "griddepcontrol")
              or (head == "cp" and mods[1:2] == ["bulk"])
              or (head == "fence" and mods[:2] == ["proxy", "async"])
              or (head == "mbarrier" and bool({"expect_tx", "try_wait"} & set(mods)))
              or (head in ("atom", "red") and mods[-1:] in (["bf16"], ["bf16x2"])))
    if hopper and arch < 90:
        return f"{head}.{'.'.join(mods)} needs .target sm_90 or higher"
    return None


def _form_problem(head: str, mods: list[str]) -> str | None:
    """Why the modifiers of ``head`` make no instruction: a repeated one, or what the
    conversion, memory and register tables refuse."""
    named = [f for f in mods if not _TYPE_NAME.match(f)]  # mma.f32.bf16.bf16.f32 repeats types
    repeated = [f for i, f in enumerate(named) if f in named[:i]
                and not (f == "sync" and head in ("shfl", "vote"))]  # ptxas takes these
    if repeated:
        return f"{head} repeats its .{repeated[0]} modifier"
    if head == "cvt" and len(mods) >= 2 and not (exotic(mods[-2]) or exotic(mods[-1])):
        return cvt_problem(mods[-2], mods[-1], mods[:-2])
    if head in ("ld", "st"):
        return memory_problem(head, mods)
    if head in OPCODES and head != "setp":  # the SIMD video instructions name 3 types
        return _modifier_problem(head, mods[:-3] if head in SIMD else mods[:-1])
    return _required_problem(head, mods) if head in _REQUIRED else None


def types_last(head: str, mods: list[str]) -> list[str]:
    """``mods`` with the type names moved after the other modifiers, in their order:
    ptxas takes ``add.f32.rz`` and ``st.global.f32.cg`` as ``add.rz.f32`` and
    ``st.global.cg.f32`` (``prmt.b32.f4e`` is ``prmt``'s own order)."""
    if head == "prmt":
        return mods
    return ([f for f in mods if not _TYPE_NAME.match(f)]
            + [f for f in mods if _TYPE_NAME.match(f)])


def check_type(b: InstrBuilder, mods: list[str], target: str = "sm_90a",
               version: Version | None = None) -> None:
    """A syntax error unless the instruction's form takes its type (the last modifier) on
    ``target`` in a module of PTX ISA ``version`` (None: any); instructions outside the
    table are the handlers' to judge."""
    if mods:
        problem = instruction_problem(b.head, tuple(mods), arch_number(target), version,
                                      re.match(r"sm_\d+a\b", target) is not None)
        if problem is not None:
            raise b.syntax(problem)


@functools.lru_cache(maxsize=4096)
def instruction_problem(head: str, mods: tuple[str, ...], arch: int,
                        version: Version | None = None, accelerated: bool = True,
                        ) -> str | None:
    """Why ``head.mods`` is no instruction on ``sm_<arch>`` (``accelerated``: its ``a``
    variant, sm_90a) in a module of ``version``, or None (instructions repeat: each form
    is judged once)."""
    listed = list(mods)
    problem = (_hopper_problem(head, listed, arch, accelerated) or _form_problem(head, listed)
               or (fp8_problem(listed[-2], listed[-1], listed[:-2], arch)
                   if head == "cvt" and len(listed) >= 2 else None)
               or version_problem(head, listed, arch, version))
    if problem is not None or head not in OPCODES or mods[-1] in _UNMODELLED:
        return problem
    t = mods[-1]
    form = form_of(head, listed)
    allowed = TYPES.get(form)
    if allowed is not None and t in allowed:
        if t in ("bf16", "bf16x2") and head in _SM90_BF16 and arch < 90:
            return (f"{head}.{t} needs .target sm_90 or higher, not sm_{arch} "
                    "(fma.rn takes bf16 from sm_80)")
        return None
    others = [f for f, types in TYPES.items() if f.split(".")[0] == head and t in types
              and f != form]
    if allowed is None and not others:
        return f"{form} is not a PTX instruction"
    verb = "takes" if len(others) == 1 else "take"
    if allowed is None:
        return f"{form}.{t} is not a PTX instruction: {' and '.join(others)} {verb} .{t}"
    takes = ", ".join("." + x for x in allowed)
    hint = f" ({' and '.join(others)} {verb} it)" if others else ""
    return f"{form} takes {takes}, not .{t}{hint}"


_INT_RANGE = {t: ((-(1 << (int(t[1:]) - 1)), (1 << (int(t[1:]) - 1)) - 1) if t[0] == "s"
                  else (0, (1 << int(t[1:])) - 1)) for t in ("u8", "s8", *INT)}
_SCALAR_FLOATS = ("f16", "bf16", "f32", "f64")
_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def cvt_problem(to: str, frm: str, flags: list[str]) -> str | None:
    """Why ``cvt<flags>.<to>.<frm>`` is no instruction (sec. 9.7.9.21), or None: which
    conversions need which rounding (an integer result ``.rni``/``.rzi``/``.rmi``/``.rpi``
    from a float; a float result ``.rn``/``.rz``/``.rm``/``.rp`` from an integer or a
    wider float), and where ``.sat`` can change a value."""
    ints, floats = tuple(_INT_RANGE), _SCALAR_FLOATS
    if to not in ints + floats + ("f16x2", "bf16x2") or frm not in ints + floats:
        return (f"cvt converts between {', '.join('.' + x for x in ints + floats)} "
                f"(and into .f16x2/.bf16x2 from two .f32), not .{to} from .{frm}")
    irnd = [f for f in flags if f in ("rni", "rzi", "rmi", "rpi")]
    frnd = [f for f in flags if f in ("rn", "rz", "rm", "rp")]
    name = f"cvt.{to}.{frm}"
    if "approx" in flags:
        return f"{name} takes no .approx: cvt rounds as its rounding modifier says"
    if len(irnd) + len(frnd) > 1:
        return f"{name} takes one rounding modifier"
    if to in ("f16x2", "bf16x2") and "sat" in flags:
        return f"{name} takes no .sat: a pair saturates with .satfinite"
    if to in ("f16x2", "bf16x2"):
        return None if frm == "f32" and frnd else f"{name} is not a PTX instruction: " \
            f"cvt.rn.{to}.f32 packs two .f32"
    if "satfinite" in flags and (frm != "f32" or to not in ("f16", "bf16", "f16x2", "bf16x2")):
        return f"{name} takes no .satfinite: it narrows .f32 to .f16 or .bf16 only"
    if "sat" in flags and "bf16" in (to, frm):
        return f"{name} takes no .sat: nothing saturates to or from .bf16"
    if to in ints and frm in ints:
        if irnd or frnd:
            return f"{name} converts integers and takes no rounding modifier"
        lo, hi = _INT_RANGE[frm]
        tlo, thi = _INT_RANGE[to]
        if "sat" in flags and tlo <= lo and hi <= thi:
            return f"{name} cannot overflow: .sat changes nothing and is not allowed"
        return None
    if to in ints:
        return None if irnd else f"{name} needs an integer rounding (.rni, .rzi, .rmi, .rpi)"
    if frm in ints:
        return None if frnd else f"{name} needs a float rounding (.rn, .rz, .rm, .rp)"
    if irnd and to != frm:
        return f"{name}: .{irnd[0]} rounds to an integral value of the same type only"
    if frnd and to == frm:
        return f"{name} rounds nothing: .rni/.rzi/.rmi/.rpi round to an integral value"
    if not frnd and _WIDTH[to] < _WIDTH[frm]:
        return f"{name} narrows and needs a float rounding (.rn, .rz, .rm, .rp)"
    if frnd and _WIDTH[to] > _WIDTH[frm] and frm != "bf16":
        return f"{name} widens exactly and takes no rounding modifier"
    return None


def fp8_problem(to: str, frm: str, flags: list[str], arch: int) -> str | None:
    """Why ``cvt<flags>.<to>.<frm>`` of an fp8 pair is no instruction on ``sm_<arch>``, or
    None (also None for other conversions). The forms: ``cvt.rn.satfinite{.relu}`` to
    ``.e4m3x2``/``.e5m2x2`` from two ``.f32`` or one ``.f16x2``, and ``cvt.rn{.relu}``
    from them to ``.f16x2`` (the ``.bf16x2`` forms are PTX ISA 9.1's, for newer targets;
    the target they need is :func:`~tessera.ir.dialects.target.cvt_needs`')."""
    if to not in FP8X2 and frm not in FP8X2:
        return None
    name = f"cvt.{to}.{frm}"
    if (to in FP8X2 and frm not in ("f32", "f16x2")) or (frm in FP8X2 and to != "f16x2"):
        return (f"{name} is not a PTX instruction on sm_{arch}: cvt narrows .f32 pairs and "
                f".f16x2 to .e4m3x2/.e5m2x2, and widens those to .f16x2")
    allowed = {"rn", "relu", "satfinite"} if to in FP8X2 else {"rn", "relu"}
    extra = [f for f in flags if f not in allowed]
    if extra or "rn" not in flags or (to in FP8X2) != ("satfinite" in flags):
        return (f"{name} is written cvt.rn{'.satfinite' if to in FP8X2 else ''}{{.relu}}."
                f"{to}.{frm}, not cvt.{'.'.join([*flags, to, frm])}")
    return None



# --- ld and st ----------------------------------------------------------------------
#: what ld and st move: no half or predicate types (``.b16`` moves an f16)
MEMORY_TYPES = ("b8", "u8", "s8", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32",
                "s64", "f32", "f64", "b128")
SPACES = {"global", "shared", "param", "local", "const", "shared::cta", "shared::cluster"}
SCOPES = set(MEMORY_SCOPES)
#: qualifiers only one of the two takes: ld's cache operators and acquire, st's
_ONLY = {"ld": {"ca", "lu", "cv", "nc", "acquire", "L2::64B", "L2::128B", "L2::256B"},
         "st": {"wb", "wt", "release"}}
#: atom's order, which neither ld nor st takes
_NEITHER_ORDER = {"acq_rel"}
#: qualifiers neither takes, though other memory instructions do, or arithmetic does
_NEITHER = {"sync", "aligned", "async", "bulk", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi",
            "rpi", "ftz", "sat", "approx", "full", "lo", "hi", "wide", "uni"}


def exotic(t: str) -> bool:
    """A type of the narrow-float formats (``e4m3x2``, ``tf32`` ...), which the handlers
    judge."""
    return t.startswith(("e", "ue")) or t == "tf32"


def memory_problem(head: str, mods: list[str]) -> str | None:
    """Why ``<head>.<mods>`` (``head`` ld or st, the type last) is no instruction, or
    None."""
    t, flags = mods[-1], mods[:-1]
    spaces = [f for f in flags if f in SPACES]
    if len(spaces) > 1:
        return f"{head} names one state space, not {' and '.join('.' + x for x in spaces)}"
    space = spaces[0].split("::")[0] if spaces else ""
    other = "st" if head == "ld" else "ld"
    for f in flags:
        if f in _ONLY[other] or f in _NEITHER or f in _NEITHER_ORDER:
            return f"{head} takes no .{f} qualifier"
    sem = [f for f in flags if f in ("relaxed", "acquire", "release")]
    scope = SCOPES & set(flags)
    if problem := _order_problem(head, flags, sem, space):
        return problem
    if sem and not scope:
        return f"{head}.{sem[0]} needs a scope (.cta, .cluster, .gpu or .sys)"
    if scope and not sem:
        sems = " or ".join(f".{x}" for x in ORDER_SEMANTICS[head])
        return f"{head}.{scope.pop()} scopes a memory order: add {sems}"
    if sem and space in ("param", "const", "local"):
        return f"{head}.{sem[0]} orders no .{space} access"
    if "volatile" in flags and space in ("param", "const"):
        return f"{head}.volatile does not apply to .{space}"
    if "nc" in flags and space != "global":
        return "ld.nc reads the .global space only"
    levels = [f for f in flags if f.startswith(("L1::", "L2::"))]  # eviction, prefetch
    if levels and space not in ("", "global"):
        return f"{head}.{levels[0]} applies to .global (and generic) accesses, not .{space}"
    hints = [f for f in levels if f.startswith("L1::") or f == "L2::cache_hint"]
    if hints and (strong := {"volatile", "mmio"} & set(flags)):
        return f"{head}.{strong.pop()} takes no .{hints[0]}"
    vec = next((int(f[1:]) for f in flags if f in ("v2", "v4", "v8")), 1)
    return _type_problem(head, vec, t)


#: the cache operators, which only weak accesses take
_CACHE_OPERATORS = ("ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt")


def _order_problem(head: str, flags: list[str], sem: list[str], space: str) -> str | None:
    """Why the memory order of ``<head>.<flags>`` is none (ptxas 13.5's rules), or None:
    one of ``.weak``, ``.volatile`` and a semantics with one scope; cache operators on
    weak accesses only; ``.mmio`` on ``.relaxed.sys`` accesses of global memory."""
    orders = [f for f in flags if f in ("weak", "volatile", "relaxed", "acquire", "release")]
    if len(orders) > 1:
        return f"{head} takes one memory order, not {' and '.join('.' + x for x in orders)}"
    scopes = [f for f in flags if f in SCOPES]
    if len(scopes) > 1:
        return f"{head} takes one scope, not {' and '.join('.' + x for x in scopes)}"
    if "volatile" in flags and scopes:
        return f"{head}.volatile takes no scope: {head}.relaxed.{scopes[0]} is the scoped form"
    cache = [f for f in flags if f in _CACHE_OPERATORS]
    if cache and orders and orders[0] != "weak":
        return f"{head}.{orders[0]} takes no cache operator: .{cache[0]} is for weak accesses"
    if "mmio" in flags and (sem != ["relaxed"] or scopes != ["sys"] or
                            space not in ("", "global")):
        return f"{head}.mmio is {head}.mmio.relaxed.sys of global (or generic) memory"
    return None


def _type_problem(head: str, vec: int, t: str) -> str | None:
    if exotic(t):
        return None
    if t not in MEMORY_TYPES:
        return (f"{head} moves .{t} in no form: use the bit type of its width "
                f"(.b16 for an f16, .b32 for an f16x2)")
    bits = int(t[1:])
    if vec * bits > 128:
        return f"{head}.v{vec}.{t} moves {vec * bits} bits; a vector moves at most 128"
    return None


__all__ = ["MEMORY_TYPES", "OPCODES", "SIMD", "TYPES", "check_type", "cvt_problem", "exotic",
           "form_of", "fp8_problem", "instruction_problem", "memory_problem", "types_last"]
