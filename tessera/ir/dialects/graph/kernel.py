"""``graph.kernel_call``: a hand-written tile kernel (``@ts.kernel``) called from a graph
function, as ``pallas_call`` is called from a ``jax.jit`` function.

The op's region is the kernel's specialised Tile IR body (the ``tile.kernel``
function its launch would run), its attributes the launch: ``kernel`` (the function's
name), ``grid``, ``group_size``, ``batch``, ``tile_shape`` and ``config``. The
kernel's parameters are the region's arguments, in order: each is an operand of the
op, except the parameters listed in ``fresh`` (the ``out_shape=`` outputs), which
are new zero-filled buffers. The op's results are listed in ``results``: for each, the
parameter whose contents after the launch it is, or ``-1`` for the tile the kernel
returns (its shape and element come from the kernel's result annotation).

The call is a pure function of its operands: the kernel runs on copies of them, so a
kernel that writes an argument in place gives its new contents as a result and the
graph's value is untouched.

    %0 = graph.kernel_call(%x) {kernel = "add_one", grid = [8], results = [1],
                                fresh = [1]} (
      ^bb(%x: gmem<8xf32>, %y: gmem<8xf32>) {
        ...
        tile.return() : () -> ()
      }
    ) : (tensor<8xf32>) -> tensor<8xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Block, Function, Instr, Op, Type, register_op
from tessera.ir.dialects.graph import tensor
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: ``results`` entry of the tile a kernel returns
RETURNED = -1


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


@register_op
@dataclass(frozen=True)
class KernelCall(Op):
    """A launch of a tile kernel inside a graph function (see the module docstring)."""

    name: ClassVar[str] = "graph.kernel_call"
    num_regions: ClassVar[int] = 1
    kernel: str
    grid: tuple[int, ...]
    group_size: int = 1
    batch: int = 1
    tile_shape: tuple[int, ...] = ()
    config: tuple[tuple[str, Any], ...] = ()
    results: tuple[int, ...] = ()
    fresh: tuple[int, ...] = ()
    result_batched: bool = False

    def __post_init__(self) -> None:
        for field_ in ("grid", "tile_shape", "results", "fresh"):
            object.__setattr__(self, field_, _ints(getattr(self, field_)))
        object.__setattr__(self, "config", tuple((str(k), v) for k, v in self.config))

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError("graph.kernel_call takes its result types from the kernel",
                            hint="give result_types when building it")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        for t in operands:
            tensor(t, self)
        if len(results) != len(self.results):
            raise IRVerifyError(f"graph.kernel_call @{self.kernel} lists {len(self.results)} "
                                f"results but has {len(results)}")
        if not self.grid or any(g < 1 for g in self.grid) or self.group_size < 1 or \
                self.batch < 1:
            raise IRVerifyError(f"graph.kernel_call @{self.kernel}: grid {list(self.grid)}, "
                                f"group_size {self.group_size} and batch {self.batch} must "
                                "be positive")

    def verify_regions(self, instr: Instr) -> None:
        block = instr.regions[0].block
        params = [a.type for a in block.args]
        if len(params) != len(instr.operands) + len(self.fresh) or \
                any(not 0 <= p < len(params) for p in self.fresh):
            raise IRVerifyError(f"graph.kernel_call @{self.kernel}: {len(params)} kernel "
                                f"parameters for {len(instr.operands)} operands and "
                                f"{len(self.fresh)} fresh outputs")
        operands = iter(instr.operands)
        for k, p in enumerate(params):
            if k in self.fresh:
                if not _is_memory(p):
                    raise IRVerifyError(f"graph.kernel_call @{self.kernel}: fresh output "
                                        f"parameter {k} is {p}, not global memory")
                continue
            _match(self, f"operand for parameter {k}", next(operands).type, p)
        term = block.terminator
        returned = term.operands[0].type if term is not None and term.operands else None
        for r, p in zip(instr.results, self.results):
            if p == RETURNED:
                if returned is None or graph_type(returned) is not None:
                    raise IRVerifyError(f"graph.kernel_call @{self.kernel}: a result is the "
                                        "returned tile, but the kernel returns none")
                continue
            if not 0 <= p < len(params) or not _is_memory(params[p]):
                raise IRVerifyError(f"graph.kernel_call @{self.kernel}: result parameter "
                                    f"{p} is not a tensor parameter")
            _match(self, f"result for parameter {p}", r.type, params[p])

    def tile_function(self, block: Block, returned: TensorType | None = None) -> Function:
        """The ``tile.kernel`` function the launch runs: ``block`` (the op's region)
        with the launch's attributes, as ``@ts.kernel`` compiles it; ``returned`` is
        the type of the returned tile's result, if the kernel returns one."""
        from tessera.ir.dialects.tile import KERNEL

        attrs: dict[str, Any] = {"grid": self.grid, "group_size": self.group_size,
                                 "tile_shape": self.tile_shape}
        if self.batch > 1:
            attrs["batch"] = self.batch
        if self.config:
            attrs["config"] = self.config
        if returned is not None:
            attrs.update(result_shape=tuple(returned.shape), result_element=returned.element,
                         result_batched=self.result_batched)
        term = block.terminator
        types = [v.type for v in term.operands] if term is not None else []
        return Function(self.kernel, block, types, kind=KERNEL, attrs=attrs)


def graph_type(t: Type) -> TensorType | None:
    """The graph tensor type a kernel parameter of type ``t`` takes (the batch dim
    leading), or None for a type that is not a parameter's."""
    from tessera.ir.dialects.tile import MemRefType

    if isinstance(t, MemRefType) and t.space == "global":
        shape = (t.batch, *t.shape) if t.batch else t.shape
        return TensorType(tuple(shape), t.element)
    if isinstance(t, TensorType) and t.rank == 0:
        return t
    return None


def _is_memory(t: Type) -> bool:
    from tessera.ir.dialects.tile import MemRefType

    return isinstance(t, MemRefType) and t.space == "global"


def _match(op: KernelCall, what: str, have: Type, param: Type) -> None:
    want = graph_type(param)
    if want is None or not isinstance(have, TensorType) or \
            tuple(have.shape) != tuple(want.shape) or \
            storage_of(have.element) != storage_of(want.element):
        raise IRVerifyError(f"graph.kernel_call @{op.kernel}: {what} is {have}, the kernel "
                            f"takes {param}")


def tile_function(instr: Instr) -> Function:
    """The ``tile.kernel`` function of a ``graph.kernel_call`` instruction."""
    op = instr.op
    assert isinstance(op, KernelCall)
    returned = None
    if RETURNED in op.results:
        returned = instr.results[op.results.index(RETURNED)].type
        assert isinstance(returned, TensorType)
    return op.tile_function(instr.regions[0].block, returned)


__all__ = ["RETURNED", "KernelCall", "graph_type", "tile_function"]
