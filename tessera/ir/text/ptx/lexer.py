"""PTX text as statements: comments removed, split at ``;``, ``{``, ``}`` and labels.

PTX (ISA chapter 4, "Syntax") is a sequence of statements ending in ``;`` with
``//`` and ``/* */`` comments; ``{ }`` open and close scopes (function bodies and the
nested blocks inline assembly makes; braces inside a statement are a vector operand).
``.version``, ``.target`` and ``.address_size`` end at the end of their line, as do the
``.file`` and ``.loc`` debug directives; ``.section`` debug sections are brace-delimited
data. Debug information carries no semantics and is dropped here. Every statement
keeps its first line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tessera.errors import IRParseError, Loc, UnsupportedError

_LABEL = re.compile(r"^\s*([A-Za-z_$%.][\w$.]*)\s*:(?!:)")
_LINE_DIRECTIVE = re.compile(r"^\s*\.(file|loc)\b")
_LABELS = re.compile(r"^\s*([A-Za-z_$][\w$.]*\s*:(?!:)\s*)*$")
_DEBUG = re.compile(r"\.(file|loc)\b")
_HEADER_END = re.compile(r"\)\s*(\.\w+[\s\d,]*)*$")  # ") .maxntid 128, 1, 1" before a body
_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b")


class PtxSyntaxError(IRParseError):
    """PTX text that does not parse: names the file, line and statement."""

    kind = "PTX syntax error"


class PtxUnsupportedError(UnsupportedError):
    """A PTX instruction, modifier or directive the reader does not model (it is never
    skipped silently): names the file, line and instruction."""

    kind = "unsupported PTX"


@dataclass(frozen=True)
class Statement:
    """One statement: its text (no ``;``), kind (``stmt``, ``label``, ``open``,
    ``close``) and location."""

    text: str
    kind: str
    loc: Loc


def _strip_comments(text: str) -> list[str]:
    """Lines of ``text`` with comments blanked (line structure kept)."""
    out, i, n = [], 0, len(text)
    buf: list[str] = []
    in_block = False
    while i < n:
        ch = text[i]
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
                continue
            if ch == "\n":
                buf.append("\n")
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if ch == '"':  # strings appear only in .file directives
            j = text.find('"', i + 1)
            j = n - 1 if j < 0 else j
            buf.append(text[i:j + 1])
            i = j + 1
            continue
        buf.append(ch)
        i += 1
    out = "".join(buf).split("\n")
    return out


def statements(text: str, file: str) -> list[Statement]:
    """The statements of PTX ``text`` read from ``file``."""
    lines = _strip_comments(text)
    result: list[Statement] = []
    buf: list[str] = []
    start = 0
    section_depth = -1  # brace depth of a .section being skipped
    depth = 0
    inner = 0  # braces open inside the current statement
    for number, line in enumerate(lines, start=1):
        if not buf and _LINE_DIRECTIVE.match(line):
            continue
        if not buf and section_depth < 0 and _HEADER.match(line):
            result.append(Statement(line.strip().rstrip(";"), "stmt", Loc(file, number)))
            continue
        if not buf and section_depth < 0 and line.strip().startswith(".section"):
            section_depth = depth
            if "{" not in line:
                continue
        for col, ch in enumerate(line):
            if section_depth >= 0:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == section_depth:
                        section_depth = -1
                continue
            if ch == "{" and buf and not _LABELS.match(text := "".join(buf)) and \
                    not _HEADER_END.search(text):
                inner += 1  # a vector operand {%r1, %r2}, not a scope (nor "L: {")
            elif ch == "}" and inner:
                inner -= 1
            elif ch in ";{}":
                stmt = "".join(buf).strip()
                if stmt:
                    result.extend(_with_labels(stmt, Loc(file, start or number)))
                buf, start, inner = [], 0, 0
                if ch == "{":
                    depth += 1
                    result.append(Statement("{", "open", Loc(file, number)))
                elif ch == "}":
                    depth -= 1
                    result.append(Statement("}", "close", Loc(file, number)))
                continue
            if not buf and ch.isspace():
                continue
            if ch == "." and (not buf or _LABELS.match("".join(buf))) and \
                    _DEBUG.match(line, col):
                break  # .loc / .file run to the end of the line (after labels, too)
            if not buf:
                start = number
            buf.append(ch)
        if buf and _LABELS.match(text := "".join(buf)):
            # labels alone on their line: the statement below keeps its own line number
            result.extend(_with_labels(text.strip(), Loc(file, start or number)))
            buf, start = [], 0
        elif buf:
            buf.append(" ")
    rest = "".join(buf).strip()
    if rest:
        result.extend(_with_labels(rest, Loc(file, start)))
    return result


def _with_labels(stmt: str, loc: Loc) -> list[Statement]:
    """Split leading ``label:`` prefixes off a statement."""
    out = []
    while True:
        m = _LABEL.match(stmt)
        if not m or m.group(1).startswith("."):
            break
        out.append(Statement(m.group(1), "label", loc))
        stmt = stmt[m.end():].strip()
    if stmt:
        out.append(Statement(" ".join(stmt.split()), "stmt", loc))
    return out


def split_operands(text: str, loc: Loc) -> list[str]:
    """Operands separated by top-level commas (``{a, b}`` and ``[a, {b}]`` stay whole)."""
    parts, depth, buf = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth < 0:
                raise PtxSyntaxError(f"unbalanced {ch!r} in operands {text!r}", loc=loc)
        if ch == "," and depth == 0:
            parts.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    if depth:
        raise PtxSyntaxError(f"unbalanced brackets in operands {text!r}", loc=loc)
    last = "".join(buf).strip()
    if last or parts:
        parts.append(last)
    if any(not p for p in parts):
        raise PtxSyntaxError(f"empty operand in {text!r}", loc=loc)
    return parts


_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uU]?$")
_FLOAT_HEX = re.compile(r"^[-+]?0[fFdD][0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


def parse_int(token: str) -> int | None:
    """A PTX integer literal (decimal, hex, octal, binary; ``U`` suffix), or None."""
    t = token.strip()
    if not _INT.match(t):
        return None
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("+-").rstrip("uU")
    if t[:2] in ("0x", "0X"):
        return sign * int(t[2:], 16)
    if t[:2] in ("0b", "0B"):
        return sign * int(t[2:], 2)
    if len(t) > 1 and t.startswith("0"):
        return sign * int(t[1:], 8)
    return sign * int(t)


def parse_float_bits(token: str) -> tuple[int, int] | None:
    """``0fXXXXXXXX`` / ``0dXXXXXXXXXXXXXXXX`` as (bits, width), or None."""
    t = token.strip()
    if not _FLOAT_HEX.match(t):
        return None
    neg = t.startswith("-")
    t = t.lstrip("+-")
    width = 32 if t[1] in "fF" else 64
    bits = int(t[2:], 16)
    if neg:
        bits ^= 1 << (width - 1)
    return bits, width


def is_decimal_float(token: str) -> bool:
    """Whether ``token`` is a decimal floating-point literal such as ``1.0``."""
    return bool(_FLOAT.match(token.strip())) and parse_int(token) is None


__all__ = ["PtxSyntaxError", "PtxUnsupportedError", "Statement", "is_decimal_float",
           "parse_float_bits", "parse_int", "split_operands", "statements"]
