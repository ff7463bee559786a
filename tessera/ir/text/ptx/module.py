"""A PTX module read into Target IR: directives, kernels, registers, blocks, branches.

Module directives (PTX ISA chapter 11): ``.version``, ``.target``, ``.address_size`` (64
only), ``.shared`` variables (placed in every kernel's shared window, in declaration
order, at their alignment), ``.entry`` kernels with their ``.param`` lists (``.ptr``/
state-space/``.align`` attributes; ``.align 64 .b8 name[128]`` tensor maps) and
performance directives (``.maxntid``, ``.reqntid``, ``.minnctapersm``, ``.maxnreg``,
recorded), and ``.func`` device functions, inlined where they are called (:mod:`.calls`).
Inside a kernel: ``.reg`` declarations (``%r<N>`` ranges, nested ``{ }`` scopes of
inline assembly), ``.shared`` and ``.extern .shared`` (dynamic) variables, labels,
``@%p``/``@!%p`` guards and the branches ``bra``, ``ret``, ``exit`` and ``trap``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tessera.arch.limits import SHARED_BASE
from tessera.errors import Loc
from tessera.ir.dialects.target.cfg import (
    BasicBlock,
    Branch,
    CfgKernel,
    GlobalVar,
    KernelParam,
    PtxInstr,
    SharedVar,
)
from tessera.ir.text.ptx import calls, isa_types, isa_versions
from tessera.ir.text.ptx import composed as _composed
from tessera.ir.text.ptx import floats as _floats
from tessera.ir.text.ptx import hopper as _hopper
from tessera.ir.text.ptx import memory as _memory
from tessera.ir.text.ptx import texture as _texture
from tessera.ir.text.ptx import warp as _warp
from tessera.ir.text.ptx.arith import HANDLERS
from tessera.ir.text.ptx.context import InstrBuilder, KernelScope
from tessera.ir.text.ptx.declarations import (
    SIZES,
    global_var,
    layout,
    read_params,
    shared_var,
    variable,
)
from tessera.ir.text.ptx.lexer import (
    PtxSyntaxError,
    PtxUnsupportedError,
    Statement,
    parse_int,
    split_operands,
    statements,
)

_ = (_composed, _floats, _hopper, _memory, _texture, _warp)  # register the other modules' handlers
_GUARD = re.compile(r"^@(!?)(%?[A-Za-z_$][\w$]*)\s+(.*)$", re.S)
_OPCODE = re.compile(r"([A-Za-z_][\w.:]*)\s*(.*)$", re.S)  # ptxas: add.u32%r1, ... is add.u32
_PERF = ("maxntid", "reqntid", "minnctapersm", "maxnreg", "maxclusterrank", "reqnctapercluster",
         "explicitcluster", "noreturn", "pragma")


@dataclass
class PtxModule:
    """The kernels (``.entry``) of one PTX file, its text and header directives."""

    file: str
    text: str = ""
    version: str = ""
    target: str = ""
    address_size: int = 64
    kernels: dict[str, CfgKernel] = field(default_factory=dict)
    globals: list[GlobalVar] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    bodies: dict[str, calls.DeviceFunction] = field(default_factory=dict)
    stmts: list[Statement] = field(default_factory=list)
    called: set[str] = field(default_factory=set)


class _KernelReader:
    """Reads one ``.entry`` body into a :class:`CfgKernel`."""

    def __init__(self, name: str, params: list[KernelParam], shared: list[SharedVar],
                 target: str, loc: Loc, attrs: dict[str, object],
                 globals_: list[GlobalVar], module: PtxModule) -> None:
        self.scope = KernelScope()
        self.scope.params = {p.name: p for p in params}
        self.scope.shared = {v.name: v.address for v in shared}
        self.scope.globals = {v.name: v.address for v in globals_}
        self.globals = list(globals_)
        self.local_size = 0  # bytes of .local variables per thread
        self.name, self.params, self.target, self.loc, self.attrs = (
            name, params, target, loc, attrs)
        self.shared = list(shared)
        self.blocks: list[tuple[str | None, list[PtxInstr], dict[str, object] | None]] = []
        self.labels: dict[str, int] = {}
        self.functions, self.stmts, self.called = module.bodies, module.stmts, module.called
        self.version = isa_versions.parse_version(module.version)
        self.scope.target, self.scope.version = target, self.version
        self.calls: list[tuple[str, str]] = []  # (callee, its return label) being inlined
        # labels are scoped like registers: each nested { } block has a number, and a
        # label defined in one is named apart (inline assembly repeats its loop labels)
        self.blocks_open: list[int] = []
        self.blocks_made = 0
        self.inlined = 0
        self.param_undo: list[list[tuple[str, int | None]]] = [[]]
        self._start(None)

    def body(self, stmts: list[Statement], i: int) -> int:
        """Read the statements from ``i`` (just after a ``{``) to the ``}`` that closes
        it; that ``}``'s index, or -1 when none does."""
        depth = 1
        while i < len(stmts):
            st = stmts[i]
            if st.kind == "open":
                depth += 1
                self.scope.scopes.append({})
                self.param_undo.append([])
                self.blocks_made += 1
                self.blocks_open.append(self.blocks_made)
            elif st.kind == "close":
                depth -= 1
                if depth == 0:
                    return i
                self.scope.scopes.pop()
                self.blocks_open.pop()
                calls.unbind(self)
            elif st.kind == "label":
                name = self._renamed(st.text)
                self.label(f"{name}/{self.blocks_open[-1]}" if self.blocks_open else name,
                           st.loc)
            elif st.text.startswith("."):
                self.declare(st)
            else:
                self.instruction(st)
            i += 1
        return -1

    def _renamed(self, label: str) -> str:
        """A label of the function being inlined, named apart for this call."""
        return f"{label}@{self.calls[-1][1]}" if self.calls else label

    def _start(self, label: str | None) -> None:
        self.blocks.append((label, [], None))

    def _end(self, end: dict[str, object]) -> None:
        label, body, _ = self.blocks[-1]
        self.blocks[-1] = (label, body, end)
        self._start(None)

    def label(self, name: str, loc: Loc) -> None:
        if name in self.labels:  # named as written, not as scoped or inlined here
            raise PtxSyntaxError(f"label {re.split('[/@]', name)[0]} defined twice", loc=loc)
        label, body, end = self.blocks[-1]
        if body or end is not None:
            self._end({"kind": "jump", "target": None, "loc": loc, "text": ""})
            self.blocks[-1] = (name, [], None)
        elif label is None:
            self.blocks[-1] = (name, body, end)
        self.labels[name] = len(self.blocks) - 1

    def declare(self, stmt: Statement) -> None:
        text = stmt.text
        if text.startswith(".reg"):
            words = text[len(".reg"):].replace(",", " ").split()
            types = [w[1:] for w in words if w.startswith(".")]
            names = [w for w in words if not w.startswith(".")]
            if len(types) != 1 or types[0] == "v2" or types[0] == "v4":
                raise PtxUnsupportedError(f"register declaration '{text}'", loc=stmt.loc)
            for n in names:
                m = re.match(r"^(%[\w$]+)<(\d+)>$", n)
                if m:
                    for k in range(int(m.group(2))):
                        self.scope.declare(f"{m.group(1)}{k}", types[0], stmt.loc)
                else:
                    self.scope.declare(n, types[0], stmt.loc)
        elif text.startswith((".shared", ".extern")):
            return  # placed before the body is read (layout)
        elif text.startswith(".local"):
            name, elem, length, align = variable(text[len(".local"):], stmt.loc,
                                                  "local variable")
            address = -(-self.local_size // align) * align
            self.scope.local[name] = address
            self.local_size = address + SIZES[elem] * max(length, 1)
        elif text.startswith((".global", ".const")):
            raise PtxUnsupportedError(f"the {text.split()[0]} state space ('{text}')",
                                      loc=stmt.loc)
        elif text.startswith(".pragma"):
            return
        elif text.startswith(".param"):
            calls.declare_param(self, stmt)
        else:
            raise PtxUnsupportedError(f"directive '{text}' inside a kernel", loc=stmt.loc)

    def instruction(self, stmt: Statement) -> None:
        text = stmt.text
        guard = None
        m = _GUARD.match(text)
        if m:
            guard = (m.group(1) == "!", m.group(2))
            text = m.group(3).strip()
        opcode, rest = (o.group(1), o.group(2)) if (o := _OPCODE.match(text)) else (text, "")
        head, *mods = opcode.split(".")
        mods = isa_types.types_last(head, mods)
        ops = split_operands(rest.strip(), stmt.loc) if rest.strip() else []
        b = InstrBuilder(self.scope, stmt.text, stmt.loc, head)
        reg_guard = None
        if guard is not None:
            reg_guard = (b.register(guard[1]), guard[0])
            if self.scope.registers[reg_guard[0]] != "pred":
                raise PtxSyntaxError(f"guard {guard[1]} is not a .pred register", loc=stmt.loc)
        if head in ("bra", "ret", "exit", "trap", "brkpt"):
            self._branch(head, mods, ops, reg_guard, stmt)
            return
        if head == "call":
            calls.inline(self, mods, ops, guard is not None, stmt)
            return
        rule = HANDLERS.get(head)
        if rule is None:
            raise PtxUnsupportedError(f"unknown instruction '{opcode}' in '{stmt.text}'",
                                      loc=stmt.loc)
        isa_types.check_type(b, mods, self.target, self.version)
        rule(b, mods, ops)
        b.pi.guard = reg_guard
        self.blocks[-1][1].append(b.pi)

    def _branch(self, head: str, mods: list[str], ops: list[str],
                guard: tuple[str, bool] | None, stmt: Statement) -> None:
        if (len(ops) != 1) if head == "bra" else bool(ops):
            want = "one label" if head == "bra" else "no operand"
            raise PtxSyntaxError(f"{head} takes {want} in '{stmt.text}'", loc=stmt.loc)
        if mods not in ([], ["uni"]) or (mods and head not in ("bra", "ret")):
            raise PtxSyntaxError(f"{head} takes {'only .uni' if head in ('bra', 'ret') else 'no'}"
                                 f" modifier in '{stmt.text}'", loc=stmt.loc)
        if head == "bra":
            target: str | None = self._renamed(ops[0].strip())
        elif head == "ret" and self.calls:
            target = self.calls[-1][1]  # back to the caller
        else:
            target = f"<{head}>"
        end = {"kind": "jump", "target": target, "loc": stmt.loc, "text": stmt.text,
               "blocks": tuple(self.blocks_open)}
        if guard is not None:
            end.update(kind="cond", guard=guard)
        self._end(end)

    def finish(self, loc: Loc) -> CfgKernel:
        exits: dict[str, int] = {}
        blocks: list[BasicBlock] = []
        raw = self.blocks

        def block_of(target: str, at: Loc, blocks: tuple[int, ...]) -> int:
            if target in ("<ret>", "<exit>", "<trap>", "<brkpt>"):
                if target not in exits:
                    exits[target] = len(raw) + len(exits)
                return exits[target]
            for scoped in [f"{target}/{k}" for k in reversed(blocks)] + [target]:
                if scoped in self.labels:  # the innermost block defining it
                    return self.labels[scoped]
            # a function's labels are renamed apart per call ('@' is no identifier's)
            raise PtxSyntaxError(f"branch to unknown label {target.split('@')[0]}", loc=at)

        for k, (label, body, end) in enumerate(raw):
            e = end or {"kind": "jump", "target": "<ret>", "loc": loc, "text": "ret"}
            at = e["loc"]
            assert isinstance(at, Loc)
            tgt = e["target"]
            index = k + 1 if tgt is None else block_of(
                str(tgt), at, e.get("blocks", ()))  # type: ignore[arg-type]
            if e["kind"] == "cond":
                branch = Branch("cond", at, str(e["text"]), index, k + 1,
                                e["guard"])  # type: ignore[arg-type]
            else:
                branch = Branch("jump", at, str(e["text"]), index)
            blocks.append(BasicBlock(label, body, branch))
        for target in sorted(exits, key=exits.get):  # type: ignore[arg-type]
            kind = "trap" if target in ("<trap>", "<brkpt>") else "ret"
            blocks.append(BasicBlock(target, [], Branch(kind, loc, target[1:-1])))
        static = max((v.address + v.size for v in self.shared if not v.dynamic),
                     default=SHARED_BASE) - SHARED_BASE
        return CfgKernel(self.name, self.params, dict(self.scope.registers), self.shared,
                         blocks, self.target, self.loc, static, self.attrs,
                         local_bytes=self.local_size, globals=self.globals)


def parse_ptx(text: str, file: str = "<ptx>") -> PtxModule:
    """Read PTX ``text`` (from ``file``) into a :class:`PtxModule`; raises
    :class:`PtxSyntaxError` or :class:`PtxUnsupportedError` naming the line."""
    module = PtxModule(file, text)
    stmts = module.stmts = statements(text, file)
    for k, s in enumerate(stmts):  # every function's body, wherever it is defined
        if s.kind == "stmt" and re.match(r"^(\.(visible|weak|extern)\s+)*\.func\b", s.text):
            fn = calls.function(stmts, k)
            if fn.body is not None or fn.name not in module.bodies:
                module.bodies[fn.name] = fn
    shared: list[SharedVar] = []
    i = 0
    while i < len(stmts):
        s = stmts[i]
        words = s.text.split()
        head = [w for w in words if w not in (".visible", ".weak", ".extern")][:1]
        if s.kind != "stmt":
            raise PtxSyntaxError(f"unexpected '{s.text}' at module level", loc=s.loc)
        if words[0] == ".version":
            module.version = words[1]
        elif words[0] == ".target":
            module.target = s.text.split(None, 1)[1].replace(" ", "")
            if problem := isa_versions.target_problem(
                    module.target, isa_versions.parse_version(module.version)):
                raise PtxSyntaxError(problem, loc=s.loc)
        elif words[0] == ".address_size":
            module.address_size = int(words[1])
            if module.address_size != 64:
                raise PtxUnsupportedError("32-bit addressing (.address_size 32)", loc=s.loc)
        elif head == [".entry"]:
            i = _kernel(module, stmts, i, shared)
            continue
        elif head == [".func"]:
            i = _skip_function(module, stmts, i)
            continue
        elif ".shared" in words[:2]:
            shared.append(shared_var(s.text, s.loc, shared))
        elif head and head[0] in (".global", ".const"):
            module.globals.append(global_var(s.text, s.loc, module.globals))
        else:
            raise PtxUnsupportedError(f"directive '{s.text}'", loc=s.loc)
        i += 1
    _read_uncalled(module, shared)
    return module


def _read_uncalled(module: PtxModule, shared: list[SharedVar]) -> None:
    """Read each defined function that no kernel calls, for its mistakes alone: what
    it uses that the reader does not model is no error, as nothing here runs it."""
    for fn in list(module.bodies.values()):
        if fn.body is None or fn.name in module.called:
            continue
        reader = _KernelReader(fn.name, [], layout(shared, []), module.target, fn.loc, {},
                               module.globals, module)
        try:
            calls.read_alone(reader, fn)
            reader.finish(fn.loc)
        except PtxUnsupportedError:
            pass


def _close(stmts: list[Statement], i: int) -> int:
    """The index of the ``}`` closing the ``{`` at ``i``."""
    depth = 0
    for j in range(i, len(stmts)):
        depth += {"open": 1, "close": -1}.get(stmts[j].kind, 0)
        if depth == 0:
            return j
    return len(stmts)


def _skip_function(module: PtxModule, stmts: list[Statement], i: int) -> int:
    """Record a ``.func`` (declaration or definition) and return the next index."""
    s = stmts[i]
    m = re.search(r"\.func\s*(?:\([^)]*\))?\s*([\w$]+)", s.text)
    module.functions.append(m.group(1) if m else "?")
    if i + 1 < len(stmts) and stmts[i + 1].kind == "open":
        depth, i = 0, i + 1
        while i < len(stmts):
            depth += {"open": 1, "close": -1}.get(stmts[i].kind, 0)
            i += 1
            if depth == 0:
                break
        return i
    return i + 1


def _kernel(module: PtxModule, stmts: list[Statement], i: int,
            shared: list[SharedVar]) -> int:
    s = stmts[i]
    m = re.search(r"\.entry\s+([\w$]+)", s.text)
    if not m:
        raise PtxSyntaxError(f"cannot read the kernel name in '{s.text}'", loc=s.loc)
    name = m.group(1)
    attrs: dict[str, object] = {}
    tail = s.text[s.text.rindex(")") + 1:] if ")" in s.text else ""
    for d in re.finditer(r"\.(\w+)\s*([\d,\s]*)", tail):
        if d.group(1) not in _PERF:
            raise PtxUnsupportedError(f"kernel directive .{d.group(1)}", loc=s.loc)
        attrs[d.group(1)] = tuple(int(x) for x in d.group(2).replace(",", " ").split())
    if i + 1 >= len(stmts) or stmts[i + 1].kind != "open":
        raise PtxSyntaxError(f"kernel {name} has no body", loc=s.loc)
    local = [st for st in stmts[i + 2:_close(stmts, i + 1)]
             if st.kind == "stmt" and st.text.startswith((".shared", ".extern"))]
    reader = _KernelReader(name, read_params(s.text, s.loc), layout(shared, local),
                           module.target, s.loc, attrs, module.globals, module)
    i = reader.body(stmts, i + 2)
    if i < 0:
        raise PtxSyntaxError(f"kernel {name} is not closed", loc=s.loc)
    module.kernels[name] = reader.finish(stmts[i].loc)
    return i + 1


__all__ = ["PtxModule", "parse_int", "parse_ptx", "shared_var"]
