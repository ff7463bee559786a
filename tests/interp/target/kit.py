"""A small builder of Target IR kernels shared by the Target IR interpreter tests.

``Kernel`` wraps :class:`tessera.ir.core.Builder` with one method per instruction family
and builds the regions of ``ptx.if`` / ``ptx.for`` / ``ptx.while`` from Python callables.
This module holds no tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessera.errors import Loc
from tessera.ir.core import Block, Builder, Function, IRRegion, Op, Type, Value
from tessera.ir.dialects import target as target_ir
from tessera.ir.dialects.target import PRED, S32, U32, U64, RegType, async_ops
from tessera.ir.dialects.target import ops as target_ops


def reg(elem: str, count: int = 1) -> RegType:
    """``reg<elem>`` or ``reg<count x elem>``."""
    return RegType(elem, count)


class Kernel:
    """Builds one ``ptx.kernel`` function, appending at the innermost open region."""

    def __init__(self, name: str, params: Sequence[Type], *, block: Sequence[int] = (128,),
                 grid: Sequence[int] = (1, 1, 1), target: str = "sm_80") -> None:
        self.name = name
        self.body = Block()
        self.args = [self.body.add_arg(t, f"p{k}") for k, t in enumerate(params)]
        self.attrs = {"target": target, "block": list(block), "grid": list(grid)}
        self.stack = [Builder(self.body)]
        self.line = 0

    def op(self, op: Op, *operands: Value, types: Sequence[Type] | None = None,
           regions: Sequence[IRRegion] = ()) -> Any:
        """Append ``op``; return its one result, its results, or None."""
        self.line += 1
        res = self.stack[-1].create(op, list(operands), regions=regions, result_types=types,
                                    loc=Loc(f"<{self.name}>", self.line))
        return res[0] if len(res) == 1 else (res or None)

    # -- registers
    def sreg(self, name: str) -> Value:
        return self.op(target_ops.Special(name))

    def const(self, value: Any, elem: str) -> Value:
        return self.op(target_ops.Const(value, elem))

    def bin(self, op: str, elem: str, a: Value, b: Value, mode: str = "") -> Value:
        return self.op(target_ops.Binary(op, elem, mode), a, b)

    def un(self, op: str, elem: str, a: Value, mode: str = "") -> Value:
        return self.op(target_ops.Unary(op, elem, mode), a)

    def cvt(self, to: str, frm: str, *xs: Value, rnd: str = "", sat: str = "") -> Value:
        return self.op(target_ops.Cvt(to, frm, rnd, sat), *xs)

    def setp(self, cmp: str, elem: str, a: Value, b: Value) -> Value:
        return self.op(target_ops.Setp(cmp, elem), a, b)

    def selp(self, elem: str, a: Value, b: Value, p: Value) -> Value:
        return self.op(target_ops.Selp(elem), a, b, p)

    def fma(self, elem: str, a: Value, b: Value, c: Value) -> Value:
        return self.op(target_ops.Fma(elem), a, b, c)

    def pack(self, elem: str, *xs: Value) -> Value:
        return self.op(target_ops.Pack(elem), *xs)

    def unpack(self, elem: str, count: int, x: Value) -> list[Value]:
        res = self.op(target_ops.Unpack(elem, count), x)
        return res if isinstance(res, list) else [res]

    # -- addresses and memory
    def tid(self) -> Value:
        return self.sreg("tid.x")

    def gtid(self) -> Value:
        """``ctaid.x * ntid.x + tid.x`` (u32)."""
        cta = self.sreg("ctaid.x")
        return self.bin("add", "u32", self.bin("mul", "u32", cta, self.sreg("ntid.x")),
                        self.tid())

    def elem_addr(self, base: Value, index: Value, size: int) -> Value:
        """``base + index * size`` (u64 global address from a u32 index)."""
        off = self.bin("mul", "u32", index, self.const(size, "u32"), "wide")
        return self.bin("add", "u64", base, off)

    def sh_addr(self, base: Value, index: Value, size: int) -> Value:
        """``base + index * size`` (u32 shared address)."""
        return self.bin("add", "u32", base, self.bin("mul", "u32", index,
                                                     self.const(size, "u32")))

    def ld(self, space: str, elem: str, addr: Value, vec: int = 1, offset: int = 0) -> Value:
        return self.op(target_ops.Load(space, elem, vec, offset), addr)

    def st(self, space: str, elem: str, addr: Value, v: Value, vec: int = 1,
           offset: int = 0) -> None:
        self.op(target_ops.Store(space, elem, vec, offset), addr, v)

    def shared(self, sym: str, size: int, align: int = 16) -> Value:
        return self.op(target_ops.SharedAlloc(sym, size, align))

    def bar(self) -> None:
        self.op(target_ops.Bar())

    # -- structured control flow
    def _region(self, args: Sequence[Type], fn: Callable[..., Any], end: Op) -> IRRegion:
        block = Block()
        vals = [block.add_arg(t) for t in args]
        self.stack.append(Builder(block))
        out = fn(*vals)
        outs = [] if out is None else list(out) if isinstance(out, (list, tuple)) else [out]
        self.op(end, *outs)
        self.stack.pop()
        return IRRegion([block])

    def if_(self, p: Value, then: Callable[[], Any], other: Callable[[], Any] | None = None,
            types: Sequence[Type] = ()) -> Any:
        regions = [self._region([], then, target_ir.Yield()),
                   self._region([], other or (lambda: None), target_ir.Yield())]
        return self.op(target_ir.If(), p, types=list(types), regions=regions)

    def for_(self, lo: Value, hi: Value, step: Value, inits: Sequence[Value],
             body: Callable[..., Any]) -> Any:
        region = self._region([S32, *(v.type for v in inits)], body, target_ir.Yield())
        return self.op(target_ir.For(), lo, hi, step, *inits, regions=[region])

    def while_(self, inits: Sequence[Value], cond: Callable[..., Value],
               body: Callable[..., Any]) -> Any:
        types = [v.type for v in inits]
        regions = [self._region(types, cond, target_ir.Condition()),
                   self._region(types, body, target_ir.Yield())]
        return self.op(target_ir.While(), *inits, regions=regions)

    def build(self) -> Function:
        """The finished kernel (a ``ptx.ret`` is appended)."""
        self.stack[0].create(target_ir.Return(), [])
        return Function(self.name, self.body, [], target_ir.KERNEL, self.attrs)


def run_map(body: Callable[[Kernel, list[Value]], Value], inputs: Sequence[Any],
            types: Sequence[str], out: str, *, block: int = 64, target: str = "sm_80") -> Any:
    """Run ``out[i] = body(x0[i], x1[i], ...)`` with one thread per element: each input
    is loaded with ``ld.global.<type>``, the result stored with ``st.global.<out>``
    (``target``: an instruction that exists from sm_90 on needs ``"sm_90a"``)."""
    import numpy as np

    from tessera.interp.target import run_target
    from tessera.interp.target.state import DTYPES

    n = len(inputs[0])
    assert n % block == 0
    k = Kernel("map", [U64] * (len(inputs) + 1), block=(block,), grid=(n // block, 1, 1),
               target=target)
    i = k.gtid()
    xs = [k.ld("global", t, k.elem_addr(p, i, DTYPES[t].itemsize))
          for p, t in zip(k.args, types)]
    k.st("global", out, k.elem_addr(k.args[-1], i, DTYPES[out].itemsize), body(k, xs))
    result = np.zeros(n, DTYPES[out])
    run_target(k.build(), [np.ascontiguousarray(x, DTYPES[t]) for x, t in zip(inputs, types)]
               + [result])
    return result


__all__ = ["PRED", "S32", "U32", "U64", "Kernel", "async_ops", "reg", "run_map", "target_ops"]
