"""PTX rules of :mod:`tessera.ir.dialects.target.ptx_ops`, the instructions that PTX
from other compilers uses (read by :mod:`tessera.ir.text.ptx`): each renders back to
the PTX instruction it came from, so every Target IR op has a text form."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, address, mem_type, rule
from tessera.backend.ptx.render.regalloc import braced, operand
from tessera.ir.core import Instr
from tessera.ir.dialects.target import HALF_ATOMICS, RegType
from tessera.ir.dialects.target.memory_ops import SurfaceLoad, SurfaceStore, TexFetch
from tessera.ir.dialects.target.printf import AssertFail, DeviceFree, DeviceMalloc, Printf
from tessera.ir.dialects.target.ptx_ops import (
    Atom,
    Bfe,
    Bfi,
    BitCount,
    ByteLoad,
    ByteStore,
    Cvta,
    Elect,
    GenericLoad,
    GenericStore,
    Lop3,
    ParamLoad,
    Prmt,
    Shf,
    ShflSync,
    Stmatrix,
    TensorMapAt,
    Vote,
    WarpSync,
)
from tessera.ir.dialects.target.wmma import WmmaLoad, WmmaMma, WmmaStore

#: CUDA's device-runtime formatter, which printf calls (CUDA C++ Programming Guide,
#: "Formatted Output")
VPRINTF = (".extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, "
           ".param .b64 vprintf_param_1);")


def _library_call(e: PtxWriter, name: str, args: list[str], result: str = "",
                  result_type: str = "b64") -> None:
    """The call sequence of a device-runtime function of ``.b64`` parameters: each
    argument stored to a ``.param`` of its own, the result loaded from ``retval0``."""
    e.out("{")
    for k, a in enumerate(args):
        e.out(f".param .b64 param{k}; st.param.b64 [param{k}], {a};")
    params = ", ".join(f"param{k}" for k in range(len(args)))
    if result:
        e.out(f".param .{result_type} retval0;")
        e.out(f"call.uni (retval0), {name}, ({params});")
        e.out(f"ld.param.{result_type} {result}, [retval0];")
    else:
        e.out(f"call.uni {name}, ({params});")
    e.out("}")


@rule(Printf)
def _printf(e: PtxWriter, instr: Instr) -> None:
    e.externs.add(VPRINTF)
    _library_call(e, "vprintf", list(_regs(e, instr)), e.regs.one(instr.result), "b32")


#: what a failed device assert calls: message, file, line, function, character size
ASSERTFAIL = (".extern .func __assertfail(.param .b64 __assertfail_param_0, .param .b64 "
              "__assertfail_param_1, .param .b32 __assertfail_param_2, .param .b64 "
              "__assertfail_param_3, .param .b64 __assertfail_param_4);")


@rule(AssertFail)
def _assertfail(e: PtxWriter, instr: Instr) -> None:
    e.externs.add(ASSERTFAIL)
    message, file, line, function = _regs(e, instr)
    e.out("{")
    for k, (t, value) in enumerate(zip(("b64", "b64", "b32", "b64", "b64"),
                                       (message, file, line, function, "1"))):
        e.out(f".param .{t} param{k}; st.param.{t} [param{k}], {value};")
    e.out("call.uni __assertfail, (param0, param1, param2, param3, param4);")
    e.out("}")


def _vec(n: int) -> str:
    return f".v{n}" if n > 1 else ""


def _regs(e: PtxWriter, instr: Instr) -> list[str]:
    return [e.regs.one(v) for v in instr.operands]


@rule(ParamLoad)
def _ld_param(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    at = f"[{op.param}+{op.offset}]" if op.offset else f"[{op.param}]"
    e.out(f"ld.param{_vec(op.vec)}.{mem_type(op.type)} {operand(e.regs.of(instr.result))}, "
          f"{at};")


@rule(Cvta)
def _cvta(e: PtxWriter, instr: Instr) -> None:
    to = ".to" if instr.op.to else ""
    e.out(f"cvta{to}.{instr.op.space}.u64 {e.regs.one(instr.result)}, "
          f"{e.regs.one(instr.operands[0])};")


@rule(GenericLoad)
def _ld(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    e.out(f"{e.ordered(instr, 'ld')}{_vec(op.vec)}.{mem_type(op.type)} "
          f"{operand(e.regs.of(instr.result))}, {address(e, instr, op.offset)};")


@rule(GenericStore)
def _st(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    e.out(f"{e.ordered(instr, 'st')}{_vec(op.vec)}.{mem_type(op.type)} "
          f"{address(e, instr, op.offset)}, {operand(e.regs.of(instr.operands[1]))};")


@rule(ByteLoad)
def _ld_byte(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    space = f".{op.space}" if op.space else ""
    e.out(f"{e.ordered(instr, 'ld')}{space}{_vec(op.vec)}.{'s8' if op.signed else 'u8'} "
          f"{operand(e.regs.of(instr.result))}, {address(e, instr, op.offset)};")


@rule(ByteStore)
def _st_byte(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    space = f".{op.space}" if op.space else ""
    e.out(f"{e.ordered(instr, 'st')}{space}{_vec(op.vec)}.u8 {address(e, instr, op.offset)}, "
          f"{operand(e.regs.of(instr.operands[1]))};")


@rule(Atom)
def _atom(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    space = f".{op.space}" if op.space else ""
    typ = f"b{RegType(op.type).bits}" if op.op in ("and", "or", "xor", "exch", "cas") \
        else f"noftz.{op.type}" if op.type in HALF_ATOMICS else op.type
    if op.vec > 1:  # sm_90's vector atomics: each element updated on its own
        e.sm90(instr)
        e.require((8, 1))
        e.out(f"{e.ordered(instr, 'atom')}{space}.{op.op}.v{op.vec}.{typ} "
              f"{e.regs.vec(instr.result)}, "
              f"{address(e, instr)}, {e.regs.vec(instr.operands[1])};")
        return
    rest = ", ".join(_regs(e, instr)[1:])
    e.out(f"{e.ordered(instr, 'atom')}{space}.{op.op}.{typ} {e.regs.one(instr.result)}, "
          f"{address(e, instr)}, {rest};")


@rule(Shf)
def _shf(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    e.out(f"shf.{'l' if op.left else 'r'}.{'clamp' if op.clamp else 'wrap'}.b32 "
          f"{e.regs.one(instr.result)}, {', '.join(_regs(e, instr))};")


@rule(Lop3)
def _lop3(e: PtxWriter, instr: Instr) -> None:
    e.out(f"lop3.b32 {e.regs.one(instr.result)}, {', '.join(_regs(e, instr))}, "
          f"{instr.op.lut:#04x};")


@rule(Prmt, Bfe, Bfi, BitCount)
def _bits(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    name = {Prmt: "prmt.b32", Bfe: f"bfe.{getattr(op, 'type', '')}",
            Bfi: f"bfi.{getattr(op, 'type', '')}"}.get(type(op))
    if name is None:
        kind = op.kind
        typ = op.type if kind == "bfind" else f"b{RegType(op.type).bits}"
        name = f"{kind}.{typ}"
    e.out(f"{name} {e.regs.one(instr.result)}, {', '.join(_regs(e, instr))};")


@rule(ShflSync)
def _shfl(e: PtxWriter, instr: Instr) -> None:
    d, p = (e.regs.one(v) for v in instr.results)
    e.out(f"shfl.sync.{instr.op.mode}.b32 {d}|{p}, {', '.join(_regs(e, instr))};")


@rule(Vote)
def _vote(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    d = e.regs.one(instr.result)
    if op.mode == "active":
        e.out(f"activemask.b32 {d};")
        return
    typ = "b32" if op.mode == "ballot" else "pred"
    mask = e.regs.one(instr.operands[1]) if len(instr.operands) > 1 else f"0x{op.mask:08X}"
    e.out(f"vote.sync.{op.mode}.{typ} {d}, {e.regs.one(instr.operands[0])}, {mask};")


@rule(WarpSync)
def _warp_sync(e: PtxWriter, instr: Instr) -> None:
    e.out(f"bar.warp.sync 0x{instr.op.mask:08X};")


@rule(Elect)
def _elect(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)  # elect.sync: PTX ISA 8.0, sm_90 (sec. 9.7.13.13)
    d, p = (e.regs.one(v) for v in instr.results)
    mask = e.regs.one(instr.operands[0]) if instr.operands else f"0x{instr.op.mask:08X}"
    e.out(f"elect.sync {d}|{p}, {mask};")


@rule(TensorMapAt)
def _tmap_at(e: PtxWriter, instr: Instr) -> None:
    # a tensor map is named by its generic address: the register is the operand itself
    e.out(f"// {e.regs.one(instr.result)} is the tensor map at "
          f"{e.regs.one(instr.operands[0])}")


#: the device heap's two calls (CUDA C++ Programming Guide, "Dynamic Global Memory
#: Allocation and Operations")
MALLOC = ".extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);"
FREE = ".extern .func free(.param .b64 free_param_0);"


@rule(DeviceMalloc)
def _malloc(e: PtxWriter, instr: Instr) -> None:
    e.externs.add(MALLOC)
    _library_call(e, "malloc", [e.regs.one(instr.operands[0])], e.regs.one(instr.result))


@rule(DeviceFree)
def _free(e: PtxWriter, instr: Instr) -> None:
    e.externs.add(FREE)
    _library_call(e, "free", [e.regs.one(instr.operands[0])])


@rule(TexFetch)
def _tex(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    coords = [e.regs.one(v) for v in instr.operands[1:]]
    if op.geom == "3d":
        coords.append(coords[-1])  # a 3d fetch takes four coordinates, the last ignored
    e.out(f"tex.{op.geom}.v4.{op.type}.{op.ctype} {operand(e.regs.of(instr.result))}, "
          f"[{e.regs.one(instr.operands[0])}, {braced(coords)}];")


def _surface_at(e: PtxWriter, instr: Instr) -> tuple[str, str]:
    """The instruction's name and its ``[surf, {x, ...}]`` operand (3d: four coordinates,
    the last ignored)."""
    op = instr.op
    n = {"1d": 1, "2d": 2, "3d": 3}[op.geom]
    coords = [e.regs.one(v) for v in instr.operands[1:1 + n]]
    if n == 3:
        coords.append(coords[-1])
    vec = f".v{op.vec}" if op.vec > 1 else ""
    return (f"b.{op.geom}{vec}.{op.type}.{op.mode}",
            f"[{e.regs.one(instr.operands[0])}, {braced(coords)}]")


@rule(SurfaceLoad)
def _suld(e: PtxWriter, instr: Instr) -> None:
    form, at = _surface_at(e, instr)
    e.out(f"suld.{form} {braced(e.regs.of(instr.result))}, {at};")


@rule(SurfaceStore)
def _sust(e: PtxWriter, instr: Instr) -> None:
    form, at = _surface_at(e, instr)
    e.out(f"sust.{form} {at}, {braced(e.regs.of(instr.operands[-1]))};")


@rule(Stmatrix)
def _stmatrix(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    trans = ".trans" if op.trans else ""
    e.out(f"stmatrix.sync.aligned.m8n8.x{op.num}{trans}.shared.b16 {address(e, instr, op.offset)}, "
          f"{operand(e.regs.of(instr.operands[1]))};")


@rule(WmmaLoad)
def _wmma_load(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    space = f".{op.space}" if op.space else ""
    addr, stride = (e.regs.one(v) for v in instr.operands)
    e.out(f"wmma.load.{op.frag}.sync.aligned.{op.layout}.m16n16k16{space}.{op.type} "
          f"{e.regs.vec(instr.result)}, [{addr}], {stride};")


@rule(WmmaMma)
def _wmma_mma(e: PtxWriter, instr: Instr) -> None:
    a, b, c = (e.regs.vec(v) for v in instr.operands)
    types = "f32" if instr.op.atype == "f16" else f"{instr.op.atype}.{instr.op.atype}.f32"
    e.out(f"wmma.mma.sync.aligned.row.col.m16n16k16.f32.{types} "
          f"{e.regs.vec(instr.result)}, {a}, {b}, {c};")


@rule(WmmaStore)
def _wmma_store(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    space = f".{op.space}" if op.space else ""
    addr, stride = e.regs.one(instr.operands[0]), e.regs.one(instr.operands[2])
    e.out(f"wmma.store.d.sync.aligned.{op.layout}.m16n16k16{space}.f32 [{addr}], "
          f"{e.regs.vec(instr.operands[1])}, {stride};")


__all__: list[str] = []
