"""Running a built CUDA program in this process: its ``main`` runs natively, and each
kernel launch it makes runs on the CPU through :mod:`tessera.frontend.ptx`.

Device memory is anonymous ``mmap`` memory (page-aligned, far above the interpreter's
own address windows) placed in every launch at its own address, so pointers the host
code holds, stores in device memory and struct arguments all mean what they mean on a
GPU. ``__device__``/``__constant__`` variables have device storage apart from their host
shadows, as on a GPU: host code that writes a shadow (nvcc only warns) is told at the
next launch that kernels never see it. A kernel fault
ends the program with :data:`.reports.FAULT_EXIT` after its report, as a GPU's sticky error
would end it (a program that went on would read what the kernel never wrote); a launch
that a GPU would refuse returns its CUDA error to the program, which may check it.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.arch.swizzle import Swizzle
from tessera.arch.texture import Surface, Texture
from tessera.arch.tma import Interleave, L2Promotion, OobFill, TensorMap, TensorMapDataType
from tessera.errors import ArgumentError, Loc, TesseraError
from tessera.frontend.cuda.build import Built
from tessera.frontend.cuda.memory import (
    DeviceMemory,
    device_symbols,
    host_view,
    variable_storage,
    written_shadows,
)
from tessera.frontend.cuda.reports import (
    caller_line,
    demangled,
    end_program,
    flush_output,
    source_lines,
)
from tessera.frontend.cuda.textures import cuda_texture
from tessera.frontend.ptx.api import PtxProgram, load
from tessera.frontend.ptx.textures import FIRST_HANDLE
from tessera.interp.target.cluster.geometry import ClusterLaunchError
from tessera.interp.target.ptx.heap import DeviceHeap
from tessera.ir.text.ptx import parse_ptx

_INVALID_CONFIGURATION = 9  # cudaErrorInvalidConfiguration
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int)
_INVALID_VALUE = 1  # cudaErrorInvalidValue
_INVALID_CLUSTER_SIZE = 912  # cudaErrorInvalidClusterSize
#: cuda.h's CUtensorMapSwizzle numbers
_SWIZZLES = {0: Swizzle.NONE, 1: Swizzle.B32, 2: Swizzle.B64, 3: Swizzle.B128}
_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_REPORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t)
_SIZES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                          ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
                          ctypes.c_int)
_INTS, _FLOATS = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float)
_LOAD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_GLOBAL = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(ctypes.c_size_t))
_FINISH = ctypes.CFUNCTYPE(None)
_SURFACE = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_void_p, *(ctypes.c_size_t,) * 5,
                            ctypes.c_int)
_REGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_STATIC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p)
_U64S, _U32S = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
_TENSOR_MAP = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_int, ctypes.c_uint,
                               ctypes.c_void_p, _U64S, _U64S, _U32S, _U32S, *(ctypes.c_int,) * 4)
#: the first word of a tensor map runtime_driver.cpp encoded ("TessTmap")
TENSOR_MAP_MAGIC = 0x54657373546D6170
_TEXTURE = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_void_p, *(ctypes.c_size_t,) * 5,
                            ctypes.c_int, _INTS, ctypes.c_int, _INTS, ctypes.c_int, ctypes.c_int,
                            ctypes.c_int, _FLOATS)


class CudaApiError(TesseraError):
    """A CUDA runtime call a GPU would refuse or that would corrupt memory: a copy past
    the end of an allocation, a free of what is not one."""

    kind = "CUDA API error"


class CudaProgram:
    """A built program loaded for a run: its library, kernels and device memory."""

    def __init__(self, built: Built, check_races: bool = True,
                 check_leaks: bool = False) -> None:
        self.lib = ctypes.CDLL(str(built.library))
        self.modules = [load(path) for path in built.ptx]
        #: (PTX file, line) -> the CUDA source line it came from
        self.source = {(str(path), line): loc for path in built.ptx
                       for line, loc in source_lines(path.read_text()).items()}
        self.memory = DeviceMemory()
        self.check_races, self.check_leaks = check_races, check_leaks
        self.launches = 0
        self.built = built
        #: each variable's device storage, and its host shadow with the shadow's bytes
        #: as the program started (a launch warns once host code wrote one), by
        #: (registered fat binary, PTX name)
        self.symbols, self.shadows = device_symbols(self.lib, self.memory)
        self.module_of = self._match_modules()
        self._initialise()
        self.textures: dict[int, Texture | Surface] = {}  # texture and surface objects
        self.heap: DeviceHeap | None = None  # what kernels' malloc and free use
        self.lib.tessera_heap_limit.restype = ctypes.c_size_t
        self._callbacks: list[Any] = []  # the C function pointers, kept alive for C
        lib, c = self.lib, self._callback
        lib.tessera_set_hooks(c(_LAUNCH, self._launch), c(_ALLOC, self.memory.alloc),
                              c(_FREE, self.memory.free), c(_REPORT, self._report),
                              c(_SIZES, self._sizes))
        lib.tessera_set_texture_hook(c(_TEXTURE, self._texture), c(_SURFACE, self._surface))
        lib.tessera_set_register_hook(c(_REGISTER, self.memory.register))
        lib.tessera_set_static_hook(c(_STATIC, self._static_shared))
        lib.tessera_set_driver_hooks(c(_LOAD, self._load), c(_GLOBAL, self._global),
                                     c(_TENSOR_MAP, self._tensor_map))
        self.tensor_maps: dict[int, TensorMap] = {}  # by handle
        self._finish = c(_FINISH, self._leaks)
        if check_leaks:  # for a program that calls exit(): the report as it ends
            lib.tessera_set_finish_hook(self._finish)

    def _callback(self, kind: Any, fn: Any) -> Any:
        """``fn`` as a C function pointer of type ``kind``, kept alive with the program."""
        made = kind(fn)
        self._callbacks.append(made)
        return made

    def _match_modules(self) -> list[PtxProgram]:
        """The ``.cu`` file's PTX of each registered fat binary. nvcc's host code
        registers one per ``.cu`` file as the library starts, in link order, which is the
        order of the files; the names each registers confirm it (a ``static`` kernel or
        variable may have its name in several files)."""
        get = self.lib.tessera_kernel
        get.restype = ctypes.c_char_p
        names: list[set[str]] = [set() for _ in range(self.lib.tessera_module_count())]
        module = ctypes.c_int()
        for k in range(self.lib.tessera_kernel_count()):
            name = get(k, ctypes.byref(module)).decode()
            names[module.value].add(name)
        for registered, name in self.symbols:
            names[registered].add(name)
        defined = [set(m.kernels) | {v.name for v in m.module.globals} for m in self.modules]
        if len(names) == len(self.modules) and all(n <= d for n, d in zip(names, defined)):
            return list(self.modules)
        out = []  # an order nvcc did not keep: each by the one file defining its names
        for wanted in names:
            fits = [m for m, d in zip(self.modules, defined) if wanted <= d]
            if not wanted:  # nothing to launch or place: any file serves
                fits = fits[:1]
            if len(fits) != 1:
                raise CudaApiError("cannot tell which .cu file registered the kernels "
                                   f"{', '.join(sorted(wanted)) or '(none)'}",
                                   loc=Loc(str(self.built.sources[0]), 0))
            out.extend(fits)
        return out

    def main(self, argv: Sequence[str]) -> int:
        """Run the program's ``main`` with ``argv`` (``argv[0]`` its name); its status."""
        args = (ctypes.c_char_p * (len(argv) + 1))(*(a.encode() for a in argv), None)
        status = self.lib.main(len(argv), args)
        flush_output()
        if self.check_leaks:  # here, while Python runs (a C exit handler runs too late)
            self.lib.tessera_set_finish_hook(None)
            self._leaks()
        return int(status)

    def _initialise(self) -> None:
        """Each variable's initial value from its PTX, as loading a module sets it on a
        GPU (the host shadows nvcc makes need not hold it)."""
        inits = [{v.name: v.init for v in m.module.globals} for m in self.module_of]
        for (module, name), storage in self.symbols.items():
            init = inits[module].get(name)
            if init is not None and len(init) == storage.nbytes and storage.tobytes() != init:
                storage[:] = np.frombuffer(init, np.uint8)

    def _launch(self, module: int, name: bytes, dims: Any, shared: int, argp: Any,
                coop: int, opt_in: int) -> int:
        try:
            kernel = self.module_of[module].kernel(name.decode())
            grid, block, shape = tuple(dims[:3]), tuple(dims[3:6]), tuple(dims[6:9])
            allowed = self.lib.tessera_dynamic_limit(module, name, opt_in)
            if shared > allowed:  # as a GPU refuses the launch
                print(demangled(
                    f"tessera run-cuda: launch of '{name.decode()}' failed: {shared} bytes of "
                    f"dynamic shared memory, more than the {allowed} it may take "
                    f"{'(its cudaFuncSetAttribute)' if opt_in >= 0 else 'without opting in'}"
                    ": raise cudaFuncAttributeMaxDynamicSharedMemorySize with "
                    "cudaFuncSetAttribute first", name.decode()), file=sys.stderr)
                return _INVALID_VALUE
            for variable in written_shadows(self.shadows):
                print(demangled(f"tessera run-cuda: warning: host code wrote the host shadow "
                                f"of '{variable}'; kernels never see it (copy it with "
                                "cudaMemcpyToSymbol)", variable), file=sys.stderr)
            raw = [ctypes.string_at(argp[k], p.size) for k, p in enumerate(kernel.params)]
            maps = {k: self.tensor_maps[int.from_bytes(r[8:16], "little")]
                    for k, r in enumerate(raw) if len(r) == 128 and
                    int.from_bytes(r[:8], "little") == TENSOR_MAP_MAGIC}
            kernel.run(grid=grid, block=block, args=kernel.arguments_from_bytes(raw),
                       tensor_maps=maps,
                       shared_bytes=int(shared), check_races=self.check_races,
                       symbols=self._symbols_of(module), cooperative=bool(coop),
                       buffers=self.memory.arrays, textures=self.textures,
                       heap=self._device_heap(), cluster=shape if any(shape) else None)
            self.launches += 1
            sys.stdout.flush()
            return 0
        except ArgumentError as err:  # a launch a GPU refuses: the program sees its error
            print(demangled(f"tessera run-cuda: launch of '{name.decode()}' failed: {err}",
                             name.decode()), file=sys.stderr)
            return (_INVALID_CLUSTER_SIZE if isinstance(err, ClusterLaunchError)
                    else _INVALID_CONFIGURATION)
        except TesseraError as err:
            where = self.source.get((err.loc.file, err.loc.line))
            if where is not None:  # the user's line first, the PTX instruction after
                ptx = err.loc
                err = err.relocated(where)
                err.args = (f"{err.args[0]}\n  in PTX: {ptx}",)
            report = demangled(str(err), name.decode())
            end_program(f"tessera run-cuda: kernel fault in launch {self.launches + 1}:\n{report}")
        except BaseException:  # nothing may unwind through C frames
            end_program(f"tessera run-cuda: internal error in a launch:\n{traceback.format_exc()}")
        return 0  # not reached

    def _tensor_map(self, dtype: int, rank: int, address: int, dims: Any, strides: Any,
                    box: Any, steps: Any, interleave: int, swizzle: int, l2: int,
                    fill: int) -> int:
        """The handle of a tensor map of cuTensorMapEncodeTiled's arguments, or 0 after
        saying why a GPU would refuse it."""
        try:
            t = TensorMap(TensorMapDataType(dtype), address or 0,
                          tuple(dims[i] for i in range(rank)),
                          tuple(strides[i] for i in range(rank - 1)),
                          tuple(box[i] for i in range(rank)),
                          tuple(steps[i] for i in range(rank)) if steps else None,
                          Interleave(interleave), _SWIZZLES[swizzle], L2Promotion(l2),
                          OobFill(fill)).validate()
        except (TesseraError, ValueError, KeyError) as err:
            print(f"tessera run-cuda: cuTensorMapEncodeTiled returns "
                  f"CUDA_ERROR_INVALID_VALUE: {getattr(err, 'message', err)}", file=sys.stderr)
            return 0
        self.tensor_maps[len(self.tensor_maps) + 1] = t
        return len(self.tensor_maps)

    def _static_shared(self, module: int, name: bytes) -> int:
        """A kernel's static shared memory in bytes (for the occupancy calculator and
        cudaFuncGetAttributes), or -1 for no such kernel."""
        try:
            return int(self.module_of[module].kernel(name.decode()).ir.static_shared)
        except (TesseraError, IndexError):
            return -1

    def _sizes(self, module: int, name: bytes, sizes: Any, offsets: Any, most: int) -> int:
        """The byte size and offset of each parameter of a kernel (for a launch a graph
        keeps, or one given as a parameter buffer); how many there are, or -1 for no such
        kernel."""
        try:
            params = self.module_of[module].kernel(name.decode()).params
        except (TesseraError, IndexError):
            return -1
        for k, p in enumerate(params[:most]):
            sizes[k], offsets[k] = p.size, p.offset
        return len(params)

    def _device_heap(self) -> DeviceHeap:
        """The program's device heap, of cudaLimitMallocHeapSize bytes: made again while
        no kernel has allocated from it, should the program have set a new size."""
        limit = int(self.lib.tessera_heap_limit())
        if self.heap is None or (not self.heap.blocks and self.heap.size != limit):
            arena = np.frombuffer(mmap.mmap(-1, max(limit, 1)), np.uint8)
            self.heap = DeviceHeap(limit, arena.ctypes.data, arena)
        return self.heap

    def _texture(self, data: int, pitch: int, slice_: int, width: int, height: int,
                 depth: int, dims: int, bits: Any, kind: int, address: Any, filter_: int,
                 read: int, normalized: int, border: Any) -> int:
        """The handle of a new texture object over ``data`` (rows ``pitch`` bytes apart,
        slices ``slice_``), or 0 after saying why a GPU would refuse it."""
        try:
            texture = cuda_texture(data, (pitch, slice_), (width, height, depth), dims,
                                   [bits[k] for k in range(4)], kind,
                                   [address[k] for k in range(3)], filter_, read,
                                   normalized, [border[k] for k in range(4)])
        except ArgumentError as err:
            print(f"tessera run-cuda: cudaCreateTextureObject returns cudaErrorInvalidValue: "
                  f"{err.message}", file=sys.stderr)
            return 0
        except BaseException:  # nothing may unwind through C frames
            end_program(f"tessera run-cuda: internal error in a texture:\n{traceback.format_exc()}")
        return self._handle(texture)

    def _surface(self, data: int, pitch: int, slice_: int, row: int, height: int,
                 depth: int, dims: int) -> int:
        """The handle of a new surface object over a CUDA array's rows."""
        rows = host_view(data, (depth, height, row), np.uint8, (slice_, pitch, 1))
        return self._handle(Surface(rows, dims))

    def _handle(self, obj: Texture | Surface) -> int:
        handle = len(self.textures) + FIRST_HANDLE
        self.textures[handle] = obj
        return handle

    def _load(self, image: int, size: int, name: bytes) -> int:
        """A module of the driver API from PTX text (``cuModuleLoadData``,
        ``cuModuleLoad``): its number, or -1 after saying why it is none. Its variables
        get device memory with their initial values, as loading a module on a GPU gives."""
        raw = ctypes.string_at(image, size).rstrip(b"\0")
        where = name.decode()
        try:
            if not raw.lstrip().startswith((b"//", b".")):
                raise ArgumentError("not PTX text: tessera runs PTX, not cubins or fat "
                                    "binaries (nvrtcGetPTX, nvcc -ptx)")
            program = PtxProgram(parse_ptx(raw.decode(), where))
        except TesseraError as err:
            print(f"tessera run-cuda: {where}: cuModuleLoadData returns "
                  f"CUDA_ERROR_INVALID_IMAGE: {err}", file=sys.stderr)
            return -1
        module = len(self.module_of)
        self.module_of.append(program)
        self.source.update({(where, line): loc for line, loc in
                            source_lines(raw.decode()).items()})
        for var in program.module.globals:
            storage = variable_storage(self.lib, self.memory, var.size)
            storage[:] = np.frombuffer(var.init, np.uint8)
            self.symbols[module, var.name] = storage
        return module

    def _global(self, module: int, name: bytes, size: Any) -> int:
        """The device address of a loaded module's variable (its size in ``size``), or 0."""
        storage = self.symbols.get((module, name.decode()))
        if storage is None:
            return 0
        size[0] = storage.nbytes
        return storage.ctypes.data

    def _leaks(self) -> None:
        """The leak check, as the program ends: each allocation it made and never freed,
        at the line that made it, and each device heap block no kernel gave back."""
        try:
            info = self.lib.tessera_allocation_info
            info.restype = ctypes.c_void_p
            size, caller, kind = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_int()
            lines = []
            for k in range(self.lib.tessera_allocation_count()):
                base = info(k, ctypes.byref(size), ctypes.byref(caller), ctypes.byref(kind))
                if caller.value and kind.value in (0, 1, 3):  # device, pinned, managed
                    where = caller_line(self.built, caller.value)
                    what = " of pinned host memory" if kind.value == 1 else ""
                    lines.append(f"{size.value} bytes{what} at {base:#x}, allocated at "
                                 f"{where or 'an unknown line'}")
            for address, nbytes, loc in self.heap.live() if self.heap else ():
                where = self.source.get((loc.file, loc.line), loc) if loc else None
                lines.append(f"{nbytes} bytes at {address:#x}, from device malloc at "
                             f"{where or 'an unknown line'}")
            flush_output()
            for line in lines:
                print(f"tessera run-cuda: leak: {line}, never freed", file=sys.stderr)
            if lines:
                print(f"tessera run-cuda: {len(lines)} allocation"
                      f"{'s' if len(lines) > 1 else ''} never freed", file=sys.stderr)
            sys.stderr.flush()
        except BaseException:  # nothing may unwind through C frames
            end_program(f"tessera run-cuda: internal error in the leak check:\n"
                 f"{traceback.format_exc()}")

    def _report(self, message: bytes, caller: int) -> None:
        """End the program with a report of an API misuse at the user's line."""
        where = caller_line(self.built, caller) or Loc(str(self.built.sources[0]), 0)
        end_program(f"tessera run-cuda: {CudaApiError(message.decode(), loc=where)}")

    def _symbols_of(self, module: int) -> dict[str, np.ndarray]:
        """The variables registered with fat binary ``module``, by PTX name."""
        return {n: a for (m, n), a in self.symbols.items() if m == module}


def run_program(built: Built, argv: Sequence[str], check_races: bool = True,
                check_leaks: bool = False) -> int:
    """Run a built program's ``main`` here; its exit status. ``check_leaks``: report,
    as the program ends, what it allocated and never freed."""
    program = CudaProgram(built, check_races, check_leaks)
    return program.main([built.library.stem.removeprefix("lib"), *argv])


__all__ = ["CudaApiError", "CudaProgram", "run_program"]
