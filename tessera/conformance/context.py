"""How a case runs its program on the backend under test.

* ``interp``: graph functions in the graph interpreter, kernels in the tile simulator
  (the definition).
* ``tile``: graph functions compiled to tile kernels (``ts.jit(f, backend="tile")``);
  a program the generator refuses is a skip with its reason. Kernels run in the tile
  simulator.
* ``target``: kernels lowered to Target IR and run by its interpreter, which must give
  the tile simulator's bits (``ts.check_against_reference(..., backend="target")``).
* ``cuda``: kernels launched on a GPU and compared with the simulator
  (``ts.check_against_reference(..., backend="cuda")``); without a GPU, a skip.

Every case then checks the simulator's (or graph interpreter's) result against its
own independent reference, so a backend case checks both agreements.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from tessera.conformance.registry import Skip
from tessera.errors import UnsupportedError


@cache
def gpu() -> tuple[bool, str]:
    """Whether a CUDA GPU can be used, and if not why (asked once per process)."""
    from tessera.backend.ptx.driver.launch import cuda_available

    return cuda_available()


@dataclass(frozen=True)
class Context:
    """The backend a case runs on, with the two ways a case runs a program."""

    backend: str = "interp"

    def graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a graph function (plain Python over ``ts.*`` ops) traced with ``ts.jit``
        on this backend; its result as returned by the function."""
        import tessera as ts

        if self.backend == "interp":
            return ts.jit(fn)(*args, **kwargs)
        if self.backend != "tile":
            raise Skip(f"graph programs do not run on backend {self.backend!r} "
                       "(kernel cases do)")
        try:
            return ts.jit(fn, backend="tile")(*args, **kwargs)
        except UnsupportedError as err:
            raise Skip(f"not compiled to tile kernels: {_first_line(err)}") from None

    def launch(self, kernel: Any, *args: Any, **launch: Any) -> Any:
        """Launch a ``@ts.kernel`` in the tile simulator (arrays are written in place, as
        on a GPU) after checking the backend under test gives the simulator's result on
        copies of the arguments."""
        import tessera as ts
        from tessera.backend.ptx.driver.assemble import ToolchainMissing

        if self.backend in ("target", "cuda"):
            if self.backend == "cuda":
                _usable_gpu()
            try:
                ts.check_against_reference(kernel, *copy.deepcopy(args),
                                           backend=self.backend, **launch)
            except UnsupportedError as err:
                raise Skip(f"not lowered to {self.backend}: {_first_line(err)}") from None
            except ToolchainMissing as err:
                raise Skip(f"no PTX toolchain: {_first_line(err)}") from None
            except Exception as err:
                if self.backend == "cuda" and "CUDA_ERROR_" in str(err):
                    _LOST.append(_first_line(err))  # a sticky error ends the context
                raise
        return kernel(*args, **launch)

    def rule(self) -> None:
        """Mark a case as a rule of the definition: it runs on ``interp`` only."""
        if self.backend != "interp":
            raise Skip("a rule of the definition: checked on backend 'interp'")


#: the first CUDA error of this process: after it the context is unusable, so the
#: remaining cuda cases are skipped with it as the reason instead of failing in cascade
_LOST: list[str] = []


def _usable_gpu() -> None:
    """Skip when there is no GPU, or when an earlier case lost the CUDA context."""
    if not gpu()[0]:
        raise Skip(f"no GPU: {gpu()[1]}")
    if _LOST:
        raise Skip(f"the CUDA context was lost by an earlier case: {_LOST[0]}")


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


__all__ = ["Context", "gpu"]
