"""The case registry: every conformance case, its specification reference and the
backends it applies to.

A case is a function of a :class:`Context` that raises ``AssertionError`` when Tessera
disagrees with an independent reference (NumPy float64, ``ml_dtypes``, ``Fraction``,
the written rules). Families are generated with :func:`register` in loops, one case
per format or operator, so each is its own line in the report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tessera.errors import ArgumentError

#: the backends a run can target, in the order of the stack
BACKENDS = ("interp", "tile", "target", "cuda")
#: the kinds of case and the backends each applies to by default
GRAPH = ("interp", "tile")
KERNEL = ("interp", "tile", "target", "cuda")
RULE = ("interp",)


class Skip(Exception):
    """Raised by a case (or its context) that does not apply here; the text says why."""


@dataclass(frozen=True)
class Case:
    """One conformance case: ``id`` (dotted, its area first), the specification
    reference ``spec`` (a document and section, or a ruling of docs/decisions.md), the
    check ``fn``, the ``backends`` it applies to, and ``xfail``: backends where it is a
    known failure, with the reason (a pass there is reported as a failure, so the entry
    is removed when the backend is fixed)."""

    id: str
    spec: str
    fn: Callable[..., None] = field(compare=False, repr=False)
    backends: tuple[str, ...] = RULE
    slow: bool = False
    doc: str = ""
    xfail: tuple[tuple[str, str], ...] = ()

    @property
    def area(self) -> str:
        """The area of the case: the first component of its id."""
        return self.id.split(".", 1)[0]


REGISTRY: dict[str, Case] = {}
_ID = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-+]+)+$")


def register(case_id: str, fn: Callable[..., None], *, spec: str,
             backends: tuple[str, ...] = RULE, slow: bool = False, doc: str = "",
             xfail: dict[str, str] | None = None) -> Case:
    """Add one case; ids are unique and dotted (``area.name...``)."""
    if not _ID.match(case_id):
        raise ValueError(f"conformance case id {case_id!r} is not dotted lower-case words")
    if case_id in REGISTRY:
        raise ValueError(f"conformance case {case_id!r} is registered twice")
    unknown = (set(backends) | set(xfail or {})) - set(BACKENDS)
    if unknown or not spec:
        raise ValueError(f"case {case_id!r}: unknown backends {unknown} or no spec reference")
    doc = doc or (fn.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    entry = Case(case_id, spec, fn, tuple(backends), slow, doc,
                 tuple(sorted((xfail or {}).items())))
    REGISTRY[case_id] = entry
    return entry


def case(case_id: str, *, spec: str, backends: tuple[str, ...] = RULE, slow: bool = False,
         xfail: dict[str, str] | None = None
         ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator form of :func:`register`: ``@case("tile.ids.linear", spec="...")``."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        register(case_id, fn, spec=spec, backends=backends, slow=slow, xfail=xfail)
        return fn

    return wrap


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS`, else an ArgumentError saying which."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown conformance backend {backend!r}",
                            hint=f"choose one of {', '.join(BACKENDS)}")
    return backend


_WORD = re.compile(r"\(|\)|[^\s()]+")


def matcher(pattern: str | None) -> Callable[[Case], bool]:
    """A ``-k`` expression as a predicate over cases, as pytest reads it: words match
    as substrings of a case's id (case-insensitive), combined with ``and``, ``or``,
    ``not`` and parentheses; ``-k numerics`` selects every numerics case."""
    if not pattern or not pattern.strip():
        return lambda _case: True
    words = _WORD.findall(pattern)
    code, names = [], {}
    for k, word in enumerate(words):
        if word in ("and", "or", "not", "(", ")"):
            code.append(word)
        else:
            names[f"w{k}"] = word.lower()
            code.append(f"(w{k} in id)")
    expr = " ".join(code)
    try:
        compiled = compile(expr, "<-k>", "eval")
        eval(compiled, {"__builtins__": {}}, {**names, "id": ""})
    except SyntaxError:
        raise ArgumentError(f"bad -k expression {pattern!r}",
                            hint="write words joined by and/or/not, e.g. "
                                 "'numerics and not fp4'") from None

    def match(entry: Case) -> bool:
        return bool(eval(compiled, {"__builtins__": {}}, {**names, "id": entry.id.lower()}))

    return match


def select(pattern: str | None = None, cases: Iterable[Case] | None = None) -> list[Case]:
    """The registered cases (all areas loaded) that ``pattern`` selects, in id order
    within areas and areas in the order they were registered."""
    from tessera.conformance.cases import load_all

    load_all()
    pool = list(REGISTRY.values()) if cases is None else list(cases)
    keep = matcher(pattern)
    return [c for c in pool if keep(c)]


__all__ = ["BACKENDS", "GRAPH", "KERNEL", "REGISTRY", "RULE", "Case", "Skip", "case",
           "check_backend", "matcher", "register", "select"]
