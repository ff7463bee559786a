"""Compile a ``@ts.kernel`` function's AST into a ``tile.kernel`` function of Tile IR.

One specialisation at a time (:class:`~tessera.frontend.kernel.compiler.scope.Spec`): tensor
parameters become ``gmem`` arguments (batch dims stripped from their types), runtime
scalars (parameters annotated with a dtype, ``alpha: ts.f32``) become scalar
arguments, and every other parameter is a compile-time constant folded into the
body. Every op carries the user's file and line.
"""

from __future__ import annotations

from typing import Any

from tessera.frontend.kernel.compiler.call import function_source, scope_of
from tessera.frontend.kernel.compiler.rules import NO_RETURN, stmts
from tessera.frontend.kernel.compiler.scope import Spec
from tessera.frontend.kernel.compiler.state import CompileState, is_mem
from tessera.frontend.kernel.errors import KernelResourceError
from tessera.ir.core import Function, Module, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import KERNEL
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify_function
from tessera.numerics import storage_of

#: shared memory one group may use: the sm_90 (H100) opt-in limit, 227 KiB
SHARED_LIMIT = 227 * 1024


def compile_function(pyfn: Any, spec: Spec) -> Function:
    """Compile one specialisation of ``pyfn`` into a verified ``tile.kernel`` function."""
    fdef, file, first = function_source(pyfn)
    state = CompileState(file, first, spec, scope_of(pyfn))
    for p in spec.params:
        if p.kind == "const":
            state.env[p.name] = p.value
        else:
            assert p.type is not None
            state.env[p.name] = state.block.add_arg(p.type, p.name)
    result = stmts(state, fdef.body, top=True)
    node = fdef.body[-1] if fdef.body else fdef
    attrs = _attributes(spec)
    operands: list[Value] = []
    if result is not NO_RETURN and result is not None:
        operands = [_result_value(state, result, node, attrs)]
    state.emit(tile_ir.Return(), operands, node)
    fn = Function(spec.name, state.block, [v.type for v in operands], kind=KERNEL,
                  attrs=attrs, loc=state.loc(fdef))
    verify_function(fn)
    check_shared(fn)
    return fn


def _attributes(s: Spec) -> dict[str, Any]:
    attrs: dict[str, Any] = {"grid": tuple(s.grid), "group_size": s.group_size,
                             "tile_shape": tuple(s.tile)}
    if s.batch > 1:
        attrs["batch"] = s.batch
    if s.config:
        attrs["config"] = tuple((k, v) for k, v in s.config
                                if isinstance(v, (int, float, str, bool)))
    return attrs


def _result_value(state: CompileState, result: Any, node: Any,
                  attrs: dict[str, Any]) -> Value:
    s = state.spec
    if is_mem(result) and result.type.shape:  # type: ignore[attr-defined]
        if result not in state.block.args:
            raise state.error("a kernel returns a whole parameter tensor, a tile or a "
                              "scalar; this is a view", node,
                              hint="return the parameter itself (it is written in place)")
        return result
    if isinstance(result, (tuple, list)):
        raise state.error("kernels return one value", node)
    v = state.as_tile(result, node)
    t = v.type
    assert isinstance(t, TensorType)
    if t.rank == 0:
        if s.result_scalar is not None:
            v = state.cast(v, s.result_scalar, node)
        return v
    if s.result is None:
        raise state.error("a kernel that returns a tile needs a result annotation "
                          "(-> ts.Tensor[...]) giving the output's shape", node)
    out = s.result
    if len(out.shape) - int(out.batched) != t.rank:
        raise state.error(f"the returned {t.shape} tile does not match the result "
                          f"annotation's rank ({out.shape})", node)
    if storage_of(t.element) != storage_of(out.element):
        v = state.cast(v, out.element, node)
    attrs["result_shape"] = tuple(out.shape)
    attrs["result_element"] = out.element
    attrs["result_batched"] = out.batched
    return v


def check_shared(fn: Function) -> None:
    """Raise KernelResourceError when ``fn`` allocates more shared memory than a group
    may use (``SHARED_LIMIT``)."""
    total = 0
    for instr in walk(fn.body):
        if isinstance(instr.op, tile_memory.AllocShared):
            n = 1
            for d in instr.op.shape:
                n *= d
            total += n * storage_of(instr.op.element).np_dtype.itemsize
    if total > SHARED_LIMIT:
        raise KernelResourceError(
            f"kernel '{fn.name}' allocates {total} bytes of shared memory per group; "
            f"the limit is {SHARED_LIMIT} (sm_90, 227 KiB)", loc=fn.loc,
            hint="use smaller tiles (BM, BN, BK) or fewer pipeline stages")


#: passes run on every freshly compiled kernel (the front end emits index arithmetic
#: per use; these merge and drop the duplicates)
TILE_PIPELINE = ["cse", "dce"]


def build_module(pyfn: Any, spec: Spec) -> Module:
    """The Tile IR module of one specialisation of ``pyfn`` (after ``TILE_PIPELINE``)."""
    from tessera.ir.passes import PassManager

    fn = compile_function(pyfn, spec)
    return PassManager.from_names(TILE_PIPELINE).run(Module(spec.name, {fn.name: fn}))


__all__ = ["SHARED_LIMIT", "TILE_PIPELINE", "build_module", "check_shared", "compile_function"]
