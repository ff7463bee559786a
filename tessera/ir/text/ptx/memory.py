"""PTX memory instructions as Target IR (PTX ISA sec. 9.7.9, 9.7.13-9.7.14): ``ld``/``st``
in every state space the interpreter models (global, shared, local, param, generic;
vector forms), ``atom``/``red``, ``cp.async`` and its groups, ``ldmatrix`` and
``mma.sync``; warp and CTA synchronisation and fences are in
:mod:`tessera.ir.text.ptx.warp`.

Cache and eviction qualifiers (``.nc``, ``.ca``, ``.L2::128B`` ...) do not change a
value in the interpreter, which runs threads in a sequentially consistent order; they
are accepted from a fixed list. Memory orders (``.volatile``, ``.relaxed.gpu``,
``.acquire.cta`` ...) are kept on the Target IR access: the race check orders the
accesses of two threads that synchronise through them and through fences
(:mod:`tessera.interp.target.ordering`).
"""

from __future__ import annotations

from tessera.ir.core import Value
from tessera.ir.dialects.target import (
    ATOMIC_TYPES,
    HALF_ATOMICS,
    REG_TYPES,
    RegType,
    atomic_type_problem,
    memory_ops,
    ptx_ops,
    vector_atomic_problem,
)
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.text.ptx.arith import count, handler, ptx_type
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.lexer import is_decimal_float, parse_float_bits, parse_int

#: the qualifiers atom and red take besides a state space and .L2::cache_hint
_ATOMIC_ORDERS = {*memory_ops.ORDER_SEMANTICS["atom"], *memory_ops.MEMORY_SCOPES}
#: the words of a memory order, in the order Target IR writes them
_ORDER_WORDS = ("mmio", "volatile", *memory_ops.ORDER_SEMANTICS["atom"],
                *memory_ops.MEMORY_SCOPES)
_QUALIFIERS = {"nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "weak", *_ORDER_WORDS,
               "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B", "L1::evict_normal",
               "L1::evict_last", "L1::evict_first", "L1::evict_unchanged", "L2::evict_normal",
               "L2::evict_last", "L2::evict_first"}
_SPACES = {"global", "shared", "param", "local", "const", "shared::cta", "shared::cluster"}


def _split_mods(b: InstrBuilder, mods: list[str]) -> tuple[str, int, str]:
    """(state space or '', vector width, type) of an ld/st/atom/red opcode."""
    space, vec = "", 1
    for f in mods[:-1]:
        if f == "shared::cluster":  # may reach the other CTAs of the cluster
            b.require(".shared::cluster", 90, (7, 8))
            space = f
        elif f in _SPACES:
            space = f.split("::")[0]
        elif f in ("v2", "v4", "v8"):
            vec = int(f[1:])
        elif f == "L2::cache_hint":
            continue  # the policy operand (createpolicy's) changes no value
        elif f not in _QUALIFIERS:
            raise b.unsupported(f"the .{f} qualifier")
    return space, vec, ptx_type(b, mods[-1:])


def _order(b: InstrBuilder, mods: list[str]) -> str:
    """The memory order of an ld/st/atom/red opcode as Target IR writes it (``""``:
    weak, or atom's and red's default), with the target and version it needs."""
    words = sorted((f for f in mods[:-1] if f in _ORDER_WORDS), key=_ORDER_WORDS.index)
    if "cluster" in words:
        b.require("the .cluster scope", 90, (7, 8))
    if "mmio" in words:
        b.require(".mmio", 70, (8, 2))
    elif words and words[0] != "volatile":
        b.require(f".{words[0]}", 70, (6, 0))
    return ".".join(words)


def _param_space(b: InstrBuilder, space: str, at: str) -> str:
    """``local`` for a ``.param`` access of a call's parameter or return value (in the
    thread's local memory: :mod:`tessera.ir.text.ptx.calls`), else ``space``."""
    name = b.address(at)[0]
    if name not in b.scope.call_params:
        return space
    if space != "param":
        raise b.syntax(f"{name} is a .param variable: {b.head}.param accesses it")
    return "local"


def _memory_op(b: InstrBuilder, space: str) -> str:
    """The state space an access uses here: ``.const`` variables live in global
    memory (read-only by the PTX ISA's rules, which have no st.const)."""
    return "global" if space == "const" else space


def _param(b: InstrBuilder, token: str) -> tuple[Value, int]:
    """A kernel ``.param`` address operand (a parameter's name, or a register holding
    the address ``mov`` took of one) as (generic address, offset), for what the
    parameter window of the generic space serves: byte-wide and struct-field reads."""
    base, offset = b.read_address(token, "u64")
    (generic,) = b.emit(ptx_ops.Cvta("param"), [base])
    return generic, offset


def _local(b: InstrBuilder, token: str) -> tuple[Value, int]:
    """A ``.local`` address operand as (generic address, offset): local memory is
    reached through its generic window."""
    base, offset = b.read_address(token, "u64")
    (generic,) = b.emit(ptx_ops.Cvta("local"), [base])
    return generic, offset


_BYTES = ("u8", "s8", "b8")
_ST_PARAM = ("st.param writes the .param variables of a call sequence or a function's return "
             "values, not a kernel's parameters")


def _byte_access(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``ld``/``st`` of one byte or a vector of 2 or 4: PTX has no 8-bit registers, so
    each byte is extended into (or taken from) a wider register."""
    b.any_width = True  # the byte is extended into, or taken from, any register
    value = ops[0] if b.head == "ld" else ops[1]
    for token in (x.strip() for x in value.strip("{} ").split(",")):
        name = b.scope.resolve(token)
        if name is not None and REG_TYPES[b.scope.registers[name]][1] in "fp":
            raise b.syntax(f"register {token} is a .{b.scope.registers[name]} register: a "
                           f".{mods[-1]} byte needs an integer register")
    space, vec, _ = _split_mods(b, [*mods[:-1], "b16"])
    count(b, ops, 2)
    if parse_float_bits(value.strip()) is not None or is_decimal_float(value.strip()):
        raise b.syntax(f"float literal {value.strip()} for a .{mods[-1]} byte")
    space = _param_space(b, _memory_op(b, space), ops[1] if b.head == "ld" else ops[0])
    if vec not in (1, 2, 4):
        raise b.syntax(f"a vector of bytes is .v2 or .v4, not .v{vec}")
    if space not in ("global", "shared", "shared::cluster", "", "local", "param"):
        raise b.unsupported(f"byte accesses in the .{space} state space")
    if space == "param" and b.head == "st":
        raise b.syntax(_ST_PARAM)
    elem = "u32" if space.startswith("shared") else "u64"
    at = ops[1] if b.head == "ld" else ops[0]
    addr, offset = (_local(b, at) if space == "local" else _param(b, at)
                    if space == "param" else b.read_address(at, elem))
    order = _local_order(b, mods, space)
    space = "" if space in ("local", "param") else space
    if b.head == "ld":
        (d,) = b.emit(ptx_ops.ByteLoad(space, mods[-1] == "s8", offset, vec, order), [addr])
        b.write(ops[0], d)
    else:
        b.emit(ptx_ops.ByteStore(space, offset, vec, order), [addr, b.read(ops[1], "b32")])


def _local_order(b: InstrBuilder, mods: list[str], space: str) -> str:
    """:func:`_order`, which for ``.volatile`` ``.local`` accesses needs PTX 9.1."""
    order = _order(b, mods)
    if order == "volatile" and space == "local":
        b.require(f"{b.head}.volatile of .local memory", 0, (9, 1))
    return order


def hinted(b: InstrBuilder, mods: list[str], ops: list[str], n: int | None = 2) -> list[str]:
    """The operands before the 64-bit cache policy (``createpolicy``'s, which changes no
    value) that ``.L2::cache_hint`` takes last: ``n`` of them (None: all but the last)."""
    if "L2::cache_hint" not in mods:
        return ops
    n = len(ops) - 1 if n is None else n
    if n < 1 or len(ops) != n + 1:
        raise b.syntax(f"{b.head}.L2::cache_hint takes a 64-bit cache policy after its "
                       "other operands")
    b.read(ops[n], "b64")
    return ops[:n]


@handler("createpolicy")
def _createpolicy(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if not ops:
        raise b.syntax("createpolicy writes a register")
    b.write(ops[0], b.const(0, "b64"))  # a cache policy: no effect on values here


@handler("ld")
def _ld(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    ops = hinted(b, mods, ops)
    if mods and mods[-1] in _BYTES:
        _byte_access(b, mods, ops)
        return
    space, vec, t = _split_mods(b, mods)
    count(b, ops, 2)
    space = _param_space(b, _memory_op(b, space), ops[1])
    order = _local_order(b, mods, space)
    if space != "param" and b.address(ops[1])[0] in b.scope.params:
        raise b.syntax(f"kernel parameter {b.address(ops[1])[0]} is read with ld.param")
    if space == "param" and b.address(ops[1])[0] in b.scope.params:
        base, offset = b.address(ops[1])
        (d,) = b.emit(ptx_ops.ParamLoad(base, t, offset, vec))
    elif space == "param":  # through a register: the address mov took of a parameter
        addr, offset = _param(b, ops[1])
        (d,) = b.emit(ptx_ops.GenericLoad(t, vec, offset), [addr])
    elif space in ("", "local"):
        addr, offset = (_local(b, ops[1]) if space else b.read_address(ops[1], "u64"))
        (d,) = b.emit(ptx_ops.GenericLoad(t, vec, offset, order), [addr])
    else:
        addr, offset = b.read_address(ops[1], "u64" if space == "global" else "u32")
        (d,) = b.emit(target_ops.Load(space, t, vec, offset, order), [addr])
    b.write(ops[0], d)


@handler("st")
def _st(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    ops = hinted(b, mods, ops)
    if mods and mods[-1] in _BYTES:
        _byte_access(b, mods, ops)
        return
    space, vec, t = _split_mods(b, mods)
    count(b, ops, 2)
    if space == "const":
        raise b.syntax("st.const does not exist: constant memory is read-only")
    space = _param_space(b, space, ops[0])
    if space == "param":
        raise b.syntax(_ST_PARAM)
    value = b.read(ops[1], t) if vec == 1 or ops[1].strip().startswith("{") else None
    if value is None:
        raise b.syntax(f"a .v{vec} store needs {{...}} registers")
    order = _local_order(b, mods, space)
    if space in ("", "local"):
        addr, offset = (_local(b, ops[0]) if space else b.read_address(ops[0], "u64"))
        b.emit(ptx_ops.GenericStore(t, vec, offset, order), [addr, value])
    else:
        addr, offset = b.read_address(ops[0], "u64" if space == "global" else "u32")
        b.emit(target_ops.Store(space, t, vec, offset, order), [addr, value])


def plain_address(b: InstrBuilder, token: str, elem: str) -> Value:
    """An address operand as one value (base plus offset)."""
    addr, offset = b.read_address(token, elem)
    if offset:
        (off,) = b.emit(target_ops.Const(offset, elem))
        (addr,) = b.emit(target_ops.Binary("add", elem), [addr, off])
    return addr


@handler("atom", "red")
def _atom(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    ops_ = [f for f in mods[:-1] if f in ATOMIC_TYPES]
    if len(ops_) != 1:
        raise b.syntax("expected one atomic operation (.add, .min, .cas ...)")
    space, vec, t = _split_mods(b, [f for f in mods if f not in ops_ and f != "noftz"])
    op = ops_[0]
    if "L2::cache_hint" in mods and (op == "cas" or space not in ("", "global")):
        raise b.syntax(f"{b.head}.L2::cache_hint applies to global memory and not to cas")
    ops = hinted(b, mods, ops, 2 if b.head == "red" else 3)
    if space == "const":
        raise b.syntax(f"{b.head} on constant memory")
    if t == "b128":
        raise b.unsupported(f"{b.head}.{op}.{t}")
    if cache := [f for f in mods[:-1] if f in _QUALIFIERS and f not in _ATOMIC_ORDERS]:
        raise b.syntax(f"{b.head} takes no .{cache[0]} qualifier: a memory order, a scope "
                       "and .L2::cache_hint")
    half_vector = vec != 1 and t in HALF_ATOMICS  # min and max of halves: vectors only
    if (problem := atomic_type_problem(b.head, op, t)) and not (half_vector and
                                                                op in ("min", "max")):
        raise b.syntax(problem)
    if ("noftz" in mods) != (t in HALF_ATOMICS):
        raise b.syntax(f"{b.head}.{op}.{t} " + ("needs .noftz: it keeps subnormals" if
                       t in HALF_ATOMICS else "takes no .noftz (half-precision adds do)"))
    if b.head == "red" and {"acquire", "acq_rel"} & set(mods):
        raise b.syntax("red returns nothing to acquire: its memory order is .relaxed or "
                       ".release")
    order = _order(b, mods)
    if vec != 1:
        _vector_atomic(b, op, t, vec, space, ops, order)
        return
    if b.head == "red":
        count(b, ops, 2)
        if space == "":
            raise b.unsupported(f"red.{op} in the generic space")
        addr = plain_address(b, ops[0], "u64" if space == "global" else "u32")
        b.emit(target_ops.Reduce(space, op, t, order), [addr, b.read(ops[1], t)])
        return
    count(b, ops, 4 if op == "cas" else 3)
    addr = plain_address(b, ops[1], "u32" if space.startswith("shared") else "u64")
    args = [addr] + [b.read(o, t) for o in ops[2:]]
    (d,) = b.emit(ptx_ops.Atom(space, op, t, order=order), args)
    b.write(ops[0], d)


def _vector_atomic(b: InstrBuilder, op: str, t: str, vec: int, space: str,
                   ops: list[str], order: str) -> None:
    """``atom``/``red`` ``.v2``/``.v4``/``.v8`` (sm_90, PTX 8.1): each element an atomic
    update of its own; a ``red`` is the ``atom`` whose old values nobody reads."""
    if problem := vector_atomic_problem(b.head, op, t, vec, space):
        raise b.syntax(problem)
    if op != "add":
        raise b.unsupported(f"vector {b.head}.{op} of 16-bit floats")
    b.require(f"vector {b.head}", 90, (8, 1))
    red = b.head == "red"
    count(b, ops, 2 if red else 3)
    addr = plain_address(b, ops[0 if red else 1], "u64")
    (d,) = b.emit(ptx_ops.Atom(space, op, t, vec, order), [addr, b.read(ops[-1], t)])
    if not red:
        b.write(ops[0], d)


@handler("cp")
def _cp(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if mods[:1] != ["async"]:
        raise b.unsupported(f"cp.{'.'.join(mods)}")
    rest = mods[1:]
    if rest[:1] == ["bulk"] or rest[:2] == ["mbarrier", "arrive"]:
        from tessera.ir.text.ptx.hopper import bulk_copy, cp_async_arrive

        (bulk_copy if rest[0] == "bulk" else cp_async_arrive)(b, rest, ops)
        return
    if rest == ["commit_group"]:
        count(b, ops, 0)
        b.emit(target_async.CpAsyncCommit())
        return
    if rest in (["wait_group"], ["wait_all"]):
        n = 0
        if rest == ["wait_group"]:
            count(b, ops, 1)
            value = parse_int(ops[0])
            if value is None:
                raise b.syntax("cp.async.wait_group takes an integer constant")
            n = value
        else:
            count(b, ops, 0)
            b.emit(target_async.CpAsyncCommit())
        b.emit(target_async.CpAsyncWait(n))
        return
    if not rest or rest[0] not in ("ca", "cg") or \
            rest[1:3] not in (["shared", "global"], ["shared::cta", "global"]):
        raise b.unsupported(f"cp.async.{'.'.join(rest)}")
    for f in rest[3:]:
        if f not in ("L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"):
            raise b.syntax(f"cp.async takes a prefetch size or a cache hint, not .{f}")
    if len(ops) not in (3, 4):
        raise b.syntax("cp.async takes [dst], [src], size and an optional src-size or "
                       "ignore-src predicate")
    size = parse_int(ops[2])
    if size is None:
        raise b.syntax("the cp.async size must be a constant")
    if size not in ((16,) if rest[0] == "cg" else (4, 8, 16)):
        raise b.syntax(f"cp.async.{rest[0]} copies {'16' if rest[0] == 'cg' else '4, 8 or 16'}"
                       f" bytes, not {size}")
    dst = plain_address(b, ops[0], "u32")
    src = plain_address(b, ops[1], "u64")
    args = [dst, src] + ([_source_size(b, ops[3], size)] if len(ops) == 4 else [])
    b.emit(target_async.CpAsync(size, rest[0]), args)


def _source_size(b: InstrBuilder, token: str, size: int) -> Value:
    """``cp.async``'s fourth operand: the bytes to read, the rest zero-filled (at most
    ``size``), or a predicate ``ignore-src`` (true: read none)."""
    if b.is_register(token) and b.scope.registers[b.register(token)] == "pred":
        b.require("cp.async's ignore-src", 80, (7, 5))
        (n,) = b.emit(target_ops.Selp("u32"), [b.const(0, "u32"), b.const(size, "u32"),
                                               b.read(token, "pred")])
        return n
    value = parse_int(token.strip())
    if value is not None and not 0 <= value <= size:
        raise b.syntax(f"a cp.async src-size of {value}: 0 to the {size} bytes it copies")
    return b.read(token, "u32")


@handler("ldmatrix")
def _ldmatrix(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 2)
    num = next((int(f[1:]) for f in mods if f in ("x1", "x2", "x4")), 0)
    extra = set(mods) - {"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared",
                         "shared::cta", "b16"}
    if not num or extra or "m8n8" not in mods:
        raise b.unsupported(f"ldmatrix.{'.'.join(mods)}")
    if "b16" not in mods:
        raise b.syntax("ldmatrix.m8n8 names its type, .b16")
    addr = plain_address(b, ops[1], "u32")
    (d,) = b.emit(target_async.Ldmatrix(num, "trans" in mods), [addr])
    b.write(ops[0], d)


@handler("mma")
def _mma(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 4)
    body = [f for f in mods if f not in ("sync", "aligned")]
    sat = int("satfinite" in body)  # integer products: mma.sync...row.col.satfinite.s32...
    if sat:
        body.remove("satfinite")
    if len(body) != 7 or body[1:3] != ["row", "col"] or body[3] not in ("f32", "s32") or \
            body[6] != body[3]:
        raise b.unsupported(f"mma.{'.'.join(mods)} (mma.sync.aligned.m16n8k16.row.col."
                            "f32.<a>.<b>.f32, or .s32 with s8/u8 inputs, is)")
    shape, ctype, atype, btype = body[0], body[3], body[4], body[5]
    na, nb = len(ops[1].split(",")), len(ops[2].split(","))
    a, bb = b.read(ops[1], "b32"), b.read(ops[2], "b32")
    c = b.read(ops[3], ctype)
    if (a.type, bb.type) != (RegType("b32", 4), RegType("b32", 2)) or na != 4 or nb != 2:
        raise b.unsupported(f"mma.sync.{shape} with {na} A and {nb} B registers")
    (d,) = b.emit(target_async.MmaSync(shape, atype, btype, ctype, sat), [a, bb, c])
    b.write(ops[0], d)


__all__: list[str] = []
