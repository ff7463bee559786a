"""``ts.ptx``: run anyone's PTX on the CPU, with the Target IR interpreter's checks.

    mod = ts.ptx.load("saxpy.ptx")                 # a path or the PTX text
    k = mod.kernel("saxpy")
    k.run(grid=(4, 1, 1), block=(256, 1, 1), args=[np.int32(n), np.float32(2.5), x, y])

Arguments, one per ``.param`` of the ``.entry``: a NumPy array for a 64-bit pointer
parameter (placed at a 256-byte aligned global address and updated in place), a NumPy
scalar for a value parameter (its kind and size must match the PTX type: an
``np.int32`` fits ``.u32``/``.s32``/``.b32``, an ``np.float32`` only ``.f32``), a
Python ``int``/``float`` that fits the type, :func:`tensor_map` for a
``.align 64 .b8 name[128]`` tensor-map parameter, ``ts.ptx.struct(...)`` (or the raw
bytes) for a struct passed by value (``.b8 name[N]``) and ``ts.ptx.pointer(array,
offset)`` for a pointer into an array. ``shared_bytes`` is the dynamic
shared memory (``.extern .shared``). A kernel bug (out-of-bounds or misaligned access,
shared-memory race, uninitialised shared read, async copy read before its wait,
divergent barrier, mbarrier phase that never completes) raises
:class:`~tessera.interp.target.state.TargetFault` at the PTX line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.arch.limits import launch_problem
from tessera.arch.texture import Texture
from tessera.arch.tma import TensorMap
from tessera.errors import ArgumentError, Loc, user_api
from tessera.files import read_text
from tessera.frontend.ptx.structs import DevicePointer, Placer, Struct
from tessera.frontend.ptx.textures import FIRST_HANDLE, TextureArgument
from tessera.interp.target.memory.async_copy import TmaValue
from tessera.interp.target.memory.state import GLOBAL_BASE, GlobalMemory
from tessera.interp.target.ptx.heap import DeviceHeap
from tessera.interp.target.ptx.run import run_cfg
from tessera.ir.dialects.target.cfg import CfgKernel, KernelParam
from tessera.ir.dialects.target.ptx_ops import PARAM_WINDOW
from tessera.ir.text.ptx import PtxModule, parse_ptx

_ELEMS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
          "int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64", "uint16": "u16",
          "uint8": "u8"}
_KIND = {"u": "usb", "i": "usb", "f": "f", "b": "p"}


@dataclass(frozen=True, eq=False)
class TensorMapArgument:
    """A tensor-map argument (what ``cuTensorMapEncodeTiled`` makes on the host): a 2-D
    row-major ``array`` copied by TMA in ``box = (rows, cols)`` tiles with a
    ``swizzle``-byte swizzle (0, 32, 64 or 128)."""

    array: np.ndarray
    box: tuple[int, int]
    swizzle: int = 0
    elem: str = ""


def tensor_map(array: np.ndarray, box: Sequence[int], swizzle: int = 0,
               elem: str | None = None) -> TensorMapArgument:
    """The tensor map of ``array`` for a ``.b8 [128]`` kernel parameter; ``elem`` is the
    PTX element type (by default from the array's dtype)."""
    if not isinstance(array, np.ndarray) or array.ndim != 2:
        raise ArgumentError("a tensor map describes a 2-D NumPy array",
                            hint="pass the matrix the kernel's TMA loads read")
    name = elem or _ELEMS.get(array.dtype.name)
    if name is None:
        raise ArgumentError(f"no tensor-map element type for dtype {array.dtype}",
                            hint="give elem='bf16', 'f16', 'f32' ...")
    if len(box) != 2:
        raise ArgumentError(f"box {tuple(box)} should be (rows, cols)")
    return TensorMapArgument(array, (int(box[0]), int(box[1])), int(swizzle), name)


def triton_descriptor(array: np.ndarray, box: Sequence[int], swizzle: int = 128,
                      elem: str | None = None) -> list[Any]:
    """The kernel arguments of a Triton tensor descriptor (``tensordesc<...>``, Triton's
    host ``TensorDescriptor``) over the row-major 2-D ``array``, as Triton's launcher
    passes them: the tensor map (``box`` and ``swizzle`` from the kernel's metadata),
    the two sizes (``s32``) and the two strides in elements (``s64``). Splat them into
    ``args``: ``*ts.ptx.triton_descriptor(q, box=(64, 64))``."""
    tmap = tensor_map(array, box, swizzle, elem)
    if not array.flags.c_contiguous:
        raise ArgumentError("a Triton descriptor here describes a row-major contiguous "
                            "array", hint="pass np.ascontiguousarray(array)")
    rows, cols = array.shape
    return [tmap, np.int32(rows), np.int32(cols), np.int64(cols), np.int64(1)]


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, (int, np.integer)) else \
        list(value) if isinstance(value, (tuple, list)) else [None]
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, (int, np.integer)) or
                                       isinstance(d, bool) or d < 1 for d in dims):
        raise ArgumentError(f"bad {what} {value!r}", hint=f"give 1 to 3 positive {what} sizes")
    dims = [int(d) for d in dims] + [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _scalar_bytes(p: KernelParam, k: int, a: Any) -> np.ndarray:
    """The bytes of a value argument for parameter ``p``, checked against its type."""
    kind = {"u": "u", "s": "s", "b": "b", "f": "f"}.get(p.type[0], "b")
    where = f"argument {k} ({p.name}, .{p.type})"
    if isinstance(a, np.generic):
        dk = a.dtype.kind
        ok = (dk in "ui" and kind in "usb") or (dk == "f" and kind == "f") or \
            (dk == "b" and p.type == "pred")
        if not ok or a.dtype.itemsize != p.size:
            raise ArgumentError(f"{where}: a {a.dtype} does not fit a .{p.type} parameter",
                                hint=f"pass a NumPy scalar of {p.size} bytes "
                                f"({'float' if kind == 'f' else 'integer'})")
        return np.frombuffer(a.tobytes(), np.uint8)
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        raise ArgumentError(f"{where}: expected a scalar, got {type(a).__name__}")
    if kind == "f":
        dt = np.dtype(f"f{p.size}")
        return np.frombuffer(np.array(a, dt).tobytes(), np.uint8)
    if isinstance(a, float):
        raise ArgumentError(f"{where}: a float does not fit an integer parameter")
    bits = 8 * p.size
    lo = 0 if kind == "u" else -(1 << (bits - 1))
    hi = 1 << (bits - 1) if kind == "s" else 1 << bits
    if not lo <= a < hi:
        raise ArgumentError(f"{where}: {a} does not fit in {bits} bits")
    return np.frombuffer((a & ((1 << bits) - 1)).to_bytes(p.size, "little"), np.uint8)


def _by_value(p: KernelParam, k: int, a: Any, place: Placer) -> np.ndarray:
    """The bytes of a struct passed by value for a ``.b8 name[N]`` parameter: a
    :func:`~tessera.frontend.ptx.structs.struct`, or N raw bytes."""
    where = f"argument {k} ({p.name}, .b8[{p.array}])"
    if isinstance(a, Struct):
        raw = a.pack(place)
    elif isinstance(a, (bytes, bytearray, np.void)):  # np.void: a structured scalar
        raw = np.frombuffer(a.tobytes() if isinstance(a, np.void) else bytes(a), np.uint8)
    else:
        raise ArgumentError(f"{where}: a struct passed by value, not {type(a).__name__}",
                            hint="pass ts.ptx.struct(field, ...) with the fields of the C "
                            f"struct, or its {p.array} bytes" + (
                                "; a tensor map is ts.ptx.tensor_map(array, box=...)"
                                if p.array == 128 else ""))
    if raw.size != p.array:
        raise ArgumentError(f"{where}: the struct has {raw.size} bytes, the parameter "
                            f"{p.array}", hint="check the fields' types and order against "
                            "the C struct (padding follows C's alignment rules)")
    return raw


class PtxKernel:
    """One ``.entry`` of a loaded PTX module, runnable on the CPU."""

    def __init__(self, program: PtxProgram, ir: CfgKernel) -> None:
        self.program = program
        self.ir = ir

    @property
    def name(self) -> str:
        """The kernel's name."""
        return self.ir.name

    @property
    def params(self) -> list[KernelParam]:
        """The ``.param`` list."""
        return self.ir.params

    @user_api
    def run(self, grid: Any = 1, block: Any = 1, args: Sequence[Any] = (),
            shared_bytes: int = 0, check_races: bool = True,
            symbols: dict[str, np.ndarray] | None = None, tensor_cores: str = "exact",
            cooperative: bool = False, buffers: dict[int, np.ndarray] | None = None,
            textures: dict[int, Texture] | None = None, heap: DeviceHeap | None = None,
            tensor_maps: dict[int, TensorMap | TensorMapArgument] | None = None,
            cluster: Any = None) -> None:
        """Launch over ``grid`` x ``block`` threads; arrays are updated in place.
        ``symbols`` gives the contents of module ``.global``/``.const`` variables (what
        ``cudaMemcpyToSymbol`` sets; an array passed is the variable's storage, so a
        ``.global`` variable's final value can be read from it); the others start
        with their initializers. ``tensor_cores="hopper"`` gives ``mma``/``wgmma`` the
        accumulation an H100/H200 performs (truncating; :mod:`tessera.arch.mma_hopper`)
        instead of the exact sums, to predict a Hopper GPU's output bit for bit.
        ``cooperative=True`` launches as ``cudaLaunchCooperativeKernel`` does, with the
        grid workspace cooperative groups' ``grid.sync()`` needs. ``buffers`` places
        arrays at the device addresses given, for a kernel that reaches them through
        addresses inside its arguments (a pointer argument given as an int, a struct's
        bytes, a pointer stored in memory), as a recorded CUDA program's launches do.
        ``textures`` gives texture objects by the handles the arguments hold
        (:func:`texture` arguments get handles of their own). ``heap`` is the device heap
        ``malloc`` and ``free`` use, kept from launch to launch as a program's is (by
        default each launch has one of its own). ``tensor_maps`` gives by parameter
        index the tensor map at the start of a ``.b8`` parameter whose bytes ``args``
        gives: a :func:`tensor_map` (its array placed with the launch's arrays; for a
        struct that begins with one, as CuTe's TMA copy atoms do), or a
        :class:`tessera.arch.tma.TensorMap` over memory a buffer placed at its address
        holds. ``cluster`` (x, y, z) launches in thread block clusters of that shape, as
        ``cudaLaunchKernelEx`` with a cluster attribute does (a kernel's
        ``.reqnctapercluster`` names its own)."""
        g, b = _dims(grid, "grid"), _dims(block, "block")
        shape = None if cluster is None else _dims(cluster, "cluster")
        params = self.ir.params
        if len(args) != len(params):
            raise ArgumentError(f"kernel '{self.name}' takes {len(params)} arguments "
                                f"({', '.join(p.name for p in params)}), got {len(args)}")
        if shared_bytes < 0:
            raise ArgumentError(f"shared_bytes must be >= 0, not {shared_bytes}")
        why = launch_problem(self.ir.target, g, b, self.ir.static_shared, shared_bytes,
                             self.ir.attrs)
        if why is not None:
            raise ArgumentError(f"a GPU would refuse this launch of '{self.name}': {why}",
                                loc=self.ir.loc, hint="launch a grid and block within "
                                "the limits (CUDA's launch would fail with "
                                "CUDA_ERROR_INVALID_VALUE)")
        glob = GlobalMemory()
        self._place_variables(glob, dict(symbols or {}))
        space = np.zeros(max(self.ir.param_bytes, 1), np.uint8)
        placed: dict[int, int] = {}
        tmaps: dict[int, TmaValue] = {}
        textures = dict(textures or {})
        copies: list[tuple[np.ndarray, np.ndarray]] = []

        def place(a: np.ndarray, k: int) -> int:
            if id(a) not in placed:
                if not a.flags.writeable:
                    raise ArgumentError(f"argument {k}: the array must be writeable")
                work = a if a.flags.c_contiguous else np.ascontiguousarray(a)
                if work is not a:
                    copies.append((a, work))
                placed[id(a)] = glob.add(work, f"argument {k} ({params[k].name}, "
                                         f"{a.dtype}{list(a.shape)})")
            return placed[id(a)]

        for address, a in (buffers or {}).items():
            placed[id(a)] = self._place_at(glob, a, address)
        if buffers and (clash := glob.first_overlap()) is not None:
            raise ArgumentError(f"{clash[1]}: its {clash[2]} bytes overlap {clash[0]}")
        for k, (p, a) in enumerate(zip(params, args)):
            def placer(x: np.ndarray, k: int = k) -> int:
                return place(x, k)

            if isinstance(a, TextureArgument):
                if p.size != 8 or p.array:
                    raise ArgumentError(f"argument {k} ({p.name}, .{p.type}): a texture "
                                        "object is a 64-bit parameter")
                handle = max(textures, default=FIRST_HANDLE - 1) + 1
                textures[handle] = a.texture
                space[p.offset:p.offset + 8] = np.frombuffer(np.uint64(handle).tobytes(),
                                                             np.uint8)
            elif p.array and isinstance(a, TensorMapArgument):
                tmaps[PARAM_WINDOW + p.offset] = self._tensor_map(p, k, a, place, glob)
            elif p.array:
                space[p.offset:p.offset + p.size] = _by_value(p, k, a, placer)
            elif isinstance(a, DevicePointer) or (isinstance(a, np.ndarray) and a.ndim > 0):
                if p.size != 8 or p.type == "f64":
                    raise ArgumentError(f"argument {k} ({p.name}, .{p.type}): an array needs "
                                        "a 64-bit pointer parameter")
                ptr = a if isinstance(a, DevicePointer) else DevicePointer(a)
                space[p.offset:p.offset + 8] = np.frombuffer(
                    np.uint64(ptr.address(placer)).tobytes(), np.uint8)
            else:
                raw = _scalar_bytes(p, k, a[()] if isinstance(a, np.ndarray) else a)
                space[p.offset:p.offset + p.size] = raw
        for k, t in (tensor_maps or {}).items():
            tmaps[PARAM_WINDOW + params[k].offset] = (
                self._tensor_map(params[k], k, t, place, glob, inside=True)
                if isinstance(t, TensorMapArgument) else _over_buffer(glob, t, k))
        run_cfg(self.ir, space, glob, grid=g, block=b, shared_bytes=shared_bytes,
                tmaps=tmaps, check_races=check_races, tensor_cores=tensor_cores,
                cooperative=cooperative, textures=textures, heap=heap, cluster=shape)
        for a, work in copies:
            a[...] = work

    def arguments_from_bytes(self, raw: Sequence[bytes]) -> list[Any]:
        """The arguments of :meth:`run` from each parameter's bytes as a CUDA launch
        passes them (``cuLaunchKernel``'s ``kernelParams``, a recorded launch): structs
        stay bytes, pointers and values become NumPy scalars of their parameter's type
        (a pointer is then an address: give its array with ``buffers=``)."""
        if len(raw) != len(self.params):
            raise ArgumentError(f"kernel '{self.name}' takes {len(self.params)} arguments, "
                                f"got the bytes of {len(raw)}")
        out: list[Any] = []
        for p, data in zip(self.params, raw):
            if len(data) != p.size:
                raise ArgumentError(f"parameter {p.name} takes {p.size} bytes, not "
                                    f"{len(data)}")
            kind = {"u": "u", "b": "u", "s": "i", "f": "f"}.get(p.type[0], "u")
            out.append(bytes(data) if p.array else np.frombuffer(data, f"{kind}{p.size}")[0])
        return out

    def _place_variables(self, glob: GlobalMemory, symbols: dict[str, np.ndarray]) -> None:
        """Module variables first, at the addresses the PTX reader gave them."""
        for var in self.ir.globals:
            given = symbols.pop(var.name, None)
            if given is None:
                buf = np.frombuffer(var.init, np.uint8).copy()
            else:
                if not isinstance(given, np.ndarray) or given.nbytes != var.size or \
                        not given.flags.c_contiguous or not given.flags.writeable:
                    raise ArgumentError(f"symbol {var.name!r} is a .{var.space} variable of "
                                        f"{var.size} bytes: pass a writeable contiguous "
                                        "array of that size")
                buf = given
            base = glob.add(buf, f".{var.space} variable {var.name}")
            assert base == var.address, "module variables are placed in order"
        if symbols:
            names = ", ".join(v.name for v in self.ir.globals) or "none"
            raise ArgumentError(f"the module has no variable {next(iter(symbols))!r}",
                                hint=f"its .global/.const variables: {names}")

    @staticmethod
    def _place_at(glob: GlobalMemory, a: Any, address: Any) -> int:
        """Place buffer ``a`` at device address ``address`` (checked; overlaps are
        looked for once all are placed)."""
        where = f"the buffer at {address:#x}" if isinstance(address, int) else \
            f"the buffer at {address!r}"
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable:
            raise ArgumentError(f"{where}: pass a writeable C-contiguous NumPy array")
        if isinstance(address, bool) or not isinstance(address, (int, np.integer)) or \
                address < GLOBAL_BASE or address % 256 or address + a.nbytes > 1 << 64:
            raise ArgumentError(f"{where}: a device address is an int of 64 bits, a multiple "
                                f"of 256, from {GLOBAL_BASE:#x} up", hint="give the address "
                                "the CUDA program's allocation had (cudaMalloc aligns to 256)")
        return glob.add(a, f"the buffer at {int(address):#x}", int(address))

    def _tensor_map(self, p: KernelParam, k: int, a: Any, place: Any, glob: GlobalMemory,
                    inside: bool = False) -> TmaValue:
        """The tensor map ``a`` (a :func:`tensor_map`) of parameter ``p``, its array
        placed by ``place`` in ``glob``; ``inside``: ``p`` may be a struct it begins."""
        from tessera.arch.tma import row_major_2d

        if p.array != 128 and not (inside and p.array > 128):
            form = f".b8[{p.array}]" if p.array else f".{p.type}"
            raise ArgumentError(f"argument {k} ({p.name}, {form}): a tensor map "
                                "is a parameter of 128 bytes, or the start of a larger "
                                "struct (give that one in tensor_maps)")
        base = place(a.array, k)
        tmap = row_major_2d(a.elem, base, a.array.shape, a.box, a.swizzle).validate()
        return TmaValue(tmap, glob.bytes[glob.bases.index(base)])

    def __repr__(self) -> str:
        args = ", ".join(f".{p.type}{f'[{p.array}]' if p.array else ''} {p.name}"
                         for p in self.params)
        return f"PtxKernel {self.name}({args})"


def _over_buffer(glob: GlobalMemory, t: TensorMap, k: int) -> TmaValue:
    """Tensor map ``t`` over the placed buffer holding its global address."""
    for base, buf in zip(glob.bases, glob.bytes):
        if base <= t.global_address < base + buf.size:
            return TmaValue(t.validate(), buf[t.global_address - base:])
    raise ArgumentError(f"argument {k}: the tensor map's global address "
                        f"{t.global_address:#x} lies in no buffer of the launch",
                        hint="place the tensor's memory with buffers={address: array}")


class PtxProgram:
    """A PTX module read from a file or text: its kernels by name."""

    def __init__(self, module: PtxModule) -> None:
        self.module = module

    @property
    def file(self) -> str:
        """Where the PTX came from."""
        return self.module.file

    @property
    def kernels(self) -> list[str]:
        """Names of the ``.entry`` kernels."""
        return list(self.module.kernels)

    @user_api
    def kernel(self, name: str) -> PtxKernel:
        """The kernel ``name``."""
        if name not in self.module.kernels:
            raise ArgumentError(f"{self.file} has no kernel {name!r}", loc=Loc(self.file, 0),
                                hint=f"kernels there: {', '.join(self.module.kernels) or 'none'}")
        return PtxKernel(self, self.module.kernels[name])


@user_api
def load(source: str | os.PathLike[str]) -> PtxProgram:
    """Read a PTX file (a path) or PTX text into a :class:`PtxProgram`."""
    if isinstance(source, os.PathLike) or ("\n" not in str(source) and
                                           not str(source).lstrip().startswith(".")):
        text = read_text(source, "PTX file", hint="give the .ptx text (nvcc -ptx, Triton's "
                         "compiled.asm['ptx']), not a cubin or fatbinary")
        return PtxProgram(parse_ptx(text, str(source)))
    return PtxProgram(parse_ptx(str(source), "<ptx text>"))


__all__ = ["PtxKernel", "PtxProgram", "TensorMapArgument", "load", "tensor_map",
           "triton_descriptor"]
