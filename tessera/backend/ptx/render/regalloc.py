"""Register allocation for the PTX renderer.

PTX has unlimited virtual registers and ptxas does the real allocation, so every SSA
value gets registers of its own. The exceptions are values that must *share*
registers because PTX has no phi nodes or because the hardware writes in place:

* the carried values of ``ptx.for`` / ``ptx.while``: region arguments and loop
  results are one register set (the renderer moves the initial values in before the
  loop and the yielded values in at the end of each iteration);
* ``ptx.wgmma``: the instruction writes its accumulator registers in place, so the
  result *is* the accumulator operand. That is only sound when the operand is dead
  after the instruction, which :func:`tie_values` checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.errors import Loc, TesseraError
from tessera.ir.core import Block, Function, Instr, Type, Value
from tessera.ir.dialects.target import For, RegType, TensorMapType, While
from tessera.ir.dialects.target.async_ops import Wgmma


class RenderError(TesseraError):
    """Target IR that cannot be rendered as PTX (a missing rule, a misused register)."""

    kind = "PTX render error"


#: PTX register classes: name prefix and declared type, the classes nvcc uses
_CLASSES = {"pred": ("%p", ".pred"), "b16": ("%rs", ".b16"), "b32": ("%r", ".b32"),
            "b64": ("%rd", ".b64"), "f32": ("%f", ".f32"), "f64": ("%fd", ".f64")}


def reg_class(elem: str) -> str:
    """The register class (a key of the declaration table) holding a ``reg<elem>``."""
    cls = _CLASS_OF.get(elem)
    if cls is None:
        cls = _CLASS_OF[elem] = elem if elem in ("pred", "f32", "f64") else \
            f"b{RegType(elem).bits}"
    return cls


#: ``reg_class`` of each element type met so far (rendering asks once per register)
_CLASS_OF: dict[str, str] = {}


def braced(regs: Sequence[str]) -> str:
    """The PTX vector operand ``{%r0, %r1, ...}`` of these registers (or immediates)."""
    return "{" + ", ".join(regs) + "}"


def operand(regs: Sequence[str]) -> str:
    """One register as itself, several as the PTX vector operand ``{%r0, %r1, ...}``."""
    return regs[0] if len(regs) == 1 else braced(regs)


def _elem(t: Type) -> tuple[str, int]:
    if isinstance(t, TensorMapType):
        return "u64", 1  # a tensor map is used through its 64-bit generic address
    if isinstance(t, RegType):
        return t.elem, t.count
    raise RenderError(f"a value of type {t} cannot live in PTX registers")


class Registers:
    """Names the PTX registers of each SSA value; tied values share one name set."""

    def __init__(self, tied: dict[Value, Value] | None = None) -> None:
        self._parent = dict(tied or {})
        self._names: dict[Value, tuple[str, ...]] = {}
        self._counts = dict.fromkeys(_CLASSES, 0)

    def _root(self, v: Value) -> Value:
        while v in self._parent and self._parent[v] is not v:
            v = self._parent[v]
        return v

    def fresh(self, elem: str, count: int = 1) -> tuple[str, ...]:
        """``count`` new registers able to hold ``reg<elem>`` (scratch or a new value)."""
        cls = reg_class(elem)
        prefix = _CLASSES[cls][0]
        start = self._counts[cls]
        self._counts[cls] += count
        if count == 1:
            return (prefix + str(start),)
        return tuple(f"{prefix}{i}" for i in range(start, start + count))

    def of(self, v: Value) -> tuple[str, ...]:
        """The registers of ``v`` (one per register of a vector), allocated on first use."""
        names = self._names.get(v)
        if names is None:  # the ties are fixed: remember the root's names under v too
            root = self._root(v)
            names = self._names.get(root)
            if names is None:
                names = self._names[root] = self.fresh(*_elem(root.type))
            self._names[v] = names
        return names

    def one(self, v: Value) -> str:
        """The single register of the scalar ``v``."""
        regs = self._names.get(v) or self.of(v)
        if len(regs) != 1:
            raise RenderError(f"expected a single register, got a vector of {len(regs)}")
        return regs[0]

    def vec(self, v: Value) -> str:
        """The registers of ``v`` as a PTX vector operand ``{%f0, %f1, ...}``."""
        return braced(self.of(v))

    def declarations(self) -> list[str]:
        """``.reg`` lines for every class in use (``%f<N>`` declares ``%f0..%f{N-1}``)."""
        return [f".reg {decl} {prefix}<{self._counts[cls]}>;"
                for cls, (prefix, decl) in _CLASSES.items() if self._counts[cls]]


class _Ties:
    """Union-find over values: a loop's carried values and results, a ``wgmma``'s
    accumulator and result."""

    def __init__(self) -> None:
        self.parent: dict[Value, Value] = {}
        self.wgmma = False  # whether the kernel has a wgmma (whose ties need checks)

    def find(self, v: Value) -> Value:
        while self.parent.get(v, v) is not v:
            v = self.parent[v]
        return v

    def union(self, a: Value, b: Value, loc: Loc) -> None:
        if a.type != b.type:
            raise RenderError(f"values of types {a.type} and {b.type} must share registers",
                              hint="a loop's carried values and results keep one type", loc=loc)
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra

    def visit(self, block: Block) -> None:
        for instr in block.instrs:
            if instr.regions:
                for region in instr.regions:
                    for b in region.blocks:
                        self.visit(b)
                self._tie(instr)
            elif isinstance(instr.op, Wgmma):
                self.wgmma = True
                self.union(instr.operands[0], instr.results[0], instr.loc)

    def _tie(self, instr: Instr) -> None:
        if isinstance(instr.op, For):
            for arg, res in zip(instr.regions[0].block.args[1:], instr.results):
                self.union(arg, res, instr.loc)
        elif isinstance(instr.op, While):
            cond, body = instr.regions[0].block, instr.regions[1].block
            for a, b, res in zip(cond.args, body.args, instr.results):
                self.union(a, b, instr.loc)
                self.union(a, res, instr.loc)


class _Places:
    """Program order and enclosing loops of every instruction and value."""

    def __init__(self, fn: Function) -> None:
        self.loops: dict[Value, tuple[Instr, ...]] = {}
        self.order: list[Instr] = []
        self.where: dict[Instr, tuple[Instr, ...]] = {}
        self.visit(fn.body, ())

    def visit(self, block: Block, loops: tuple[Instr, ...]) -> None:
        for arg in block.args:
            self.loops[arg] = loops
        for instr in block.instrs:
            self.order.append(instr)
            self.where[instr] = loops
            for res in instr.results:
                self.loops[res] = loops
            inner = (*loops, instr) if isinstance(instr.op, (For, While)) else loops
            for region in instr.regions:
                for b in region.blocks:
                    self.visit(b, inner)


def _check_wgmma(fn: Function) -> None:
    places = _Places(fn)
    position = {instr: i for i, instr in enumerate(places.order)}
    users: dict[Value, list[Instr]] = {}
    for instr in places.order:
        for v in instr.operands:
            users.setdefault(v, []).append(instr)
    for instr in places.order:
        if not isinstance(instr.op, Wgmma):
            continue
        acc = instr.operands[0]
        later = [u for u in users.get(acc, []) if position[u] > position[instr]]
        if later:
            raise RenderError(
                f"the accumulator of {instr.op.name} is used after it (by {later[0].op.name}); "
                "wgmma overwrites its accumulator registers in place",
                hint="use the wgmma's result instead of its accumulator operand", loc=instr.loc)
        if places.loops.get(acc, ()) != places.where[instr]:
            raise RenderError(
                f"the accumulator of {instr.op.name} is defined outside the loop the wgmma "
                "runs in, so the next iteration would read overwritten registers",
                hint="carry the accumulator through the loop (a ptx.for carried value)",
                loc=instr.loc)


def tie_values(fn: Function) -> dict[Value, Value]:
    """The union-find parent map of values that share registers (see the module doc).

    Raises :class:`RenderError` when a ``ptx.wgmma`` accumulator operand is used after
    the instruction, or is defined outside a loop that the ``wgmma`` runs in (the next
    iteration would read the overwritten registers).
    """
    ties = _Ties()
    ties.visit(fn.body)
    if ties.wgmma:
        _check_wgmma(fn)
    return ties.parent


__all__ = ["Registers", "RenderError", "braced", "operand", "reg_class", "tie_values"]
