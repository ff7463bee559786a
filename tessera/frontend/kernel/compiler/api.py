"""Lowering of ``ts.tile.*`` calls to Tile IR (one method per API name).

Argument rules: shapes (``zeros((BM, D))``, ``alloc_shared((64, 32), bf16)``), dtypes,
``swizzle``/``alignment``, ``width`` and ``cp_wait_group``'s count are compile-time
values; tiles and memory are kernel values (memory is loaded where a tile is needed).
``mma(a, b, accumulator=)`` takes the accumulation format (``accumulator=ts.f32``, the
default is the policy's accumulator of ``a``, f32 for bf16) or an accumulator tile to
add to (``mma(a, b, acc)`` = ``acc + a @ b``, accumulated as one chain).
``group_size()`` is a specialisation constant.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from tessera.frontend.kernel.compiler.build import BuilderBase, is_mem, is_tile, is_value, kind_of
from tessera.frontend.kernel.compiler.scope import TileContext
from tessera.ir.core import Value
from tessera.ir.dialects import tile as T
from tessera.ir.dialects.tile import BOOL, MemRefType
from tessera.ir.dialects.tile import compute as C
from tessera.ir.dialects.tile import memory as M
from tessera.ir.types import TensorType
from tessera.numerics import DType, Policy, PolicyClass, accum_of, dtype, element

_SWIZZLES = {None: "none", "none": "none", "xor": "xor", "32B": "32B", "64B": "64B",
             "128B": "128B"}


def _params(name: str, args: list[Any], kwargs: dict[str, Any], names: list[str],
            defaults: dict[str, Any]) -> dict[str, Any]:
    if len(args) > len(names):
        raise TypeError(f"ts.tile.{name}() takes at most {len(names)} arguments "
                        f"({', '.join(names)}), got {len(args)}")
    out = dict(defaults)
    out.update(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"ts.tile.{name}() has no argument {k!r}; it takes "
                            f"{', '.join(names)}")
        out[k] = v
    missing = [n for n in names if n not in out]
    if missing:
        raise TypeError(f"ts.tile.{name}() needs {', '.join(missing)}")
    return out


class ApiMixin(BuilderBase):
    """``ts.tile.*`` lowering (mixed into the kernel compiler)."""

    spec: Any
    SIGS: ClassVar[dict[str, tuple[list[str], dict[str, Any]]]] = {
        "alloc_shared": (["shape", "dtype", "swizzle", "alignment"],
                         {"dtype": None, "swizzle": None, "alignment": 16}),
        "alloc_register": (["dtype", "shape"], {"shape": ()}),
        "cp_async": (["dst", "src"], {}),
        "cp_wait_group": (["n"], {"n": 0}),
        "mma": (["a", "b", "accumulator"], {"accumulator": None}),
        "zeros": (["shape", "dtype"], {"dtype": None}),
        "full": (["shape", "value", "dtype"], {"dtype": None}),
        "maximum": (["a", "b"], {}), "minimum": (["a", "b"], {}),
        "where": (["cond", "a", "b"], {}),
        "causal_mask": (["scores", "q_start", "k_start"], {}),
        "cast": (["x", "dtype"], {}),
        "reduce_sum": (["x", "axis"], {"axis": -1}), "reduce_max": (["x", "axis"], {"axis": -1}),
        "reduce_min": (["x", "axis"], {"axis": -1}),
    }

    def tile_call(self, name: str, args: list[Any], kwargs: dict[str, Any],
                  node: ast.AST) -> Any:
        sig = self.SIGS.get(name, (["x"], {}) if name in _UNARY else ([], {}))
        try:
            p = _params(name, args, kwargs, *sig)
        except TypeError as err:
            raise self.error(str(err), node) from None
        method = getattr(self, "api_" + name, None)
        if method is None:
            raise self.error(f"ts.tile.{name}() is used as a loop range only", node,
                             hint=f"write 'for i in ts.tile.{name}(start, stop, step):'")
        return method(node, **p)

    # -- ids, sync
    def api_linear_id(self, node: ast.AST) -> Value:
        return self.emit1(T.LinearId(), [], node)

    def api_group_id(self, node: ast.AST) -> Value:
        return self.emit1(T.GroupId(), [], node)

    def api_local_id(self, node: ast.AST) -> Value:
        return self.emit1(T.LocalId(), [], node)

    def api_lane_id(self, node: ast.AST) -> Value:
        return self.emit1(T.LaneId(self.spec.lanes), [], node)

    def api_group_size(self, node: ast.AST) -> int:
        return int(self.spec.group_size)

    def api_context(self, node: ast.AST) -> TileContext:
        return TileContext()

    def api_barrier(self, node: ast.AST) -> None:
        self.emit(M.Barrier(), [], node)

    def api_cp_commit_group(self, node: ast.AST) -> None:
        self.emit(M.CpCommitGroup(), [], node)

    def api_cp_wait_group(self, node: ast.AST, n: Any) -> None:
        if is_value(n) or not isinstance(n, int) or n < 0:
            raise self.error("cp_wait_group(n) needs a constant n >= 0", node)
        self.emit(M.CpWaitGroup(n), [], node)

    # -- memory
    def elem(self, x: Any, node: ast.AST, default: Any = None) -> Any:
        if x is None:
            x = default if default is not None else dtype("f32")
        if isinstance(x, (DType, Policy, PolicyClass)):
            return x
        try:
            return element(x)
        except Exception:
            raise self.error(f"{x!r} is not a dtype", node, hint="use ts.f32, ts.bf16, ...") \
                from None

    def shape(self, x: Any, node: ast.AST) -> tuple[int, ...]:
        if isinstance(x, int) and not isinstance(x, bool):
            x = (x,)
        if not isinstance(x, (tuple, list)) or any(
                is_value(d) or not isinstance(d, int) or d < 0 for d in x):
            raise self.error(f"a tile shape must be a tuple of constant ints >= 0, got {x!r}",
                             node, hint="use constants, dims and tile names (BM, ctx.D)")
        return tuple(int(d) for d in x)

    def api_alloc_shared(self, node: ast.AST, shape: Any, dtype: Any, swizzle: Any,
                         alignment: Any) -> Value:
        if swizzle not in _SWIZZLES:
            raise self.error(f"unknown swizzle {swizzle!r}", node,
                             hint="use 'xor', '32B', '64B', '128B' or None")
        return self.emit1(M.AllocShared(self.shape(shape, node), self.elem(dtype, node),
                                        _SWIZZLES[swizzle], int(alignment)), [], node)

    def api_alloc_register(self, node: ast.AST, dtype: Any, shape: Any) -> Value:
        return self.emit1(M.AllocRegister(self.elem(dtype, node), self.shape(shape, node)),
                          [], node)

    def api_cp_async(self, node: ast.AST, dst: Any, src: Any) -> None:
        if not is_mem(dst) or not is_mem(src):
            raise self.error("cp_async(dst, src) copies memory: dst a shared buffer (or a "
                             "view of one), src a view of a global tensor", node)
        self.emit(M.CpAsync(), [dst, src], node)

    def vector_call(self, name: str, node: ast.Call) -> Any:
        """load_vector(ref, width=) / store_vector(ref, tile): ``ref`` names the start."""
        if not node.args:
            raise self.error(f"ts.tile.{name}() needs the memory to access", node)
        kw = {k.arg: k.value for k in node.keywords}
        if name == "load_vector":
            wnode = node.args[1] if len(node.args) > 1 else kw.get("width")
            width = self.expr(wnode) if wnode is not None else 4  # type: ignore[attr-defined]
            if is_value(width) or not isinstance(width, int):
                raise self.error("load_vector width must be a constant int", node)
            ref = self.vector_view(None, node.args[0], width)  # type: ignore[attr-defined]
            return self.emit1(M.LoadVector(width), [ref], node)
        vnode = node.args[1] if len(node.args) > 1 else kw.get("value")
        if vnode is None:
            raise self.error("store_vector(ref, tile) needs the tile to store", node)
        value = self.as_tile(self.expr(vnode), node)  # type: ignore[attr-defined]
        t = value.type
        assert isinstance(t, TensorType)
        if t.rank != 1:
            raise self.error(f"store_vector stores a 1-D tile, got {t}", node)
        ref = self.vector_view(None, node.args[0], t.shape[0])  # type: ignore[attr-defined]
        self.emit(M.StoreVector(), [ref, value], node)
        return None

    # -- compute
    def api_mma(self, node: ast.AST, a: Any, b: Any, accumulator: Any) -> Value:
        ta, tb = self.as_tile(a, node), self.as_tile(b, node)
        acc_tile = None
        if is_value(accumulator):
            acc_tile = self.as_tile(accumulator, node)
            acc = acc_tile.type.element  # type: ignore[attr-defined]
        elif accumulator is None:
            acc = accum_of(ta.type.element)  # type: ignore[attr-defined]
        else:
            acc = self.elem(accumulator, node)
        operands = [ta, tb] + ([acc_tile] if acc_tile is not None else [])
        return self.emit1(C.Mma(acc), operands, node)

    def api_zeros(self, node: ast.AST, shape: Any, dtype: Any) -> Value:
        elem = self.elem(dtype, node)
        zero = {"float": 0.0, "bool": False}.get(kind_of(elem), 0)
        return self.emit1(C.Full(self.shape(shape, node), zero, elem), [], node)

    def api_full(self, node: ast.AST, shape: Any, value: Any, dtype: Any) -> Value:
        if is_value(value):
            v = self.as_tile(value, node)
            return self.broadcast(self.cast(v, self.elem(dtype, node, v.type.element), node),
                                  self.shape(shape, node), node)
        elem = self.elem(dtype, node)
        if kind_of(elem) == "float":
            value = float(value)
        elif kind_of(elem) == "bool":
            value = bool(value)
        else:
            value = int(value)
        return self.emit1(C.Full(self.shape(shape, node), value, elem), [], node)

    def _unary(self, cls: Any, x: Any, node: ast.AST) -> Value:
        v = self.as_tile(x, node)
        if kind_of(v.type.element) != "float" and cls is not C.Abs:  # type: ignore
            v = self.cast(v, self.f32, node)  # type: ignore[attr-defined]
        return self.emit1(cls(), [v], node)

    def api_exp(self, node: ast.AST, x: Any) -> Value:
        return self._unary(C.Exp, x, node)

    def api_log(self, node: ast.AST, x: Any) -> Value:
        return self._unary(C.Log, x, node)

    def api_sqrt(self, node: ast.AST, x: Any) -> Value:
        return self._unary(C.Sqrt, x, node)

    def api_abs(self, node: ast.AST, x: Any) -> Value:
        return self._unary(C.Abs, x, node)

    def api_maximum(self, node: ast.AST, a: Any, b: Any) -> Value:
        return self.emit1(C.Maximum(), list(self.unify(a, b, node)), node)

    def api_minimum(self, node: ast.AST, a: Any, b: Any) -> Value:
        return self.emit1(C.Minimum(), list(self.unify(a, b, node)), node)

    def api_where(self, node: ast.AST, cond: Any, a: Any, b: Any) -> Value:
        va, vb = self.unify(a, b, node)
        c = self.as_tile(cond, node)
        if kind_of(c.type.element) != "bool":  # type: ignore[attr-defined]
            c = self.cast(c, BOOL, node)
        c, va = self.broadcast_pair(c, va, node)
        c, vb = self.broadcast_pair(c, vb, node)
        va, vb = self.broadcast_pair(va, vb, node)
        return self.emit1(C.Where(), [c, va, vb], node)

    def _reduce(self, kind: str, x: Any, axis: Any, node: ast.AST) -> Value:
        v = self.as_tile(x, node)
        if v.type.rank == 0 or is_value(axis):  # type: ignore[attr-defined]
            raise self.error(f"{kind} reductions need a tile of rank >= 1 and a constant "
                             "axis", node)
        return self.emit1(C.Reduce(kind, int(axis)), [v], node)

    def api_row_max(self, node: ast.AST, x: Any) -> Value:
        return self._reduce("max", x, -1, node)

    def api_row_sum(self, node: ast.AST, x: Any) -> Value:
        return self._reduce("sum", x, -1, node)

    def api_reduce_sum(self, node: ast.AST, x: Any, axis: Any) -> Value:
        return self._reduce("sum", x, axis, node)

    def api_reduce_max(self, node: ast.AST, x: Any, axis: Any) -> Value:
        return self._reduce("max", x, axis, node)

    def api_reduce_min(self, node: ast.AST, x: Any, axis: Any) -> Value:
        return self._reduce("min", x, axis, node)

    def api_causal_mask(self, node: ast.AST, scores: Any, q_start: Any, k_start: Any) -> Value:
        s = self.as_tile(scores, node)
        return self.emit1(C.CausalMask(), [s, self.as_index(q_start, node),
                                           self.as_index(k_start, node)], node)

    def api_cast(self, node: ast.AST, x: Any, dtype: Any) -> Value:
        v = self.as_tile(x, node)
        to = self.elem(dtype, node)
        t = v.type
        assert isinstance(t, TensorType) and not isinstance(t, MemRefType)
        if t.element == to and kind_of(to) != "float":
            return v
        # an explicit cast to the same float format is kept: it rounds a wide (exactly
        # accumulated) mma result to the format, as the docs promise
        return self.emit1(C.Cast(to), [v], node) if kind_of(to) != "bool" else \
            self.cast(v, to, node)


_UNARY = {"exp", "log", "sqrt", "abs", "row_max", "row_sum"}

__all__ = ["ApiMixin", "is_tile"]
