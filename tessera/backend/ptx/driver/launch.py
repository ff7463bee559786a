"""Load and launch kernels through the CUDA driver API (``cuda.bindings.driver``).

Every driver call returns a tuple whose first item is a ``CUresult``; :func:`_call` turns a
failure into a :class:`CudaError`.  Everything before ``cuLaunchKernel`` — argument
conversion and parameter packing — works without a GPU, so it is tested everywhere;
the functions that need the driver raise :class:`GpuUnavailable` with the reason.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.backend.ptx.driver.params import (
    NativeParams,
    ParamSpec,
    entry_signature,
    pack_params,
    param_specs,
)
from tessera.errors import ArgumentError, TesseraError

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_MANAGED = 1, 2, 13  # DLPack DLDeviceType values
_POINTER_KINDS = ("u64", "s64", "b64")
_DEFAULT_SHARED_LIMIT = 48 * 1024  # above this a kernel must opt in (cuFuncSetAttribute)


class GpuUnavailable(TesseraError):
    """No CUDA driver or device is usable here; the message says why."""

    kind = "GPU unavailable"


class CudaError(TesseraError):
    """A CUDA driver call failed."""

    kind = "CUDA error"


def _driver_module() -> Any:
    from cuda.bindings import driver

    return driver


def _error_name(driver: Any, err: Any) -> str:
    try:
        status, name = driver.cuGetErrorName(err)
        if int(status) == 0:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the name is only decoration for the message
        pass
    return getattr(err, "name", str(err))


def _call(driver: Any, what: str, result: tuple[Any, ...]) -> Any:
    """Check a driver result tuple ``(err, *values)`` and return its value(s)."""
    err, *values = result
    if int(err) != 0:
        raise CudaError(f"{what} failed: {_error_name(driver, err)}")
    return values[0] if len(values) == 1 else tuple(values)


def cuda_available() -> tuple[bool, str]:
    """Whether a CUDA device can be used, and if not, why (driver library, cuInit, device)."""
    try:
        driver = _driver_module()
    except ImportError as err:
        return False, f"cuda-bindings is not installed ({err}); pip install cuda-bindings"
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as exc:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda
        return False, f"no CUDA driver library: {exc}"
    if int(err) != 0:
        return False, f"cuInit failed: {_error_name(driver, err)}"
    err, count = driver.cuDeviceGetCount()
    if int(err) != 0 or count == 0:
        return False, "no CUDA device"
    return True, "ok"


def _ready_driver() -> Any:
    usable, reason = cuda_available()
    if not usable:
        raise GpuUnavailable(reason, hint="run on a machine with an NVIDIA GPU and driver")
    return _driver_module()


def ensure_context(driver: Any, device: int = 0, *, force: bool = False) -> None:
    """Make ``device``'s primary context current when no context is (or, ``force``,
    always): some driver calls (``cuTensorMapEncodeTiled``) fail with
    ``CUDA_ERROR_INVALID_CONTEXT`` outside one, even before any module is loaded, and
    with ``CUDA_ERROR_CONTEXT_IS_DESTROYED`` in a context that is current but destroyed
    (the primary context after the last :class:`CudaModule` released it stays current
    on the thread, and no query tells it apart). The primary context is retained for
    the process, as the runtime API does."""
    current = _call(driver, "cuCtxGetCurrent", driver.cuCtxGetCurrent())
    if not force and current is not None and int(current) != 0:
        return
    dev = _call(driver, "cuDeviceGet", driver.cuDeviceGet(device))
    context = _call(driver, "cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(dev))
    _call(driver, "cuCtxSetCurrent", driver.cuCtxSetCurrent(context))


def device_compute_capability(device: int = 0) -> tuple[int, int]:
    """The compute capability ``(major, minor)`` of CUDA device ``device``."""
    driver = _ready_driver()
    dev = _call(driver, "cuDeviceGet", driver.cuDeviceGet(device))
    attr = driver.CUdevice_attribute
    major = _call(driver, "cuDeviceGetAttribute", driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = _call(driver, "cuDeviceGetAttribute", driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    return int(major), int(minor)


def device_arch(target: str, device: int = 0) -> str:
    """The ptxas architecture that runs PTX written for ``target`` on CUDA device ``device``.

    PTX is forward compatible and a cubin is not (a ``sm_80`` cubin does not load on a
    Hopper GPU), so PTX for ``sm_80`` is assembled for the device's own architecture.
    Arch-specific targets (``sm_90a``) run only on their own architecture."""
    major, minor = device_compute_capability(device)
    have = f"sm_{major}{minor}"
    if target.endswith("a"):
        if target[:-1] != have:
            raise ArgumentError(f"PTX for {target} cannot run on this GPU ({have}): "
                                f"{target}'s instructions exist on that architecture only",
                                hint="compile for the GPU's own target (target=None picks it)")
        return target
    if int(target.removeprefix("sm_")) > major * 10 + minor:
        raise ArgumentError(f"PTX for {target} cannot run on this GPU ({have})",
                            hint="compile for an older target, or run on a newer GPU")
    return have + ("a" if (major, minor) == (9, 0) else "")


# --- argument conversion (no GPU needed) ----------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class LaunchArg:
    """One launch argument ready for packing.

    ``value`` goes into the parameter buffer; a NumPy ``host_array`` is first copied to the
    device (``value`` is then replaced by the device pointer) and copied back after the
    launch; ``keepalive`` holds what must outlive the launch (a DLPack capsule).
    """

    value: Any
    host_array: np.ndarray | None = None
    keepalive: Any = None


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLTensor(ctypes.Structure):
    # DLPack's DLTensor, which starts a DLManagedTensor (dlpack.h, ABI version 0.x/1.x).
    _fields_ = (("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", ctypes.c_uint32), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64))


def _dlpack_pointer(capsule: Any) -> int:
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    tensor = _DLTensor.from_address(get_pointer(capsule, b"dltensor"))
    return int(tensor.data or 0) + int(tensor.byte_offset)


def _need_pointer(spec: ParamSpec, what: str) -> None:
    if spec.kind not in _POINTER_KINDS:
        raise ArgumentError(
            f"parameter {spec.name!r} is .{spec.kind}; {what} can only be passed to a 64-bit "
            "pointer parameter (.u64/.s64/.b64)",
            hint="check the argument order against the kernel's parameters",
        )


def convert_arg(spec: ParamSpec, arg: Any) -> LaunchArg:
    """Turn one user argument into a :class:`LaunchArg` for parameter ``spec``."""
    if isinstance(arg, np.ndarray):
        _need_pointer(spec, "a NumPy array")
        return LaunchArg(0, host_array=arg)
    interface = getattr(arg, "__cuda_array_interface__", None)
    if interface is not None:
        _need_pointer(spec, "a device array")
        return LaunchArg(int(interface["data"][0]), keepalive=arg)
    if hasattr(arg, "__dlpack__") and hasattr(arg, "__dlpack_device__"):
        device_type, _ = arg.__dlpack_device__()
        if device_type == _KDL_CPU:
            return convert_arg(spec, np.from_dlpack(arg))
        if device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            raise ArgumentError(
                f"parameter {spec.name!r}: a DLPack array on device type {device_type} "
                "is neither CUDA nor host memory",
                hint="move the array to the GPU (or to host memory) first",
            )
        _need_pointer(spec, "a device array")
        capsule = arg.__dlpack__()
        return LaunchArg(_dlpack_pointer(capsule), keepalive=(arg, capsule))
    if spec.kind == "bytes" and hasattr(arg, "getPtr"):  # a cuda.bindings CUtensorMap
        return LaunchArg(ctypes.string_at(int(arg.getPtr()), spec.size))
    return LaunchArg(arg)


def prepare_args(specs: Sequence[ParamSpec], args: Sequence[Any]) -> list[LaunchArg]:
    """Convert all arguments; checks the count first so the error names the kernel's params."""
    if len(args) != len(specs):
        names = ", ".join(s.name for s in specs) or "none"
        raise ArgumentError(f"the kernel takes {len(specs)} argument(s) ({names}), "
                            f"got {len(args)}", hint="pass one argument per kernel parameter")
    return [convert_arg(spec, arg) for spec, arg in zip(specs, args)]


def _dims(what: str, dims: int | Sequence[int]) -> tuple[int, int, int]:
    values = (dims,) if isinstance(dims, int) else tuple(dims)
    if not 1 <= len(values) <= 3 or any(not isinstance(v, int) or v < 1 for v in values):
        raise ArgumentError(f"{what} must be 1 to 3 positive integers, got {dims!r}")
    return (*values, 1, 1)[:3]  # type: ignore[return-value]


# --- modules and launches (GPU) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CudaFunction:
    """A kernel of a loaded module and its parameter specs."""

    name: str
    handle: Any
    specs: tuple[ParamSpec, ...]


class DeviceArrays:
    """Device copies of host arrays for the duration of a launch: copied in on entry;
    on a normal exit copied back into the writeable originals; always freed. An array
    that is a view into the memory of a staged C-contiguous array (a reshape of it)
    resolves to its address inside that array's copy. Staged arrays may not overlap:
    each has its own copy, and copying back would let one undo the kernel's writes
    through the other."""

    def __init__(self, driver: Any, arrays: Sequence[np.ndarray]) -> None:
        self._driver = driver
        self._arrays = list(arrays)
        self._staged: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}

    def __enter__(self) -> DeviceArrays:
        driver = self._driver
        distinct = list({id(a): a for a in self._arrays}.values())
        for i, a in enumerate(distinct):
            for b in distinct[:i]:
                if np.shares_memory(a, b):
                    raise ArgumentError("two array arguments of one launch share memory",
                                        hint="pass separate arrays (np.copy one of them): "
                                             "each is copied to the device on its own")
        try:
            for a in distinct:
                staged = np.ascontiguousarray(a)
                pointer = int(_call(driver, "cuMemAlloc",
                                    driver.cuMemAlloc(max(staged.nbytes, 1))))
                self._staged[id(a)] = (pointer, staged, a)
                _call(driver, "cuMemcpyHtoD",
                      driver.cuMemcpyHtoD(pointer, staged.ctypes.data, staged.nbytes))
        except BaseException:
            self._free()
            raise
        return self

    def values(self, args: Sequence[Any]) -> list[Any]:
        """Launch values of ``args``: a staged array's device address, a tensor-map
        argument (an ``array`` with a ``tensor_map(address)``, as the Target IR
        interpreter's) encoded over its array's device copy, anything else as is."""
        from tessera.backend.ptx.driver.tensormap import encode

        return [self.pointer(a) if isinstance(a, np.ndarray)
                else encode(a.tensor_map(self.pointer(a.array))) if hasattr(a, "tensor_map")
                else a for a in args]

    def pointer(self, a: np.ndarray) -> int:
        """The device address of ``a``: a staged array, or a view into the memory of a
        staged array that was staged in place (C-contiguous)."""
        found = self._staged.get(id(a))
        if found is not None:
            return found[0]
        low, high = np.lib.array_utils.byte_bounds(a)
        for pointer, staged, _ in self._staged.values():
            base = staged.ctypes.data
            if base <= low and high <= base + staged.nbytes:
                return pointer + (a.ctypes.data - base)
        raise ArgumentError("an argument's memory is not among the arrays copied to the "
                            "device (a view of a non-contiguous array)",
                            hint="pass np.ascontiguousarray(x) for that tensor")

    def __exit__(self, kind: object, *rest: object) -> None:
        try:
            if kind is None:
                for pointer, staged, original in self._staged.values():
                    if original.flags.writeable:
                        _call(self._driver, "cuMemcpyDtoH", self._driver.cuMemcpyDtoH(
                            staged.ctypes.data, pointer, staged.nbytes))
                        if staged is not original:
                            original[...] = staged
        finally:
            self._free()

    def _free(self) -> None:
        for pointer, _, _ in self._staged.values():
            self._driver.cuMemFree(pointer)
        self._staged = {}


def opt_in_shared(driver: Any, fn: CudaFunction, shared_bytes: int) -> None:
    """Allow ``fn`` ``shared_bytes`` of dynamic shared memory: above 48 KiB a kernel
    must opt in before its launch (CUDA C++ Programming Guide, "Shared Memory" of
    compute capabilities 8.x and 9.0)."""
    if shared_bytes > _DEFAULT_SHARED_LIMIT:
        _call(driver, "cuFuncSetAttribute", driver.cuFuncSetAttribute(
            fn.handle,
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes))


class CudaModule:
    """A PTX text or cubin image loaded into device 0's primary context."""

    def __init__(self, image: str | bytes, *, device: int = 0):
        driver = self._driver = _ready_driver()
        self._ptx = image if isinstance(image, str) else None
        if isinstance(image, bytes) and not image.startswith(b"\x7fELF"):
            self._ptx = image.rstrip(b"\0").decode()
        data = image if isinstance(image, bytes) else image.encode()
        if self._ptx is not None:
            data = self._ptx.encode() + b"\0"  # cuModuleLoadData reads PTX as a C string
        self._device = _call(driver, "cuDeviceGet", driver.cuDeviceGet(device))
        self._context = _call(driver, "cuDevicePrimaryCtxRetain",
                              driver.cuDevicePrimaryCtxRetain(self._device))
        try:
            _call(driver, "cuCtxSetCurrent", driver.cuCtxSetCurrent(self._context))
            self._module = _call(driver, "cuModuleLoadData", driver.cuModuleLoadData(data))
        except BaseException:
            # no object is made, so close() cannot run: give the context reference back
            driver.cuDevicePrimaryCtxRelease(self._device)
            raise

    @property
    def driver(self) -> Any:
        """The ``cuda.bindings.driver`` module this module was loaded with."""
        return self._driver

    def function(self, name: str, signature: Sequence[Any] | None = None) -> CudaFunction:
        """Look up kernel ``name``; ``signature`` is read from the PTX when not given."""
        if signature is None:
            if self._ptx is None:
                raise ArgumentError(f"a cubin does not record the parameter types of {name!r}",
                                    hint="pass signature=[(name, ptx type), ...]")
            signature = entry_signature(self._ptx, name)
        handle = _call(self._driver, "cuModuleGetFunction",
                       self._driver.cuModuleGetFunction(self._module, name.encode()))
        return CudaFunction(name, handle, param_specs(signature))

    def launch(self, function: CudaFunction | str, grid: int | Sequence[int],
               block: int | Sequence[int], shared_bytes: int, args: Sequence[Any],
               cooperative: bool = False) -> None:
        """Launch ``function`` and wait for it; NumPy arrays are copied in and back out;
        ``cooperative``: with ``cuLaunchCooperativeKernel`` (for ``grid.sync()``)."""
        driver = self._driver
        fn = self.function(function) if isinstance(function, str) else function
        grid3, block3 = _dims("grid", grid), _dims("block", block)
        prepared = prepare_args(fn.specs, args)
        hosts = [item.host_array for item in prepared if item.host_array is not None]
        with DeviceArrays(driver, hosts) as dev:
            values = [item.value if item.host_array is None else dev.pointer(item.host_array)
                      for item in prepared]
            native = NativeParams(pack_params(fn.specs, values))
            opt_in_shared(driver, fn, shared_bytes)
            entry = "cuLaunchCooperativeKernel" if cooperative else "cuLaunchKernel"
            extra = () if cooperative else (0,)  # the cooperative entry takes no `extra`
            _call(driver, f"{entry}({fn.name})", getattr(driver, entry)(
                fn.handle, *grid3, *block3, shared_bytes, 0, native.kernel_params, *extra))
            _call(driver, "cuCtxSynchronize", driver.cuCtxSynchronize())

    def close(self) -> None:
        """Unload the module and release the primary context."""
        if self._module is not None:
            self._driver.cuModuleUnload(self._module)
            self._driver.cuDevicePrimaryCtxRelease(self._device)
            self._module = None

    def __enter__(self) -> CudaModule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
