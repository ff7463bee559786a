"""A kernel's configuration (``config=`` at launch, or an autotune space's entries):
every key is a lowering option, a tile extent or a name the kernel reads.

A key is one of

* a **lowering option** of the PTX backends (:data:`OPTIONS`; docs/ptx-backend.md says
  what each does), whose value is checked here, before anything is compiled: a knob
  given a value of the wrong kind (``warp_specialize="yes"``, ``tma_store=3``) would
  otherwise be read as true or false by whichever lowering looks at it. None means
  the default, and the option is dropped (``warp_specialize=None`` is not False);
* a **tile extent** (``BLOCK_M``/``BM`` and N, K), checked with the tile shape
  (:func:`tessera.frontend.kernel.grid.tile_of`);
* a **name the kernel reads** as an attribute, ``ts.tile.context().WIDTH`` (in its body
  or a helper it inlines), as Triton's meta-parameters are.

Anything else is a mistake (``numwarps`` for ``num_warps``) that would change nothing
at all, so it is an :class:`ArgumentError` naming the key and the nearest option. The
interpreter ignores the lowering options (they change how a GPU runs the kernel, not
its result), but checks them the same way, so that a configuration that runs on the
CPU also compiles.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import ArgumentError
from tessera.frontend.kernel.compiler.scope import EXTENTS


@dataclass(frozen=True)
class Option:
    """A lowering option: what it takes, in words, and the test of a value."""

    takes: str
    ok: Callable[[Any], bool]


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= low


def _one_of(*allowed: Any) -> Callable[[Any], bool]:
    # ``1 == True``: a value matches an allowed one of its own type only
    return lambda v: any(type(v) is type(a) and v == a for a in allowed)


_FLAG = Option("True or False", lambda v: isinstance(v, bool | np.bool_))

#: the PTX backends' options (docs/ptx-backend.md has what each changes)
OPTIONS: dict[str, Option] = {
    "num_warps": Option("an int >= 1 (4, 8 or 12 on sm_90a)", _int_at_least(1)),
    "num_stages": Option("an int >= 1", _int_at_least(1)),
    "warp_specialize": _FLAG,
    "schedule": Option("'cooperative' or 'pingpong'", _one_of("cooperative", "pingpong")),
    "tma_store": _FLAG,
    "group_m": Option("an int >= 1 (1 keeps C order)", _int_at_least(1)),
    "persistent": _FLAG,
    "defer_pv": Option("True, False or 'fa3'", _one_of(True, False, "fa3")),
    "unroll": Option("1 or 2", _one_of(1, 2)),
    "register_a": _FLAG,
    "overlap_softmax": _FLAG,
}


def check_config(kernel: str, reads: frozenset[str], config: dict[str, Any]
                 ) -> dict[str, Any]:
    """``config`` without the options set to None (which means the default, as leaving
    them out does); an :class:`ArgumentError` for a key that is not an option, a tile
    extent or one of ``reads`` (the attribute names kernel ``kernel`` reads), or an
    option's value of the wrong kind."""
    for key, value in config.items():
        option = OPTIONS.get(key) if isinstance(key, str) else None
        if option is not None:
            if value is not None and not option.ok(value):
                raise ArgumentError(f"configuration value {key}={value!r} should be "
                                    f"{option.takes}", hint=f"give {key} {option.takes}")
        elif key not in EXTENTS and key not in reads:
            raise ArgumentError(
                f"configuration key {key!r} of kernel '{kernel}' is neither a lowering "
                f"option nor a tile extent, and the kernel never reads "
                f"ts.tile.context().{key}: it would change nothing", hint=_nearest(key))
    return {k: v for k, v in config.items() if v is not None or k not in OPTIONS}


def _nearest(key: Any) -> str:
    names = [*OPTIONS, *EXTENTS]
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return ("the options are " + ", ".join(OPTIONS) + "; the tile extents BLOCK_M, BLOCK_N, "
            "BLOCK_K (or BM, BN, BK); any other value reaches the body as "
            "ts.tile.context().NAME")


__all__ = ["OPTIONS", "Option", "check_config"]
