"""The autotuner of one ``@ts.kernel.autotune`` kernel: per call signature, compile every
configuration of the space for the call's shapes, drop the invalid ones (with the
reason), estimate the rest with the H100 cost model and keep the fastest.

The validity rules and the cost model are in :mod:`tessera.frontend.kernel.tuning.autotune`.
A signature whose every configuration is invalid is an :class:`AutotuneError` listing
each configuration's reason. Results are cached per signature (shapes, dtypes,
constants, grid, group size, tile shape); a call seen before finds its choice by the
same shape signature the call memo uses, without binding its arguments again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.errors import TesseraError
from tessera.frontend.kernel.compiler.compile import build_module
from tessera.frontend.kernel.config import check_config
from tessera.frontend.kernel.errors import AutotuneError
from tessera.frontend.kernel.memo import MEMO_SIZE, CallMemo
from tessera.frontend.kernel.specialise import Prepared, prepare
from tessera.frontend.kernel.tuning.autotune import (
    Estimate,
    check,
    choose,
    configurations,
    estimate,
)
from tessera.progress import progress

if TYPE_CHECKING:
    from tessera.frontend.kernel import Kernel


@dataclass
class Tuning:
    """The autotuner's result for one call signature."""

    call: str  # the arguments, as messages name them
    estimates: list[Estimate] = field(default_factory=list)  # valid, in space order
    dropped: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.estimates) + len(self.dropped)


def _describe(prep: Prepared, runtime: frozenset[str]) -> str:
    """The call's arrays (by shape) and constants, as messages name them."""
    parts = []
    for name, value in prep.params.items():
        arr = value.array if hasattr(value, "array") and not isinstance(value, np.ndarray) \
            else value
        if isinstance(arr, np.ndarray):
            parts.append(f"{name} of shape {arr.shape}")
        elif name not in runtime:
            parts.append(f"{name}={value!r}")
    return ", ".join(parts)


class Tuner:
    """Chooses, caches and reports the configurations of one kernel's calls."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.tuned: dict[Any, Tuning] = {}
        self.last: Tuning | None = None
        self._keys: dict[Any, Any] = {}  # shape signature -> key of ``tuned``

    def choose(self, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
               group_size: int, tile_shape: Any) -> dict[str, Any]:
        """The configuration for this call (tuned at its signature's first call)."""
        k = self.kernel
        sig = CallMemo._signature(k.info, args, kwargs, grid, group_size, tile_shape, {})
        key = self._keys.get(sig) if sig is not None else None
        if key is None or key not in self.tuned:
            # binding the arguments checks them, before any configuration is compiled
            base = prepare(k.info, args, dict(kwargs), grid=grid, group_size=group_size,
                           tile_shape=tile_shape, config={})
            key = (*base.key[:2], repr(grid), group_size, repr(tile_shape))
            if sig is not None:
                if len(self._keys) >= MEMO_SIZE:
                    self._keys.clear()
                self._keys[sig] = key
            if key not in self.tuned:
                self.tuned[key] = self._tune(base, args, kwargs, grid, group_size,
                                             tile_shape)
        tuning = self.last = self.tuned[key]
        if not tuning.estimates:
            rows = "\n".join(f"  {cfg}: {why}" for cfg, why in tuning.dropped)
            raise AutotuneError(
                f"no configuration of kernel '{k.name}' is valid for {tuning.call}:\n{rows}",
                hint="add configurations that fit (blocks that divide the dimensions they "
                     "tile, smaller tiles), pad the inputs to a multiple of a block, or "
                     "pass config={...} explicitly")
        return dict(choose(tuning.estimates).config)

    def _tune(self, base: Prepared, args: tuple[Any, ...], kwargs: dict[str, Any],
              grid: Any, group_size: int, tile_shape: Any) -> Tuning:
        k = self.kernel
        assert k.space is not None
        tuning = Tuning(_describe(base, k.info.runtime_names))
        for key, values in k.space.items():  # a mistake in the space, not a dropped entry
            for value in values:
                check_config(k.name, k.info.reads, {key: value})
        space = configurations(k.space)
        with progress(f"autotune {k.name}", len(space), unit="config") as bar:
            for cfg in space:
                self._try(tuning, cfg, args, kwargs, grid, group_size, tile_shape)
                bar.update(1)
        return tuning

    def _try(self, tuning: Tuning, cfg: dict[str, Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], grid: Any, group_size: int, tile_shape: Any) -> None:
        """Build ``cfg``'s kernel; record its estimate, or why it was dropped."""
        k = self.kernel
        try:
            p = prepare(k.info, args, dict(kwargs), grid=grid, group_size=group_size,
                        tile_shape=tile_shape, config=cfg)
            module = k.modules.get(p.key)
            if module is None:
                module = k.modules[p.key] = build_module(k.fn, p.spec)
        except TesseraError as err:  # a configuration the body cannot be built with
            tuning.dropped.append((cfg, f"does not compile for these arguments: "
                                        f"{err.loc}: {err.kind}: {err.message}"))
            return
        fn = module.functions[k.name]
        reasons = check(fn)
        if reasons:
            tuning.dropped.append((cfg, "; ".join(reasons)))
        else:
            tuning.estimates.append(estimate(fn, cfg))

    def report(self) -> str:
        """The last tuned signature: valid configurations' estimates, fastest first
        (``... us (model)``), then the dropped ones with their reasons."""
        if self.last is None:
            return "no autotuned launches yet"
        rows = [f"{dict(e.config)}: {e.seconds * 1e6:.2f} us (model)"
                for e in sorted(self.last.estimates, key=lambda e: e.seconds)]
        rows += [f"{cfg}: dropped: {why}" for cfg, why in self.last.dropped]
        return "\n".join(rows)


__all__ = ["Tuner", "Tuning"]
