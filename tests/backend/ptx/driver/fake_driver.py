"""A fake ``cuda.bindings.driver`` for tests without a GPU: a device, a context and
device memory held as host byte arrays (pointers never reused while live). Tests
subclass it with what their launches do (``cuModuleGetFunction``, ``cuLaunchKernel``)."""

from __future__ import annotations

import ctypes


class FakeDriverBase:
    """The driver calls the launcher makes, answered from host memory."""

    class CUfunction_attribute:  # mirrors the driver's class name
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, init_error: int = 0, devices: int = 1) -> None:
        self.init_error, self.devices = init_error, devices
        self.memory: dict[int, bytearray] = {}
        self.next = 0x10000

    def cuInit(self, flags: int) -> tuple[int]:
        return (self.init_error,)

    def cuGetErrorName(self, err: int) -> tuple[int, bytes]:
        return 0, {100: b"CUDA_ERROR_NO_DEVICE", 999: b"CUDA_ERROR_UNKNOWN"}.get(err, b"?")

    def cuDeviceGetCount(self) -> tuple[int, int]:
        return 0, self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple[int, int]:
        return 0, ordinal

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple[int, str]:
        return 0, "ctx"

    def cuDevicePrimaryCtxRelease(self, device: int) -> tuple[int]:
        return (0,)

    def cuCtxSetCurrent(self, ctx: str) -> tuple[int]:
        return (0,)

    def cuModuleUnload(self, module: str) -> tuple[int]:
        return (0,)

    def cuMemAlloc(self, size: int) -> tuple[int, int]:
        pointer, self.next = self.next, self.next + 0x10000 * (1 + size // 0x10000)
        self.memory[pointer] = bytearray(size)
        return 0, pointer

    def cuMemcpyHtoD(self, dst: int, src: int, size: int) -> tuple[int]:
        self.memory[dst][:] = ctypes.string_at(src, size)
        return (0,)

    def cuMemcpyDtoH(self, dst: int, src: int, size: int) -> tuple[int]:
        ctypes.memmove(dst, bytes(self.memory[src][:size]), size)
        return (0,)

    def cuMemFree(self, pointer: int) -> tuple[int]:
        del self.memory[pointer]
        return (0,)

    def cuCtxSynchronize(self) -> tuple[int]:
        return (0,)
