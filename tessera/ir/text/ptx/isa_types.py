"""Which types each register instruction takes, as the PTX ISA lists them (version 8.x,
sections 9.7.1-9.7.5 and 9.7.9), so that the reader refuses ``add.b32``, ``shl.u32``,
``popc.u32``, ``mov.f16`` or ``lg2.approx.f64`` as ptxas does, at their line, instead
of giving them a meaning no GPU has.

An instruction's *form* is its opcode with the modifiers that change what it is
(``mul.lo`` and ``mul.wide`` are different instructions; ``.rz``, ``.rm`` and ``.rp``
take what ``.rn`` takes). Modifiers that do not change the type list (``.sat``,
``.uni``) are not part of the form; the handlers judge them.
"""

from __future__ import annotations

from tessera.ir.text.ptx.context import InstrBuilder

INT = ("u16", "u32", "u64", "s16", "s32", "s64")
SIGNED = ("s16", "s32", "s64")
UNSIGNED = ("u16", "u32", "u64")
BITS = ("b16", "b32", "b64")
FLOAT = ("f32", "f64")
HALF = ("f16", "f16x2", "bf16", "bf16x2")
WORDS = ("u32", "u64", "s32", "s64")

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
    "bfind": WORDS, "bfe": WORDS, "bfi": ("b32", "b64"),
    "sqrt.rn": FLOAT, "sqrt.approx": ("f32",), "rcp.rn": FLOAT, "rcp.approx": ("f32",),
    "rcp.approx.ftz": FLOAT, "ex2.approx": ("f32", "f16", "f16x2"),
    "ex2.approx.ftz": ("f32", "bf16", "bf16x2"), "lg2.approx": ("f32",),
    "sin.approx": ("f32",), "cos.approx": ("f32",), "tanh.approx": ("f32", *HALF),
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
#: types the reader does not model at all: their own "unsupported" error says so
_UNMODELLED = {"u8", "s8", "b8", "e4m3", "e5m2", "tf32", "b128"}


def form_of(head: str, mods: list[str]) -> str:
    """The form ``mods`` (type last) make of opcode ``head``: ``mul.wide``, ``setp.lt``,
    ``ex2.approx.ftz`` (``.ftz`` only where it changes the types)."""
    if head == "setp":
        return f"setp.{_COMPARISONS.get(mods[0], mods[0])}" if len(mods) > 1 else head
    flags = [_ROUNDING.get(f, f) for f in mods[:-1]]
    key = ".".join([head] + [f for f in flags if f in _FORM_MODS])
    if key in TYPES:
        return key
    return ".".join([head] + [f for f in flags if f in _FORM_MODS and f != "ftz"])


def check_type(b: InstrBuilder, mods: list[str]) -> None:
    """A syntax error unless the instruction's form takes its type (the last modifier);
    instructions outside the table are the handlers' to judge."""
    if not mods:
        return
    problem = None
    if b.head == "cvt" and len(mods) >= 2 and not _exotic(mods[-2]):
        problem = cvt_problem(mods[-2], mods[-1], mods[:-2])
    elif b.head in ("ld", "st"):
        vec = next((int(f[1:]) for f in mods if f in ("v2", "v4", "v8")), 1)
        problem = memory_problem(b.head, vec, mods[-1])
    if problem is not None:
        raise b.syntax(problem)
    if b.head not in OPCODES or mods[-1] in _UNMODELLED:
        return
    t = mods[-1]
    form = form_of(b.head, mods)
    allowed = TYPES.get(form)
    if allowed is not None and t in allowed:
        return
    others = [f for f, types in TYPES.items() if f.split(".")[0] == b.head and t in types
              and f != form]
    if allowed is None and not others:
        raise b.syntax(f"{form} is not a PTX instruction")
    verb = "takes" if len(others) == 1 else "take"
    if allowed is None:
        raise b.syntax(f"{form}.{t} is not a PTX instruction: "
                       f"{' and '.join(others)} {verb} .{t}")
    takes = ", ".join("." + x for x in allowed)
    hint = f" ({' and '.join(others)} {verb} it)" if others else ""
    raise b.syntax(f"{form} takes {takes}, not .{t}{hint}")


#: what ld and st move (sec. 9.7.9.8-9): no half or predicate types (``.b16`` moves an f16)
MEMORY_TYPES = ("b8", "u8", "s8", *BITS, *INT, *FLOAT, "b128")
_INT_RANGE = {t: ((-(1 << (int(t[1:]) - 1)), (1 << (int(t[1:]) - 1)) - 1) if t[0] == "s"
                  else (0, (1 << int(t[1:])) - 1)) for t in ("u8", "s8", *INT)}
_SCALAR_FLOATS = ("f16", "bf16", "f32", "f64")
_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def _exotic(t: str) -> bool:
    """A type of the narrow-float conversions (``e4m3x2``, ``tf32`` ...), which the
    handlers judge."""
    return t.startswith(("e", "ue")) or t == "tf32"


def memory_problem(head: str, vec: int, t: str) -> str | None:
    """Why ``<head>{.vN}.<t>`` moves no data a GPU can move, or None."""
    if _exotic(t):
        return None
    if t not in MEMORY_TYPES:
        return (f"{head} moves .{t} in no form: use the bit type of its width "
                f"(.b16 for an f16, .b32 for an f16x2)")
    bits = int(t[1:])
    if vec * bits > 128:
        return f"{head}.v{vec}.{t} moves {vec * bits} bits; a vector moves at most 128"
    return None


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
    if len(irnd) + len(frnd) > 1:
        return f"{name} takes one rounding modifier"
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


__all__ = ["MEMORY_TYPES", "OPCODES", "TYPES", "check_type", "cvt_problem", "form_of",
           "memory_problem"]
