"""One printer and one parser for every IR level.

The generic form of an instruction is::

    %3, %4 = dialect.op(%1, %2) {attr = value} ({ regions }) : (operand types) -> result types

Attributes equal to the op's defaults are not printed. ``print → parse → print`` is the
identity (tested), so every level can be dumped after any pass, edited, and read back.

* :mod:`.printer` -- ``print_module``, ``print_function`` and the text of attributes.
* :mod:`.lexer` -- the tokens of the text and the leaves of its grammar: types (through
  ``TYPE_PARSERS``, which dialects extend) and attribute values.
* :mod:`.parser` -- the recursive-descent parser of values, instructions, regions,
  functions and modules: ``parse_module``, ``parse_function``.
"""

from tessera.ir.text.lexer import TYPE_PARSERS, Lexer
from tessera.ir.text.parser import Parser, parse_function, parse_module
from tessera.ir.text.printer import Printer, attr_text, op_attr_text, print_function, print_module
from tessera.ir.types import Element

__all__ = ["TYPE_PARSERS", "Element", "Lexer", "Parser", "Printer", "attr_text",
           "op_attr_text", "parse_function", "parse_module", "print_function",
           "print_module"]
