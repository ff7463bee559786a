"""Building one PTX instruction's Target IR: operands read, instructions, results.

An :class:`InstrBuilder` turns operand tokens into Target IR values: a register is a
fresh value bound to it (read as the instruction's type), an immediate a ``ptx.const``,
a special register a ``ptx.sreg``, an address symbol its address, ``{%a, %b}`` one
vector value bound to several registers. Results are bound to their destination
registers the same way. Ops are built through their ``infer``/``verify``, so every
instruction is checked as Target IR; a failure names the PTX line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.arch.limits import arch_number
from tessera.errors import IRVerifyError, Loc
from tessera.ir.core import Instr, Op, Value
from tessera.ir.dialects.target import REG_TYPES, RegType, ptx_ops
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.cfg import PtxInstr
from tessera.ir.text.ptx.isa_versions import too_old
from tessera.ir.text.ptx.lexer import (
    PtxSyntaxError,
    PtxUnsupportedError,
    is_decimal_float,
    parse_float_bits,
    parse_int,
)

_SPECIAL = {"%tid", "%ntid", "%ctaid", "%nctaid", "%clusterid", "%nclusterid", "%cluster_ctaid",
            "%cluster_nctaid"}
_SPECIAL_SCALAR = {"%laneid": "laneid", "%warpid": "warpid", "%smid": "smid", "%nsmid": "nsmid",
                   "%nwarpid": "nwarpid", "%cluster_ctarank": "cluster_ctarank",
                   "%cluster_nctarank": "cluster_nctarank",
                   "%is_explicit_cluster": "is_explicit_cluster",
                   **{f"%lanemask_{c}": f"lanemask_{c}" for c in ("eq", "lt", "le", "gt", "ge")},
                   **{f"%{c}": c for c in target_ops.CLOCKS + target_ops.ENVREGS}}
_REG = re.compile(r"^%[A-Za-z_$][\w$]*$|^%[A-Za-z_$][\w$]*<\d+>$")


@dataclass
class KernelScope:
    """What an instruction may name: registers (scoped name -> declared type), the
    nested-scope renaming, shared, local and module variables' addresses, parameters
    (and the ``.param`` variables of device-function calls, which live in local memory)."""

    registers: dict[str, str] = field(default_factory=dict)
    scopes: list[dict[str, str]] = field(default_factory=lambda: [{}])
    shared: dict[str, int] = field(default_factory=dict)
    local: dict[str, int] = field(default_factory=dict)
    globals: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    call_params: set[str] = field(default_factory=set)  # .param variables of calls
    labels: dict[str, int] = field(default_factory=dict)
    counter: int = 0
    target: str = "sm_90a"  # the module's .target and .version, for operand-made forms
    version: tuple[int, int] | None = None

    def resolve(self, name: str) -> str | None:
        """The unique name of register ``name`` in the innermost scope declaring it."""
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declare(self, name: str, type: str, loc: Loc) -> None:
        """Declare register ``name`` of ``type`` in the current scope."""
        if type not in REG_TYPES:
            raise PtxUnsupportedError(f"registers of type .{type} ({name})", loc=loc)
        unique = name
        if len(self.scopes) > 1 or name in self.registers:
            self.counter += 1
            unique = f"{name}#{self.counter}"
        self.scopes[-1][name] = unique
        self.registers[unique] = type


class InstrBuilder:
    """Collects the Target IR of one PTX instruction."""

    def __init__(self, scope: KernelScope, text: str, loc: Loc, head: str = "") -> None:
        self.scope = scope
        self.loc = loc
        self.head = head  # the opcode without modifiers
        self.pi = PtxInstr(text, loc)
        # ld, st and cvt may name registers wider than their type (PTX ISA, "Operand
        # Size Exceeding Instruction-Type Size"); a byte access any integer register
        self.relaxed = head in ("ld", "st", "cvt")
        self.any_width = False
        self._address = False

    # ---------------------------------------------------------------- errors
    def syntax(self, message: str) -> PtxSyntaxError:
        """A syntax error at this instruction."""
        return PtxSyntaxError(f"{message} in '{self.pi.text}'", loc=self.loc)

    def unsupported(self, what: str) -> PtxUnsupportedError:
        """An unsupported-form error at this instruction."""
        return PtxUnsupportedError(f"{what} in '{self.pi.text}' is not supported",
                                   loc=self.loc)

    def require(self, feature: str, sm: int, version: tuple[int, int]) -> None:
        """A syntax error unless the module's ``.target`` is ``sm_<sm>`` or later and its
        ``.version`` at least ``version``, as ptxas wants for a form an operand makes
        (``feature`` names it)."""
        if arch_number(self.scope.target) < sm:
            raise self.syntax(f"{feature} needs .target sm_{sm} or higher, not "
                              f"{self.scope.target}")
        if problem := too_old(feature, version, self.scope.version):
            raise self.syntax(problem)

    # ---------------------------------------------------------------- building
    def emit(self, op: Op, operands: Sequence[Value] = ()) -> list[Value]:
        """Append ``op(operands)``, checked by the op's ``infer``/``verify``."""
        types = [v.type for v in operands]
        try:
            results = op.infer(types)
            op.verify(types, results)
        except IRVerifyError as err:
            raise PtxSyntaxError(f"'{self.pi.text}': {err.message}", hint=err.hint,
                                 loc=self.loc) from None
        instr = Instr(op, list(operands), [], [], self.loc)
        instr.results = [Value(t, instr) for t in results]
        self.pi.instrs.append(instr)
        return instr.results

    def one(self, op: Op, *operands: Value) -> Value:
        """The one result of ``op(operands)``, appended as :meth:`emit` appends it."""
        (v,) = self.emit(op, operands)
        return v

    def bit_field(self, t: str, x: Value, start: int, width: int) -> Value:
        """Bits ``start .. start + width`` of ``x`` (``bfe``), sign-extended when ``t`` is
        signed."""
        return self.one(ptx_ops.Bfe(t), x, self.const(start, "u32"), self.const(width, "u32"))

    def const(self, value: Any, elem: str) -> Value:
        """An immediate of PTX type ``elem``."""
        return self.emit(target_ops.Const(value, elem))[0]

    def register(self, token: str) -> str:
        """The unique name of a declared register token."""
        name = self.scope.resolve(token.strip())
        if name is None:
            raise PtxSyntaxError(f"register {token.strip()} is not declared (in "
                                 f"'{self.pi.text}')", loc=self.loc)
        return name

    def is_register(self, token: str) -> bool:
        """Whether ``token`` names a declared register."""
        return self.scope.resolve(token.strip()) is not None

    def read(self, token: str, elem: str) -> Value:
        """The value of operand ``token`` read as PTX type ``elem``."""
        t = token.strip()
        if t.startswith("{"):
            parts = [x.strip() for x in t[1:-1].split(",")]
            names = [self.register(x) for x in parts if self.is_register(x)]
            if len({self.scope.registers[n] for n in names}) > 1:
                raise self.syntax("vector elements in registers of different types")
            if len(names) < len(parts):
                # a source vector may hold immediates ({0, %r1}): ptxas moves them in
                (v,) = self.emit(target_ops.Pack(elem), [self.element(x, elem) for x in parts])
                return v
            for part, name in zip(parts, names):
                self.check_register(part, name, elem)
            v = Value(RegType(elem, len(names)))
            self.pi.reads.append((v, tuple(names)))
            return v
        if self.is_register(t):
            name = self.register(t)
            self.check_register(t, name, elem)
            v = Value(RegType(elem))
            self.pi.reads.append((v, (name,)))
            return v
        if t.startswith("!") and elem == "pred":
            (p,) = self.emit(target_ops.Unary("not", "pred"), [self.read(t[1:], "pred")])
            return p
        special = self.special(t, elem)
        if special is not None:
            return special
        return self.immediate(t, elem)

    def element(self, t: str, elem: str) -> Value:
        """One element of a vector operand (``{%r1, 0}``) read as ``elem``: a register
        or a literal (ptxas refuses an address symbol; a special register outside
        ``mov`` and a decimal float for an integer type are forms it takes and this
        reader does not model)."""
        if self.is_register(t):
            return self.read(t, elem)
        head, _, comp = t.partition(".")
        special = (head in _SPECIAL and comp in ("x", "y", "z")) or t in _SPECIAL_SCALAR
        if special and self.head != "mov":
            raise self.unsupported(f"special register {t} in a vector")
        if is_decimal_float(t) and REG_TYPES[elem][1] != "f":
            raise self.unsupported(f"float literal {t} in a .{elem} vector")
        if self.symbol_address(t) is not None:
            raise self.syntax(f"address {t} in a vector: its elements are registers and "
                              "literals")
        return self.read(t, elem)

    def immediate(self, t: str, elem: str) -> Value:
        """A literal or an address symbol as a value of ``elem``."""
        bits, kind = REG_TYPES[elem]
        if t.startswith("%"):
            raise PtxSyntaxError(f"register {t} is not declared (in '{self.pi.text}')",
                                 loc=self.loc)
        number = parse_int(t)
        if number is not None:
            if kind == "f":
                raise self.syntax(f"integer literal {t} for a .{elem} operand")
            if kind == "p":
                return self.const(bool(number), "pred")
            return self.const(number, elem)
        fbits = parse_float_bits(t)
        if fbits is not None and kind == "b" and fbits[1] == bits:
            return self.const(fbits[0], elem)  # 0f/0d literals as bit patterns
        if fbits is not None or is_decimal_float(t):
            if kind != "f" or elem in ("f16x2", "bf16x2"):
                raise self.syntax(f"float literal {t} for a .{elem} operand")
            if fbits is not None:
                pattern, width = fbits
                x = (np.array(pattern, np.uint32).view(np.float32) if width == 32
                     else np.array(pattern, np.uint64).view(np.float64))
            else:
                x = np.float64(float(t))
            return self.const(np.asarray(x).astype(np.dtype(
                {"f16": "f2", "f32": "f4", "f64": "f8"}.get(elem, "f4")))[()], elem)
        address = self.symbol_address(t)
        if address is not None:
            if kind not in "usb" or bits < 32:
                raise self.syntax(f"address {t} for a .{elem} operand")
            return self.const(address, elem)
        raise self.syntax(f"unknown operand {t!r}")

    def symbol_address(self, name: str) -> int | None:
        """The state-space address of a shared variable or a parameter named ``name``
        (with a constant byte offset: ``smem+32768``, as a dynamic shared buffer is
        addressed), or None."""
        base, plus, offset = name.partition("+")
        if plus:
            at, extra = self.symbol_address(base.strip()), parse_int(offset.strip())
            return None if at is None or extra is None else at + extra
        if name in self.scope.shared:
            return self.scope.shared[name]
        if name in self.scope.local:
            return self.scope.local[name]
        if name in self.scope.globals:
            return self.scope.globals[name]
        if name in self.scope.params:  # its .param address; cvta.param makes it generic
            return self.scope.params[name].offset
        return None

    def special(self, t: str, elem: str) -> Value | None:
        """A special register read as ``elem``, or None when ``t`` is not one."""
        head, _, comp = t.partition(".")
        if head in _SPECIAL and comp in ("x", "y", "z"):
            reg = f"{head[1:]}.{comp}"
        elif t in _SPECIAL_SCALAR:
            reg = _SPECIAL_SCALAR[t]
        elif t.startswith("%") and not self.is_register(t) and (
                t in ("%smid", "%nsmid", "%dynamic_smem_size") or head in _SPECIAL):
            raise self.unsupported(f"special register {t}")
        else:
            return None
        if reg in target_ops.CLUSTER_REGS:
            self.require(f"special register {t}", 90, (7, 8))
        if reg == "is_explicit_cluster":  # the one predicate
            if self.head != "mov" or elem != "pred":
                raise self.syntax(f"special register {t} is read by mov.pred only")
            return self.emit(target_ops.Special(reg))[0]
        if reg in target_ops.WIDE_CLOCKS:  # the 64-bit special registers
            if self.head != "mov" or elem not in ("b64", "u64", "s64"):
                raise self.syntax(f"special register {t} is read by mov of 64 bits only")
            (v,) = self.emit(target_ops.Special(reg))
            return v if elem == "u64" else self.bitcast(v, elem)
        if self.head not in ("mov", "cvt") or (self.head == "mov" and elem not in (
                "b32", "u32", "s32")) or REG_TYPES[elem][1] in "fp" or REG_TYPES[elem][0] > 32:
            raise self.syntax(f"special register {t} is read by mov of 32 bits (or cvt to "
                              f"widen it) only")
        (v,) = self.emit(target_ops.Special(reg))
        if elem in ("u32", "b32", "s32"):
            return v if elem == "u32" else self.bitcast(v, elem)
        (w,) = self.emit(target_ops.Cvt(elem if elem != "b64" else "u64", "u32"), [v])
        return w if elem != "b64" else self.bitcast(w, elem)

    def bitcast(self, v: Value, elem: str) -> Value:
        """``v`` reinterpreted as ``elem`` of the same width (a one-register pack)."""
        (w,) = self.emit(target_ops.Pack(elem), [v])
        return w

    def write(self, token: str, value: Value) -> None:
        """Store ``value`` into the destination ``token`` (``_`` discards it)."""
        t = token.strip()
        if t == "_":
            return
        tokens = [x.strip() for x in t[1:-1].split(",")] if t.startswith("{") else [t]
        names = tuple(self.register(x) for x in tokens)
        vt = value.type
        assert isinstance(vt, RegType)
        if vt.count != len(names):
            raise self.syntax(f"{len(names)} destination registers for {vt.count} values")
        for part, name in zip(tokens, names):
            self.check_register(part, name, vt.elem)
        self.pi.writes.append((value, names))

    def check_register(self, token: str, name: str, elem: str) -> None:
        """A syntax error unless register ``token`` (declared under ``name``) can hold an
        operand of type ``elem`` (PTX ISA, "Operand Type Information"): a predicate only
        a predicate; a float register no signed or unsigned operand, an integer register
        no float one (bit-size registers and instruction types mix with any); the same
        width, or at least the width for ld, st and cvt (ptxas wants a bf16 operand of
        cvt in a 16-bit register). An address takes a 64-bit
        register, or a 32-bit one in the shared window."""
        declared = self.scope.registers[name]
        (ib, ik), (rb, rk) = REG_TYPES[elem], REG_TYPES[declared]
        if self._address:
            if rk in "pf" or rb < (32 if elem == "u32" else 64):
                raise self.syntax(f"address register {token} is a .{declared} register: an "
                                  f"address needs a {'32- or ' if elem == 'u32' else ''}"
                                  "64-bit integer register")
            return
        if (ik == "p") != (rk == "p") or {ik, rk} in ({"f", "u"}, {"f", "s"}) or (
                ik == rk == "f" and elem != declared):  # .f16 holds no bf16, .f32 no f16x2
            raise self.syntax(f"register {token} is a .{declared} register and cannot hold "
                              f"a .{elem} operand (a bit-size register or a .{elem} one can)")
        wide_enough = (self.relaxed and rb >= ib and not (ik == rk == "f")  # ptxas: not bf16
                       and not (self.head == "cvt" and elem.startswith("bf16"))) or self.any_width
        if rb != ib and not wide_enough:
            raise self.syntax(f"register {token} has {rb} bits; a .{elem} operand needs a "
                              f"{ib}-bit register")

    def address(self, token: str) -> tuple[str, int]:
        """``[base + offset]`` as (base token, offset)."""
        t = token.strip()
        if not (t.startswith("[") and t.endswith("]")):
            raise self.syntax(f"expected an address [..], got {t!r}")
        inner = t[1:-1].replace(" ", "")
        m = re.match(r"^(.*?)(?:\+(-?[0-9xXa-fA-F]+)|-([0-9xXa-fA-F]+))?$", inner)
        assert m is not None
        base = m.group(1)
        offset = 0
        if m.group(2) is not None:
            offset = parse_int(m.group(2)) or 0
        elif m.group(3) is not None:
            offset = -(parse_int(m.group(3)) or 0)
        if not base:
            raise self.syntax(f"address {t} has no base")
        return base, offset

    def read_address(self, token: str, elem: str) -> tuple[Value, int]:
        """An address operand as (base value of ``elem``, byte offset); a symbol's
        address is folded into the constant base."""
        base, offset = self.address(token)
        number = parse_int(base)
        if number is not None:
            return self.const(number + offset, elem), 0
        address = self.symbol_address(base)
        if address is not None:
            return self.const(address + offset, elem), 0
        self._address = True
        try:
            return self.read(base, elem), offset
        finally:
            self._address = False


__all__ = ["InstrBuilder", "KernelScope"]
