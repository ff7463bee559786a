"""Device-function calls (PTX ISA sec. 7.2 and 9.7.12.5, ``call``): each call of a
``.func`` defined in the module is read in place, its body inlined into the kernel.

The ``.param`` state space of a call is per-thread storage: every ``.param`` variable
of a call sequence (``{ .param .b32 param0; st.param.b32 [param0], %r1; call ...;
ld.param.b32 %r2, [retval0]; }``) gets bytes of the thread's local memory, and the
callee's parameters and return values are bound to the caller's variables by
position, so ``ld.param``/``st.param`` of them are local accesses of the same bytes,
byte-exact for arrays and structures passed by value. The callee's registers live in
a scope of their own (they shadow nothing of the caller's), its labels are renamed
apart for each call, and its ``ret`` jumps to the instruction after the call.

A call of ``vprintf`` (declared without a body: what ``printf`` calls) reads as
``ptx.printf``, one of ``__assertfail`` (what a failed ``assert`` calls) as
``ptx.assertfail``, and the device heap's ``malloc`` and ``free`` as ``ptx.malloc`` and
``ptx.free`` (:mod:`tessera.ir.dialects.target.printf`). Not supported, with an error
at the call: recursion (a call of a function already being inlined), indirect calls
through a register, guarded calls, and calls of other functions without a body
(library functions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera.errors import Loc
from tessera.ir.dialects.target import ptx_ops
from tessera.ir.dialects.target.printf import AssertFail, DeviceFree, DeviceMalloc, Printf
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.declarations import SIZES, variable
from tessera.ir.text.ptx.lexer import (
    PtxSyntaxError,
    PtxUnsupportedError,
    Statement,
    split_operands,
)

if TYPE_CHECKING:  # the kernel reader imports this module
    from tessera.ir.text.ptx.module import _KernelReader

_HEADER = re.compile(r"\.func\s*(?:\((?P<results>[^)]*)\))?\s*(?P<name>[\w$]+)\s*"
                     r"(?:\((?P<params>[^)]*)\))?")


@dataclass(frozen=True)
class DeviceFunction:
    """A ``.func``: its parameters' and return values' names, in order, and the index
    of its body's ``{`` among the module's statements (None: declared, not defined)."""

    name: str
    params: tuple[str, ...]
    results: tuple[str, ...]
    loc: Loc
    body: int | None


def _names(text: str | None, loc: Loc) -> tuple[str, ...]:
    """The variable names of a ``.param`` list."""
    if not text or not text.strip():
        return ()
    names = []
    for part in split_operands(text.strip(), loc):
        if not part.startswith(".param"):
            raise PtxSyntaxError(f"expected a .param in '{part}'", loc=loc)
        names.append(variable(part[len(".param"):], loc, "parameter")[0])
    return tuple(names)


def function(stmts: list[Statement], i: int) -> DeviceFunction:
    """The ``.func`` whose header is statement ``i``."""
    s = stmts[i]
    m = _HEADER.search(s.text)
    if m is None:
        raise PtxSyntaxError(f"cannot read the function header '{s.text}'", loc=s.loc)
    defined = i + 1 < len(stmts) and stmts[i + 1].kind == "open"
    return DeviceFunction(m.group("name"), _names(m.group("params"), s.loc),
                          _names(m.group("results"), s.loc), s.loc,
                          i + 1 if defined else None)


def declare_param(reader: _KernelReader, stmt: Statement) -> None:
    """A call sequence's ``.param`` variable: bytes of the thread's local memory, bound
    to its name until the enclosing ``{ }`` closes."""
    name, elem, length, align = variable(stmt.text[len(".param"):], stmt.loc, "parameter")
    address = -(-reader.local_size // align) * align
    reader.local_size = address + SIZES[elem] * max(length, 1)
    bind(reader, name, address)


def bind(reader: _KernelReader, name: str, address: int) -> None:
    """Bind ``.param`` variable ``name`` to local ``address`` in the current scope."""
    scope = reader.scope
    reader.param_undo[-1].append((name, scope.local.get(name)))
    scope.local[name] = address
    scope.call_params.add(name)


def unbind(reader: _KernelReader) -> None:
    """Undo the bindings of the scope being closed."""
    for name, old in reversed(reader.param_undo.pop()):
        if old is None:
            reader.scope.local.pop(name, None)
            reader.scope.call_params.discard(name)
        else:
            reader.scope.local[name] = old


def _list(token: str, loc: Loc) -> list[str]:
    """The names of a ``(a, b)`` operand."""
    inner = token.strip()[1:-1].strip()
    return [x.strip() for x in split_operands(inner, loc)] if inner else []


def inline(reader: _KernelReader, mods: list[str], ops: list[str],
           guarded: bool, stmt: Statement) -> None:
    """Read ``call{.uni} (results), name, (params)`` by inlining the callee's body."""
    def syntax(what: str) -> PtxSyntaxError:
        return PtxSyntaxError(f"{what} in '{stmt.text}'", loc=stmt.loc)

    def unsupported(what: str) -> PtxUnsupportedError:
        return PtxUnsupportedError(f"{what} in '{stmt.text}' is not supported", loc=stmt.loc)

    if [f for f in mods if f != "uni"]:
        raise syntax("call takes .uni only")
    if guarded:
        raise unsupported("a guarded call")
    results: list[str] = []
    if ops and ops[0].startswith("("):
        results = _list(ops[0], stmt.loc)
        ops = ops[1:]
    if not ops or ops[0].startswith(("(", "%")) or len(ops) > 2 or \
            (ops[1:] and not ops[1].startswith("(")):
        raise unsupported("an indirect call")
    name = ops[0]
    params = _list(ops[1], stmt.loc) if ops[1:] else []
    fn = reader.functions.get(name)
    if fn is None:
        raise syntax(f"call of {name}, which is not a .func of this file")
    if fn.body is None and _LIBRARY.get(name) != (len(fn.params), len(fn.results)):
        raise unsupported(f"a call of {name}, which this file declares without a body")
    if name in [c for c, _ in reader.calls]:
        raise unsupported(f"a recursive call of {name}")
    if (len(params), len(results)) != (len(fn.params), len(fn.results)):
        raise syntax(f"{name} takes {len(fn.params)} parameters and returns "
                     f"{len(fn.results)} values; the call passes {len(params)} and receives "
                     f"{len(results)}")
    bound = []
    for arg in params + results:
        if arg not in reader.scope.call_params:
            raise syntax(f"call argument {arg} is not a .param variable of the call sequence")
        bound.append(reader.scope.local[arg])
    if fn.body is None:  # vprintf, __assertfail, malloc or free
        _LIBRARY_READERS[name](reader, bound, stmt)
        return
    reader.called.add(name)
    reader.inlined += 1
    done = f"$return@{name}#{reader.inlined}"
    outer, outer_blocks = reader.scope.scopes, reader.blocks_open
    reader.scope.scopes = [{}]  # the callee sees its own registers and labels only
    reader.blocks_open = []
    reader.param_undo.append([])
    for callee, address in zip(fn.params + fn.results, bound):
        bind(reader, callee, address)
    _read_body(reader, fn, done)
    unbind(reader)
    reader.scope.scopes, reader.blocks_open = outer, outer_blocks
    reader.label(done, stmt.loc)


def read_alone(reader: _KernelReader, fn: DeviceFunction) -> None:
    """Read the body of ``fn``, which no kernel calls, as if a call had bound its
    parameters and return values: ptxas checks every function a module defines, so a
    mistake in one that nothing calls is still the module's mistake (a relocatable
    module's functions are called from other modules)."""
    assert fn.body is not None
    header = reader.stmts[fn.body - 1]
    m = _HEADER.search(header.text)
    assert m is not None
    for group in ("params", "results"):
        text = (m.group(group) or "").strip()
        for part in split_operands(text, header.loc) if text else []:
            declare_param(reader, Statement(part.strip(), "stmt", header.loc))
    done = f"$return@{fn.name}"
    _read_body(reader, fn, done)
    reader.label(done, header.loc)


def _read_body(reader: _KernelReader, fn: DeviceFunction, done: str) -> None:
    """Read the body of ``fn`` into the kernel being read; its ``ret`` jumps to label
    ``done``."""
    assert fn.body is not None
    reader.calls.append((fn.name, done))
    if reader.body(reader.stmts, fn.body + 1) < 0:
        raise PtxSyntaxError(f"function {fn.name} is not closed", loc=fn.loc)
    reader.calls.pop()


#: the library functions a module may declare without a body: (parameters, results)
_LIBRARY = {"vprintf": (2, 1), "__assertfail": (5, 0), "malloc": (1, 1), "free": (1, 0)}


def _vprintf(reader: _KernelReader, bound: list[int], stmt: Statement) -> None:
    """``printf``'s ``vprintf(format, args)``: a ``ptx.printf`` of the two addresses in
    the call's parameters (local addresses ``bound``), its count stored as the return
    value."""
    b = InstrBuilder(reader.scope, stmt.text, stmt.loc, "call")
    fmt, args, result = (b.emit(ptx_ops.Cvta("local"), [b.const(a, "u64")])[0] for a in bound)
    (count,) = b.emit(Printf(), [b.emit(ptx_ops.GenericLoad("u64"), [a])[0]
                                 for a in (fmt, args)])
    b.emit(ptx_ops.GenericStore("s32"), [result, count])
    reader.blocks[-1][1].append(b.pi)


def _assertfail(reader: _KernelReader, bound: list[int], stmt: Statement) -> None:
    """A failed device ``assert``: ``ptx.assertfail`` of the message, file, line and
    function in the call's parameters (local addresses ``bound``; the character size,
    the fifth, is 1)."""
    b = InstrBuilder(reader.scope, stmt.text, stmt.loc, "call")
    at = [b.emit(ptx_ops.Cvta("local"), [b.const(a, "u64")])[0] for a in bound[:4]]
    values = [b.emit(ptx_ops.GenericLoad(t), [a])[0]
              for a, t in zip(at, ("u64", "u64", "u32", "u64"))]
    b.emit(AssertFail(), values)
    reader.blocks[-1][1].append(b.pi)


def _malloc(reader: _KernelReader, bound: list[int], stmt: Statement) -> None:
    """The device heap's ``malloc(size)``: ``ptx.malloc`` of the size in the call's
    parameter, its address stored as the return value."""
    b = InstrBuilder(reader.scope, stmt.text, stmt.loc, "call")
    size, result = (b.emit(ptx_ops.Cvta("local"), [b.const(a, "u64")])[0] for a in bound)
    (block,) = b.emit(DeviceMalloc(), [b.emit(ptx_ops.GenericLoad("u64"), [size])[0]])
    b.emit(ptx_ops.GenericStore("u64"), [result, block])
    reader.blocks[-1][1].append(b.pi)


def _free(reader: _KernelReader, bound: list[int], stmt: Statement) -> None:
    """The device heap's ``free(pointer)``: ``ptx.free`` of the call's parameter."""
    b = InstrBuilder(reader.scope, stmt.text, stmt.loc, "call")
    (at,) = b.emit(ptx_ops.Cvta("local"), [b.const(bound[0], "u64")])
    b.emit(DeviceFree(), [b.emit(ptx_ops.GenericLoad("u64"), [at])[0]])
    reader.blocks[-1][1].append(b.pi)


_LIBRARY_READERS = {"vprintf": _vprintf, "__assertfail": _assertfail, "malloc": _malloc,
                    "free": _free}


__all__ = ["DeviceFunction", "bind", "declare_param", "function", "inline", "read_alone",
           "unbind"]
