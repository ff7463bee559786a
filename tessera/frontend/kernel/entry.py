"""``@ts.kernel``: tile kernels compiled from their Python source to Tile IR and run by
the tile simulator.

Launch::

    saxpy(x, y, alpha)                            # default grid (see kernel_launch)
    gemm[(M // 64, N // 64)](A, B, C, tile_shape=(64, 64, 32))
    reduce(data, grid=1, group_size=128)

``grid`` counts tile groups (an int or a tuple of up to 3, like CUDA's grid of blocks;
grid axis 0 is ``tile_m``'s, 1 ``tile_n``'s, 2 ``tile_k``'s); ``group_size`` counts the
tiles of a group; ``linear_id = group_id * group_size + local_id``. ``tile_shape=(BM,
BN, BK)`` sets the tile names (default ``(64, 64, 32)``, or the autotune config's
``BLOCK_M``/``BLOCK_N``/``BLOCK_K``). ``mode="checked"`` (default: exact numerics and
every sanitizer) or ``"fast"`` (float32 BLAS for ``mma``, sanitizers off: labelled
non-bitwise), at decoration or per launch; ``schedule="auto" | "vectorized" |
"sequential"`` (see :mod:`tessera.interp.tile`).

Every argument is checked before anything runs (:mod:`tessera.frontend.kernel.args`:
scalars that fit their format, CUDA's grid and block limits, the simulator's program
budget, writable outputs), each mistake a ``TesseraError`` at the caller's line.

NumPy arrays passed in are written in place (a converted array is copied back only
when the kernel writes it). Results: a returned parameter is that
array after all tiles; a returned tile is written into a fresh array shaped by the
result annotation, at the tile's output position; a returned scalar is tile 0's value.

Each specialisation (shapes, dtypes, constants, grid, group size, tile shape, config)
is compiled once and cached. ``kernel.inspect_ir("tile")`` (or ``ts.inspect_ir(kernel,
"tile")``) prints the Tile IR of the last launch, or of example arguments.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, StageError, user_api
from tessera.frontend.graph.trace import current_trace
from tessera.frontend.kernel.args import check_converted_overlap, check_writable
from tessera.frontend.kernel.compiler.compile import build_module
from tessera.frontend.kernel.memo import CallMemo
from tessera.frontend.kernel.specialise import KernelInfo, Prepared
from tessera.frontend.kernel.tuning.autotune import configurations
from tessera.frontend.kernel.tuning.search import Tuner
from tessera.interp.tile import SCHEDULES, LaunchGeometry, PreparedKernel, analyse, launch
from tessera.interp.tile import prepare as prepare_sim
from tessera.interp.tile.fastpaths import off as fastpaths_off
from tessera.ir.core import Module
from tessera.numerics import storage_of

MODES = ("checked", "fast", "reference")
STAGES = ("graph", "schedule", "tile", "target")


def finish_launch(prep: Prepared, result: Any, returned: str | None = None) -> Any:
    """The end of every backend's launch of a kernel call: arrays the call converted to
    their storage format are converted back into the caller's, and the call returns
    ``result`` (a fresh tile array or tile 0's scalar), or the caller's own argument
    named ``returned`` when the kernel returns that parameter (``result`` is then the
    array the launch wrote, the fallback when the caller's argument is missing)."""
    for original, converted in prep.writeback:
        original[...] = converted.astype(original.dtype)
    if returned is None:
        return result
    value = prep.params.get(returned)
    return value if value is not None else result


class Kernel:
    """A tile kernel: call it (or index it with a grid) to launch it."""

    def __init__(self, fn: Callable[..., Any], *, mode: str = "checked",
                 schedule: str = "auto", space: dict[str, list[Any]] | None = None,
                 name: str | None = None) -> None:
        functools.update_wrapper(self, fn)
        if mode not in MODES:
            raise ArgumentError(f"unknown kernel mode {mode!r}", hint=f"use one of {MODES}")
        self.fn = fn
        self.name = name or fn.__name__
        self.mode = mode
        self.schedule = schedule
        self.space = space
        self._info: KernelInfo | None = None
        self.modules: dict[Any, Module] = {}
        self.calls = CallMemo()
        self.programs: dict[Any, PreparedKernel] = {}
        #: per specialisation: the runtime arguments the kernel writes, and their names
        self.writes: dict[Any, tuple[frozenset[int], tuple[str, ...]]] = {}
        self.tuner = Tuner(self)
        self.last: Module | None = None
        self.last_config: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<tessera.kernel {self.name}>"

    @property
    def info(self) -> KernelInfo:
        """What the source says (read at the first launch, not at decoration)."""
        if self._info is None:
            self._info = KernelInfo.of(self.fn, self.name)
        return self._info

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        """``kernel[grid](*args, group_size=..., tile_shape=...)``."""
        return functools.partial(self.__call__, grid=grid)

    # -- specialisation
    def specialise(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Prepared,
                                                                                  Module]:
        launch_kw = {k: kwargs.pop(k) for k in ("grid", "group_size", "tile_shape", "config")
                     if k in kwargs}
        grid = launch_kw.get("grid")
        group_size = launch_kw.get("group_size", 1)
        tile_shape = launch_kw.get("tile_shape")
        config = dict(launch_kw.get("config") or {})
        if self.space and not config:
            config = self.tuner.choose(args, kwargs, grid, group_size, tile_shape)
        prep = self.calls.prepare(self.info, args, kwargs, grid=grid, group_size=group_size,
                                  tile_shape=tile_shape, config=config)
        module = self.modules.get(prep.key)
        if module is None:
            module = self.modules[prep.key] = build_module(self.fn, prep.spec)
        written, _ = self.written(prep.key, module)
        if prep.writeback:
            # only arrays the kernel writes are copied back: a converted input keeps
            # its own values (and may be read-only)
            keep = {id(prep.runtime[k]) for k in written}
            prep = dataclasses.replace(prep, writeback=[
                (orig, conv) for orig, conv in prep.writeback if id(conv) in keep])
        self.last = module
        self.last_config = config
        return prep, module

    def written(self, key: Any, module: Module) -> tuple[frozenset[int], tuple[str, ...]]:
        """Which runtime arguments of a specialisation the kernel writes, and the names
        of all of them (cached)."""
        found = self.writes.get(key)
        if found is None:
            fn = module.functions[self.name]
            found = self.writes[key] = (analyse(fn).written, tuple(a.hint for a in fn.args))
        return found

    @property
    def tuned(self) -> dict[Any, Any]:
        """The autotuner's results, per call signature."""
        return self.tuner.tuned

    def tuning_report(self) -> str:
        """The last autotuned signature: every valid configuration's estimate, fastest
        first, then every dropped configuration with the reason it was dropped."""
        return self.tuner.report()

    # -- launching
    @user_api
    def __call__(self, *args: Any, mode: str | None = None, schedule: str | None = None,
                 **kwargs: Any) -> Any:
        if current_trace() is not None:  # inside @ts.jit: a graph.kernel_call, not a launch
            from tessera.frontend.graph.kernel_call import call_kernel

            return call_kernel(self, args, kwargs)
        mode = mode or self.mode
        if mode not in MODES:
            raise ArgumentError(f"unknown kernel mode {mode!r}", hint=f"use one of {MODES}")
        schedule = schedule or self.schedule
        if schedule not in SCHEDULES:
            raise ArgumentError(f"unknown schedule {schedule!r}", hint=f"use one of {SCHEDULES}")
        prep, module = self.specialise(args, kwargs)
        fn = module.functions[self.name]
        fast = mode == "fast"
        if mode == "reference":  # the plain definition, group after group
            schedule = "sequential"
        key = (prep.key, mode, fastpaths_off())  # compiled with the fast paths now on
        compiled = self.programs.get(key)
        if compiled is None:
            compiled = self.programs[key] = prepare_sim(
                fn, fast, reference=mode == "reference")
        written, names = self.writes[prep.key]
        # the last argument checks; all of them are made before anything runs
        check_writable(self.name, names, prep.runtime, prep.writeback, written)
        check_converted_overlap(self.name, names, prep.runtime, prep.params, written)
        spec = prep.spec
        geom = LaunchGeometry(spec.batch, spec.grid, spec.group_size)
        output = None
        if "result_shape" in fn.attrs:  # the kernel returns a tile
            elem = fn.attrs["result_element"]
            output = np.zeros(tuple(fn.attrs["result_shape"]), storage_of(elem).np_dtype)
        out = launch(compiled, prep.runtime, geom, checked=not fast,
                     schedule=schedule, output=output,
                     output_element=fn.attrs.get("result_element"))
        if output is not None:
            return finish_launch(prep, output)
        if hasattr(out, "array") and hasattr(out, "name"):  # a returned parameter
            return finish_launch(prep, out.array, returned=out.name)
        return finish_launch(prep, out)

    @user_api
    def inspect_ir(self, stage: str = "tile", *args: Any, **kwargs: Any) -> str:
        """The Tile IR text of the last launch, or of these example arguments (launch
        keywords such as ``grid`` and ``tile_shape`` are accepted); stage ``"target"``
        is the kernel lowered for ``target=`` (``sm_90a`` by default) as Target IR."""
        if stage not in STAGES:
            raise StageError(f"unknown IR stage {stage!r}", hint=f"stages: {', '.join(STAGES)}")
        if stage == "target":
            from tessera.frontend.kernel.backends.compile import compile_kernel
            from tessera.ir.core import Module

            target = kwargs.pop("target", "sm_90a")
            mode = kwargs.pop("mode", None)  # the math of the lowering (default: the kernel's)
            if not args and not kwargs and self.last is None:
                raise StageError(f"kernel '{self.name}' has not been launched",
                                 hint="pass example arguments: inspect_ir('target', *args)")
            if not args and not kwargs:
                from tessera.frontend.kernel.backends.compile import gpu_mode, lower_and_render

                fn = lower_and_render(self.last.functions[self.name], target,
                                      gpu_mode(self, mode))[0]
            else:
                fn = compile_kernel(self, *args, target=target, mode=mode, **kwargs).kernel
            module = Module(self.name)
            module.add(fn)
            return str(module)
        if stage != "tile":
            raise StageError(f"kernels enter the stack at Tile IR and go down to Target IR; "
                             f"there is no {stage!r} stage for them",
                             hint="inspect stage 'tile' or 'target'")
        if args or kwargs:
            return str(self.specialise(args, dict(kwargs))[1])
        if self.last is None:
            raise StageError(f"kernel '{self.name}' has not been launched",
                             hint="launch it once, or pass example arguments: "
                                  "inspect_ir('tile', *args)")
        return str(self.last)

    def compile(self, *args: Any, **kwargs: Any) -> Module:
        """The Tile IR module of these arguments (compiled and cached, not run)."""
        return self.specialise(args, dict(kwargs))[1]


class _KernelDecorator:
    """``ts.kernel``: ``@ts.kernel``, ``@ts.kernel(mode="fast")`` and
    ``@ts.kernel.autotune(space=dict(BLOCK_M=[64, 128], ...))``."""

    @user_api
    def __call__(self, fn: Callable[..., Any] | None = None, *, mode: str = "checked",
                 schedule: str = "auto", name: str | None = None) -> Any:
        if fn is None:
            return lambda f: Kernel(f, mode=mode, schedule=schedule, name=name)
        if isinstance(fn, Kernel):
            return fn
        if not callable(fn):
            raise ArgumentError(f"@ts.kernel needs a function, got {type(fn).__name__}")
        return Kernel(fn, mode=mode, schedule=schedule, name=name)

    def autotune(self, space: dict[str, list[Any]], *, mode: str = "checked",
                 schedule: str = "auto") -> Callable[[Callable[..., Any]], Kernel]:
        """Pick ``space``'s configuration with the cost model of
        :mod:`tessera.frontend.kernel.tuning.autotune`; the values reach ``ts.tile.context()``."""
        if not isinstance(space, dict) or not space:
            raise ArgumentError("autotune(space=...) needs a dict of name -> list of values")
        configurations(space)

        def wrap(fn: Callable[..., Any]) -> Kernel:
            base = fn.fn if isinstance(fn, Kernel) else fn
            return Kernel(base, mode=mode, schedule=schedule, space=dict(space))
        return wrap

    def __repr__(self) -> str:
        return "<tessera.kernel decorator>"


kernel = _KernelDecorator()

__all__ = ["MODES", "Kernel", "finish_launch", "kernel"]
