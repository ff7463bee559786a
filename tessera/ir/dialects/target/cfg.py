"""Target IR in PTX's own shape: basic blocks, branches and mutable registers.

Structured Target IR (``ptx.if``/``ptx.for``) is what tessera lowers to; PTX written
by other compilers (nvcc, Triton) is a control-flow graph over mutable, typed
registers. A :class:`CfgKernel` keeps that shape without giving up Target IR: every
PTX instruction becomes a short list of ordinary Target IR instructions over their
own SSA values (:class:`PtxInstr`), and *bindings* say which PTX registers those
values are read from before and written to after (a vector operand such as
``{%f1, %f2}`` binds one value to several registers). A register is untyped storage
of its declared width; an instruction reads it as the type it names (``add.s32`` on a
``.b32`` register), exactly as PTX does.

Blocks end in a :class:`Branch`. :func:`schedule_order` numbers the blocks so that
running, at each step, the waiting threads of the lowest-numbered block reconverges
divergent threads at the branch's immediate post-dominator in reducible CFGs (the
"thread frontier" scheduling of Diamos et al., MICRO 2011): a loop's blocks come before
its exits, and every block comes before the blocks it branches forward to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.errors import Loc
from tessera.ir.core import Instr, Value

#: (predicate register, negated) of an ``@%p`` / ``@!%p`` guard
Guard = tuple[str, bool]


@dataclass(eq=False)
class PtxInstr:
    """One PTX instruction: Target IR ``instrs`` run in order on the threads whose
    ``guard`` holds; ``reads`` fill operand values from registers first, ``writes``
    store result values into registers after (per thread, guarded)."""

    text: str
    loc: Loc
    instrs: list[Instr] = field(default_factory=list)
    reads: list[tuple[Value, tuple[str, ...]]] = field(default_factory=list)
    writes: list[tuple[Value, tuple[str, ...]]] = field(default_factory=list)
    guard: Guard | None = None


@dataclass(frozen=True)
class Branch:
    """A block's end: ``kind`` is ``jump`` (to ``target``), ``cond`` (to ``target``
    where ``guard`` holds, else to ``fallthrough``), ``ret`` or ``trap``."""

    kind: str
    loc: Loc
    text: str = ""
    target: int = -1
    fallthrough: int = -1
    guard: Guard | None = None

    def successors(self) -> list[int]:
        """Blocks this branch may go to, the taken target first."""
        if self.kind == "jump":
            return [self.target]
        if self.kind == "cond":
            return [self.target, self.fallthrough]
        return []


@dataclass(eq=False)
class BasicBlock:
    """A label (or ``None`` for a fall-through block), instructions and the branch."""

    label: str | None
    body: list[PtxInstr]
    end: Branch


@dataclass(frozen=True)
class KernelParam:
    """A ``.param`` of an ``.entry``: PTX type (``u32``, ``f32``, ``b8`` ...), byte
    offset in the parameter space, size in bytes, alignment and array length (0 for a
    scalar; ``.align 64 .b8 tmap[128]`` is a tensor map)."""

    name: str
    type: str
    offset: int
    size: int
    align: int
    array: int = 0


@dataclass(frozen=True)
class SharedVar:
    """A ``.shared`` variable at shared address ``address`` (the first at
    :data:`~tessera.arch.limits.SHARED_BASE`; ``size`` 0 and ``dynamic`` for
    ``.extern .shared``, sized at launch)."""

    name: str
    address: int
    size: int
    align: int
    dynamic: bool = False


@dataclass(frozen=True, eq=False)
class GlobalVar:
    """A module-level ``.global`` or ``.const`` variable: ``size`` bytes at ``address``
    (the launch places the module's variables first, in declaration order), with its
    initial bytes (zeros unless the declaration has an initializer)."""

    name: str
    address: int
    size: int
    align: int
    space: str
    init: bytes


@dataclass(eq=False)
class CfgKernel:
    """An ``.entry`` read from PTX: parameters, registers (name -> declared type),
    shared variables, blocks (entry first), where it came from and the size of each
    thread's ``.local`` memory."""

    name: str
    params: list[KernelParam]
    registers: dict[str, str]
    shared: list[SharedVar]
    blocks: list[BasicBlock]
    target: str
    loc: Loc
    static_shared: int = 0
    attrs: dict[str, object] = field(default_factory=dict)
    local_bytes: int = 0  # .local variables of each thread
    globals: list[GlobalVar] = field(default_factory=list)  # the module's variables

    @property
    def param_bytes(self) -> int:
        """Size of the parameter space."""
        return max((p.offset + p.size for p in self.params), default=0)


def schedule_order(blocks: list[BasicBlock]) -> list[int]:
    """Priority of each block (lower runs first): a reverse postorder whose depth-first
    search enters successors that leave more loops first, so that every natural loop
    is contiguous and precedes its exits."""
    n = len(blocks)
    succ = [b.end.successors() for b in blocks]
    # loop headers and bodies from the back edges of a first depth-first search
    state = [0] * n  # 0 new, 1 on stack, 2 done
    back: list[tuple[int, int]] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    state[0] = 1
    while stack:
        node, k = stack.pop()
        if k < len(succ[node]):
            stack.append((node, k + 1))
            s = succ[node][k]
            if state[s] == 1:
                back.append((node, s))
            elif state[s] == 0:
                state[s] = 1
                stack.append((s, 0))
        else:
            state[node] = 2
    pred: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for s in succ[u]:
            pred[s].append(u)
    loops: list[set[int]] = [set() for _ in range(n)]  # the loop headers around a block
    for tail, head in back:
        body, work = {head}, [tail]
        while work:
            x = work.pop()
            if x not in body:
                body.add(x)
                work.extend(pred[x])
        for x in body:
            loops[x].add(head)
    # second search: successors outside more of the current block's loops go first,
    # so they finish first and land after the loop in reverse postorder
    post: list[int] = []
    seen = [False] * n
    seen[0] = True
    stack = [(0, 0)]
    order_succ = [sorted(succ[u], key=lambda s, u=u: -len(loops[u] - loops[s]))
                  for u in range(n)]
    while stack:
        node, k = stack.pop()
        if k < len(order_succ[node]):
            stack.append((node, k + 1))
            s = order_succ[node][k]
            if not seen[s]:
                seen[s] = True
                stack.append((s, 0))
        else:
            post.append(node)
    rank = [n + i for i in range(n)]  # unreachable blocks last
    for i, node in enumerate(reversed(post)):
        rank[node] = i
    return rank


__all__ = ["BasicBlock", "Branch", "CfgKernel", "GlobalVar", "Guard", "KernelParam", "PtxInstr",
           "SharedVar", "schedule_order"]
