"""The fast paths of the tile simulator: one registry, one switch each.

The reference rules (:mod:`tessera.interp.tile.reference`) define what a kernel does;
a fast path gives the same bits and the same sanitizer reports with less work. Each is
registered here by name with the proof of that equivalence (its docstring) and is
compiled into a kernel only while it is enabled: ``mode="reference"`` compiles none of
them, ``mode="checked"`` and ``mode="fast"`` every enabled one.

A fast path either wraps the reference step of one op (``ops``: its factory receives
the compiler, the instruction and the reference step, and returns the step to run, or
None to keep the reference step), or is consulted by the compiler itself (no ``ops``:
fusions, remembered coordinate results). ``taken`` counts the times it replaced the
reference computation (per run for loops and loads, per compiled op otherwise).

    with fastpaths.disabled("tree_sum"):
        kernel(...)                 # compiled and run without the tree fast path
    fastpaths.enabled()             # the names now on

Not fast paths, and so not switched: caches of pure functions of read-only inputs
(access plans, compacted contexts, the roots of a launch geometry, an ``mma`` operand's
float64 copy), which return what the computation would make; registers cleared after
their last use; and the numerics library's own shortcuts, each proven and tested
where it is defined (:mod:`tessera.numerics.treesum`, :mod:`tessera.numerics.transcendental`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tessera.errors import ArgumentError


@dataclass
class FastPath:
    """One fast path: its name, the proof of its equivalence with the reference, the op
    classes whose steps it wraps (none: the compiler consults it) and its factory."""

    name: str
    proof: str
    ops: tuple[type, ...]
    factory: Callable[..., Any] | None
    module: str
    taken: int = 0
    #: fast paths this one runs inside of (``only`` enables them with it)
    needs: tuple[str, ...] = ()


#: name -> fast path, in the order the compiler applies them (later ones wrap earlier)
REGISTRY: dict[str, FastPath] = {}
#: the modules that register fast paths (imported by :func:`load`)
MODULES = ("loops", "deferred", "staged", "first", "sum", "tree", "memo", "branches", "access",
           "fusion")
_OFF: set[str] = set()
_off: frozenset[str] = frozenset()  # the disabled names (a compiled kernel's cache key)
_on: frozenset[str] | None = None  # the enabled names, while no switch changes
_WRAPPERS: dict[frozenset[str], dict[type, list[FastPath]]] = {}


def register(name: str, *ops: type, needs: tuple[str, ...] = ()
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated factory as fast path ``name``; its docstring is the proof
    of equivalence. Without ``ops`` the decorated function only carries the proof;
    ``needs`` names the fast paths that consult this one."""
    def add(factory: Callable[..., Any]) -> Callable[..., Any]:
        global _on
        if not (factory.__doc__ or "").strip():
            raise TypeError(f"fast path {name!r} needs a docstring proving its equivalence")
        REGISTRY[name] = FastPath(name, factory.__doc__ or "", ops, factory if ops else None,
                                  factory.__module__.rsplit(".", 1)[-1], needs=needs)
        _on = None
        _WRAPPERS.clear()
        return factory
    return add


def load() -> dict[str, FastPath]:
    """Import every fast-path module (registering them) and return the registry."""
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY


def enabled() -> frozenset[str]:
    """The names of the fast paths now enabled (what a compile now takes)."""
    global _on
    if _on is None:
        _on = frozenset(REGISTRY) - _OFF
    return _on


def off() -> frozenset[str]:
    """The names of the fast paths now disabled (empty unless a switch is in effect):
    kernels cache their compiled programs per mode and this set."""
    return _off


def wrappers(names: frozenset[str]) -> dict[type, list[FastPath]]:
    """Op class -> the fast paths among ``names`` that wrap its steps, innermost first
    (in the order of :data:`MODULES`: a loop's counted trips under its deferred K
    loop under its strided sum)."""
    found = _WRAPPERS.get(names)
    if found is None:
        found = {}
        order = sorted((p for p in REGISTRY.values() if p.name in names and p.ops),
                       key=lambda p: MODULES.index(p.module))
        for p in order:
            for op in p.ops:
                found.setdefault(op, []).append(p)
        _WRAPPERS[names] = found
    return found


def path(name: str) -> FastPath:
    """The registered fast path ``name``."""
    load()
    if name not in REGISTRY:
        raise ArgumentError(f"unknown fast path {name!r}",
                            hint=f"registered: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


@contextmanager
def disabled(*names: str) -> Iterator[None]:
    """Compile and run without the named fast paths inside the ``with`` block, besides
    those already off. Compiled kernels are cached per set of disabled fast paths, so a
    kernel compiled before is compiled again here."""
    with _switched(_OFF | {path(n).name for n in names}):
        yield


@contextmanager
def only(*names: str) -> Iterator[None]:
    """Compile and run with exactly the named fast paths enabled inside the ``with``
    block, with the fast paths they run inside of (none: the reference's steps, in
    checked or fast mode's schedules)."""
    keep = {path(n).name for n in names}
    keep |= {need for n in keep for need in REGISTRY[n].needs}
    with _switched({n for n in load() if n not in keep}):
        yield


@contextmanager
def _switched(off_now: set[str]) -> Iterator[None]:
    global _on, _off
    before = set(_OFF)
    _OFF.clear()
    _OFF.update(off_now)
    _on, _off = None, frozenset(_OFF)
    try:
        yield
    finally:
        _OFF.clear()
        _OFF.update(before)
        _on, _off = None, frozenset(_OFF)


__all__ = ["MODULES", "REGISTRY", "FastPath", "disabled", "enabled", "load", "off", "only",
           "path", "register", "wrappers"]
