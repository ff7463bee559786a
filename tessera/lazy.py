"""Module attributes loaded on first access (PEP 562).

``import tessera`` loads the front end, the IR and the interpreters; the mesh simulator
(with networkx) and the PTX backend (with the CUDA bindings) cost more to import than
all of that together, and most programs use neither. Their public names are listed in
a table instead of imported, and a module-level ``__getattr__`` imports the one module
that defines a name the first time the name is read::

    __getattr__, __dir__ = lazy.attach(__name__, globals(), {
        "mesh": ("tessera.dist.core.mesh", "mesh"),   # an attribute of a module
        "mpi": ("tessera.mesh_sim.mpi", None),       # a module itself
    })
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

#: a lazy name's source: the module that defines it, and the attribute (None: the module)
Source = tuple[str, "str | None"]


def attach(owner: str, namespace: MutableMapping[str, Any], table: Mapping[str, Source]
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of module ``owner`` (whose globals are
    ``namespace``) that load the names of ``table`` on first access.

    A loaded name is stored in ``namespace``, so later reads are plain attribute
    lookups. ``dir()`` lists the names not loaded yet too, so completion and
    ``from owner import *`` (through ``__all__``) see them.
    """

    def __getattr__(name: str) -> Any:
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {owner!r} has no attribute {name!r}") from None
        value = importlib.import_module(module)
        if attr is not None:
            value = getattr(value, attr)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    __getattr__.__doc__ = f"Load a lazy name of {owner} on first access (PEP 562)."
    __dir__.__doc__ = f"The names of {owner}, the ones not loaded yet included."
    return __getattr__, __dir__


def names(module: str, *attrs: str) -> dict[str, Source]:
    """Table entries for ``attrs``, all defined in ``module`` under the same names."""
    return {a: (module, a) for a in attrs}


__all__ = ["Source", "attach", "names"]
