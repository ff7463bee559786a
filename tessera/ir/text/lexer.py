"""The tokens of IR text and the leaves of its grammar: types and attribute values.

:class:`Lexer` reads the text one token at a time and knows the line it is on, so every
error names it; the :class:`~tessera.ir.text.parser.Parser` builds the structure on
top of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import IRParseError, Loc
from tessera.ir.core import Type
from tessera.ir.types import Dense, parse_element, parse_tensor_type

#: type keyword -> parser of the text between the angle brackets; dialects add theirs
TYPE_PARSERS: dict[str, Callable[[str], Type]] = {"tensor": parse_tensor_type}

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<value>%[\w$.]+)
  | (?P<symbol>@[\w$.]+)
  | (?P<element>\#[\w.]+(?:@\w+(?:\([^)]*\))?)*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<arrow>->)
  | (?P<number>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)|-?inf\b|nan\b)
  | (?P<word>\^?[A-Za-z_][\w.]*)
  | (?P<punct>[(){}\[\],:=<>!])
""", re.VERBOSE)


class Lexer:
    """The token stream of one text, with the types and attribute values read from it."""

    def __init__(self, text: str, file: str = "<ir>") -> None:
        self.text = text
        self.file = file
        self.pos = 0

    def _line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def error(self, message: str) -> IRParseError:
        return IRParseError(message, loc=Loc(self.file, self._line()),
                            hint="compare with the output of the IR printer")

    def _skip(self) -> None:
        while True:
            m = _TOKEN.match(self.text, self.pos)
            if m is None or m.lastgroup != "ws":
                return
            self.pos = m.end()

    def peek(self) -> tuple[str, str]:
        self._skip()
        if self.pos >= len(self.text):
            return "eof", ""
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            raise self.error(f"unexpected character {self.text[self.pos]!r}")
        return m.lastgroup or "", m.group()

    def next(self) -> tuple[str, str]:
        kind, tok = self.peek()
        self.pos += len(tok)
        return kind, tok

    def expect(self, tok: str) -> None:
        _, got = self.next()
        if got != tok:
            raise self.error(f"expected {tok!r}, found {got or 'end of text'!r}")

    def accept(self, tok: str) -> bool:
        if self.peek()[1] == tok:
            self.next()
            return True
        return False

    # -- types and attributes
    def type(self) -> Type:
        kind, word = self.next()
        if word == "!":
            kind, word = self.next()
        if kind != "word" or word not in TYPE_PARSERS:
            raise self.error(f"expected a type, found {word!r}")
        self._skip()
        if self.text[self.pos] != "<":
            raise self.error("expected '<' after the type keyword")
        depth, start = 0, self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            depth += ch == "<"
            depth -= ch == ">"
            self.pos += 1
            if depth == 0:
                break
        try:
            return TYPE_PARSERS[word](self.text[start + 1:self.pos - 1])
        except IRParseError as err:
            raise self.error(err.message) from None

    def attr(self) -> Any:
        kind, tok = self.peek()
        if kind == "number":
            self.next()
            return float(tok) if any(c in tok for c in ".eEn") else int(tok)
        if kind == "string":
            self.next()
            return json.loads(tok)
        if kind == "element":
            self.next()
            return parse_element(tok[1:])
        if tok == "[":
            self.next()
            items: list[Any] = []
            while not self.accept("]"):
                items.append(self.attr())
                self.accept(",")
            return tuple(items)
        if tok == "!":
            return self.type()
        if tok in ("true", "false", "none"):
            self.next()
            return {"true": True, "false": False, "none": None}[tok]
        if tok == "c":
            self.next()
            self.expect("(")
            re_, _, im = self.attr(), self.expect(","), self.attr()
            self.expect(")")
            return complex(re_, im)
        if tok == "dense":
            self.next()
            self.expect("<")
            if self.accept("splat"):  # dense<splat VALUE, [SHAPE]>: one value repeated
                value = self.attr()
                self.expect(",")
                shape = self.attr()
                self.expect(">")
                return Dense(np.full(tuple(shape), value))
            data = self.attr()
            self.expect(">")
            return Dense(np.array(data))
        raise self.error(f"expected an attribute value, found {tok!r}")

    def attr_dict(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if self.accept("{"):
            while not self.accept("}"):
                _, key = self.next()
                self.expect("=")
                attrs[key] = self.attr()
                self.accept(",")
        return attrs
