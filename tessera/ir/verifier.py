"""Level-independent verification: SSA scoping, per-op type rules, terminators."""

from __future__ import annotations

from tessera.errors import UNKNOWN_LOC, IRVerifyError, Loc
from tessera.ir.core import Block, Function, Module, Op, Value


def verify_block(block: Block, visible: set[Value], *, want_terminator: bool = True,
                 loc: Loc = UNKNOWN_LOC) -> None:
    """Check every instruction of ``block``: operands defined before use, types valid.
    ``visible`` (the values of the enclosing blocks) is the same set after the call."""
    added = [v for v in block.args if v not in visible]
    visible.update(added)
    try:
        _verify_instrs(block, visible, added)
    finally:
        # one set for the whole function: what this block defined goes out of scope
        # (copying the set per nested block would be quadratic in the kernel's size)
        visible.difference_update(added)
    if want_terminator and block.terminator is None:
        raise IRVerifyError("block does not end with a terminator",
                            hint="end every function and region with a return or yield",
                            loc=block.instrs[-1].loc if block.instrs else loc)


def _verify_instrs(block: Block, defined: set[Value], added: list[Value]) -> None:
    last = len(block.instrs) - 1
    for k, instr in enumerate(block.instrs):
        if not defined.issuperset(instr.operands):
            raise IRVerifyError(f"{instr.op.name} uses a value defined later or in another "
                                f"scope", loc=instr.loc,
                                hint="operands must be defined earlier in the same or an "
                                     "enclosing block")
        op = instr.op
        try:
            op.verify([v.type for v in instr.operands], [v.type for v in instr.results])
        except IRVerifyError as err:
            raise IRVerifyError(err.message, hint=err.hint, loc=instr.loc) from None
        if instr.regions or op.num_regions or type(op).verify_regions is not Op.verify_regions:
            if len(instr.regions) != op.num_regions:
                raise IRVerifyError(f"{op.name} has {len(instr.regions)} regions, expected "
                                    f"{op.num_regions}", loc=instr.loc)
            for region in instr.regions:
                for inner in region.blocks:
                    verify_block(inner, defined, loc=instr.loc)
            try:
                op.verify_regions(instr)
            except IRVerifyError as err:
                raise IRVerifyError(err.message, hint=err.hint, loc=instr.loc) from None
        if op.terminator and k != last:
            raise IRVerifyError(f"{op.name} must be the last instruction of its block",
                                loc=instr.loc)
        defined.update(instr.results)
        added.extend(instr.results)


def verify_function(fn: Function) -> None:
    """Verify a function: its body, and a return that matches the declared result types."""
    verify_block(fn.body, set(), loc=fn.loc)
    term = fn.body.terminator
    assert term is not None
    got = [v.type for v in term.operands]
    if got != list(fn.result_types):
        raise IRVerifyError(f"function @{fn.name} returns ({', '.join(map(str, got))}) but "
                            f"declares ({', '.join(map(str, fn.result_types))})", loc=term.loc)


def verify_module(module: Module) -> None:
    """Verify every function of a module."""
    for fn in module.functions.values():
        verify_function(fn)
