"""``ptx.printf`` (:mod:`tessera.ir.dialects.target.printf`): CUDA's device ``printf``
run on the CPU; and ``ptx.assertfail``, a failed device ``assert``: a fault of the
first thread whose assertion failed, with CUDA's message.

Each active thread, in thread order, reads its format string and argument buffer
through generic addresses (global, shared or its own local memory, checked as loads
are) and formats them as C's ``printf`` does: the flags ``-+ #0``, a width and a
precision (``*`` takes an ``int`` argument), the lengths ``hh``, ``h``, ``l``, ``ll``,
``j``, ``z``, ``t`` and the conversions ``d i u o x X c s p e E f F g G a A %``. ``%p``
and ``%s`` of a null pointer print ``(nil)`` and ``(null)``, as glibc's ``printf``,
which formats a GPU's buffer on the host, does. The text of a launch is written to
standard output when the launch ends, or faults: as a GPU flushes its ``printf``
buffer at the next synchronisation.
"""

from __future__ import annotations

import math
import re
import struct
import sys
from collections.abc import Callable

import numpy as np

from tessera.interp.target.ptx.memory import generic_access
from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.printf import AssertFail, Printf

_SPEC = re.compile(rb"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?"
                   rb"(?P<len>hh|h|ll|l|j|z|t)?(?P<conv>[diouxXeEfFgGaAcsp%])")
#: the longest string ``%s`` or a format reads before it must have met its NUL
MAX_STRING = 1 << 16
_WIDE = (b"l", b"ll", b"j", b"z", b"t")


def _hex_float(x: float, conv: str, flags: str, width: int) -> str:
    """``%a``: C's hexadecimal float (``0x1.8p+1``, trailing zero digits dropped; no
    precision), signed and padded as C pads it."""
    sign = "-" if math.copysign(1, x) < 0 else "+" if "+" in flags else \
        " " if " " in flags else ""
    if math.isinf(x) or math.isnan(x):
        prefix, body, zeros = sign, "inf" if math.isinf(x) else "nan", False
    else:
        mantissa, _, exponent = float.hex(abs(x)).partition("p")
        head, _, fraction = mantissa[2:].partition(".")
        fraction = fraction.rstrip("0")
        dot = "." if fraction or "#" in flags else ""
        prefix, body, zeros = sign + "0x", f"{head}{dot}{fraction}p{exponent}", True
    if conv == "A":
        prefix, body = prefix.upper(), body.upper()
    pad = width - len(prefix) - len(body)
    if "-" in flags:
        return prefix + body + " " * pad
    if "0" in flags and zeros:
        return prefix + "0" * pad + body
    return " " * pad + prefix + body


def _integer(value: int, conv: str, flags: str, width: int, precision: int | None) -> str:
    """C's integer conversions (and glibc's ``%p``: ``%#x`` that takes a sign): at least
    ``precision`` digits (none for a zero of precision 0), a sign or ``0x`` prefix,
    padded to ``width`` with spaces, or zeros after the prefix for the 0 flag without a
    precision."""
    base = {"o": 8, "x": 16, "X": 16, "p": 16}.get(conv, 10)
    digits = np.base_repr(abs(value), base).lower() if value else "0"
    if conv == "X":
        digits = digits.upper()
    if precision is not None:
        digits = "" if precision == 0 and value == 0 else digits.rjust(precision, "0")
    prefix = ""
    if conv in "dip":  # glibc signs a pointer as it signs an int
        prefix = "-" if value < 0 else "+" if "+" in flags else " " if " " in flags else ""
    if conv == "p":
        prefix += "0x"
    elif "#" in flags and conv == "o" and not digits.startswith("0"):
        digits = "0" + digits
    elif "#" in flags and conv in "xX" and value:
        prefix = "0" + conv
    pad = width - len(prefix) - len(digits)
    if "-" in flags:
        return prefix + digits + " " * pad
    if "0" in flags and precision is None:
        return prefix + "0" * pad + digits
    return " " * pad + prefix + digits


def format_c(fmt: bytes, arg: Callable[[int], bytes], string: Callable[[int], bytes],
             ) -> tuple[str, int]:
    """``fmt`` formatted with the arguments ``arg(size)`` returns in turn (their bytes,
    little-endian); ``string(address)`` reads a ``%s`` argument. The text, and the
    number of arguments consumed."""
    out: list[bytes] = []
    used = 0

    def take(size: int, signed: bool) -> int:
        nonlocal used
        used += 1
        return int.from_bytes(arg(size), "little", signed=signed)

    pos = 0
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        conv = m["conv"].decode()
        if conv == "%":
            out.append(b"%")
            continue
        flags = m["flags"].decode()
        width = m["width"].decode() if m["width"] else ""
        if width == "*":
            w = take(4, True)
            flags, width = (flags + "-", str(-w)) if w < 0 else (flags, str(w))
        prec = m["prec"]
        precision = "" if prec is None else "." + (prec.decode() or "0")
        if prec == b"*":
            p = take(4, True)
            precision = f".{p}" if p >= 0 else ""  # a negative one is as if omitted
        spec = "%" + flags + width + precision
        wide = m["len"] in _WIDE
        if conv in "diouxX":
            value = take(8 if wide else 4, conv in "di")
            bits = {b"h": 16, b"hh": 8}.get(m["len"] or b"")
            if bits:  # promoted to int, printed as the short or char it was
                value &= (1 << bits) - 1
                if conv in "di" and value >> (bits - 1):
                    value -= 1 << bits
            elif conv not in "di":
                value &= (1 << (64 if wide else 32)) - 1
            text = _integer(value, conv, flags, int(width or 0),
                            int(precision[1:]) if precision else None)
        elif conv in "eEfFgGaA":
            value = struct.unpack("<d", arg(8))[0]
            used += 1
            if conv in "aA":
                text = _hex_float(value, conv, flags, int(width or 0))
            else:
                if math.isnan(value):  # signed as C signs it, padded with spaces
                    sign = "-" if math.copysign(1, value) < 0 else "+" if "+" in flags \
                        else " " if " " in flags else ""
                    nan = sign + ("NAN" if conv.isupper() else "nan")
                    text = ("%" + flags.replace("0", "") + width + "s") % nan
                else:
                    if math.isinf(value):  # C pads an infinity with spaces
                        spec = "%" + flags.replace("0", "") + width + precision
                    text = (spec + conv) % value
        elif conv == "c":
            text = ("%" + flags + width + "s") % chr(take(4, True) & 0xFF)  # no precision
        elif conv == "s":
            address = take(8, False)
            s = string(address).decode("utf-8", "replace") if address else \
                "(null)" if not precision or int(precision[1:]) >= 6 else ""  # as glibc
            text = (spec + "s") % s
        else:  # p
            address = take(8, False)
            text = (_integer(address, "p", flags, int(width or 0),
                             int(precision[1:]) if precision else None) if address
                    else ("%" + flags.replace("0", "") + width + "s") % "(nil)")
        out.append(text.encode("utf-8"))
    out.append(fmt[pos:])
    return b"".join(out).decode("utf-8", "replace"), used


class _Memory:
    """One thread's reads of its format, arguments and strings."""

    def __init__(self, fr: TargetFrame, instr: Instr, thread: int) -> None:
        self.fr, self.instr, self.thread = fr, instr, np.array([thread])

    def bytes(self, address: int, n: int) -> bytes:
        return generic_access(self.fr, self.instr, np.array([address], np.int64),
                              self.thread, n)[0].tobytes()

    def string(self, address: int) -> bytes:
        return _strings(self.fr, self.instr, np.array([address], np.int64), self.thread)[0]

    def arguments(self, base: int) -> Callable[[int], bytes]:
        offset = 0

        def arg(size: int) -> bytes:
            nonlocal offset
            if not base:
                raise self.fr.m.fault(self.instr, "printf", "the format takes more arguments "
                                      "than the call passes (none)", int(self.thread[0]))
            offset = -(-offset // size) * size  # each argument at its natural alignment
            data = self.bytes(base + offset, size)
            offset += size
            return data
        return arg


def _strings(fr: TargetFrame, instr: Instr, addresses: np.ndarray,
             act: np.ndarray) -> list[bytes]:
    """The NUL-terminated string at each active thread's address: one read of a byte
    position for all the threads whose string goes on, not one read per byte and
    thread (every thread of a ``printf`` reads its format)."""
    found: list[tuple[np.ndarray, np.ndarray]] = []
    live = np.arange(len(act))
    for k in range(MAX_STRING):
        if not len(live):
            break
        byte = generic_access(fr, instr, addresses[live] + k, act[live], 1)[:, 0]
        live = live[byte != 0]
        found.append((live, byte[byte != 0]))
    else:
        raise fr.m.fault(instr, "printf", f"no NUL byte in the {MAX_STRING} bytes from "
                         f"{int(addresses[live[0]]):#x}", int(act[live[0]]))
    text = np.zeros((len(act), len(found)), np.uint8)
    for k, (who, byte) in enumerate(found):
        text[who, k] = byte
    lengths = np.count_nonzero(text, axis=1)
    return [row[:n].tobytes() for row, n in zip(text, lengths)]


@step_rule(Printf)
def _printf(c: TargetCompiler, instr: Instr) -> Step:
    fmt, args = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        result = np.zeros(fr.mask.shape, np.int32)
        act = np.flatnonzero(fr.mask)
        formats = _strings(fr, instr, fr.regs[fmt][act].astype(np.int64), act)
        for t, form in zip(act, formats):
            memory = _Memory(fr, instr, int(t))
            text, used = format_c(form, memory.arguments(int(fr.regs[args][t])),
                                  memory.string)
            fr.m.printed.append(text)
            result[t] = used
        fr.regs[out] = result
    return step


@step_rule(AssertFail)
def _assertfail(c: TargetCompiler, instr: Instr) -> Step:
    message, file, line, function = (c.slot(v) for v in instr.operands)

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)[:1]  # the first thread whose assert failed
        if not len(act):
            return
        texts = [_strings(fr, instr, fr.regs[slot][act].astype(np.int64), act)[0]
                 .decode(errors="replace") for slot in (message, file, function)]
        raise fr.m.fault(instr, "assertion failed", f"{texts[1]}:{int(fr.regs[line][act[0]])}: "
                         f"{texts[2]}: Assertion `{texts[0]}` failed.", int(act[0]),
                         hint="the kernel's assert() failed: on a GPU the launch ends with "
                         "cudaErrorAssert")
    return step


def flush(m: object) -> None:
    """Write what the launch's threads printed to standard output."""
    printed: list[str] = getattr(m, "printed", [])
    if printed:
        sys.stdout.write("".join(printed))
        sys.stdout.flush()
        printed.clear()


__all__ = ["MAX_STRING", "flush", "format_c"]
