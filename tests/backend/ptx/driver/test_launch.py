"""Parameter packing, argument conversion and the driver-API launch path.

Everything up to ``cuLaunchKernel`` runs here without a GPU: a fake driver stands in for
``cuda.bindings.driver`` and plays the kernel by reading the parameters through the
``kernelParams`` pointers the launcher built.  Tests that need a real GPU skip with the
reason ``cuda_available`` gives.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch.errors import TensorMapError
from tessera.backend.ptx.driver import launch
from tessera.backend.ptx.driver.launch import (
    CudaModule,
    GpuUnavailable,
    convert_arg,
    cuda_available,
    prepare_args,
)
from tessera.backend.ptx.driver.params import (
    NativeParams,
    ParamSpec,
    entry_signature,
    pack_params,
    param_spec,
    param_specs,
)
from tessera.backend.ptx.driver.tensormap import encode_tensor_map
from tessera.errors import ArgumentError
from tests.backend.ptx.driver.fake_driver import FakeDriverBase
from tests.backend.ptx.driver.test_assemble import ADD_ONE

HAVE_GPU, WHY_NOT = cuda_available()

# --- layout (CUDA Driver API, cuLaunchKernel: each parameter at its natural alignment) ----

_CTYPES = {"u8": ctypes.c_uint8, "s8": ctypes.c_int8, "u16": ctypes.c_uint16,
           "s16": ctypes.c_int16, "u32": ctypes.c_uint32, "s32": ctypes.c_int32,
           "f32": ctypes.c_float, "u64": ctypes.c_uint64, "s64": ctypes.c_int64,
           "f64": ctypes.c_double, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16}


def _value(kind: str) -> st.SearchStrategy[Any]:
    if kind in ("f16", "f32", "f64"):
        return st.floats(allow_nan=False, width=int(kind[1:]))  # exactly representable
    if kind == "bf16":
        return st.floats(-1e30, 1e30)  # rounded to bf16 on packing (ml_dtypes: RNE)
    bits = int(kind[1:])
    if kind[0] == "u":
        return st.integers(0, (1 << bits) - 1)
    return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


@st.composite
def signatures(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[Any]]:
    kinds = draw(st.lists(st.sampled_from(sorted(_CTYPES)), min_size=1, max_size=10))
    return [(f"p{i}", f".{k}") for i, k in enumerate(kinds)], [draw(_value(k)) for k in kinds]


@settings(max_examples=150, deadline=None)
@given(signatures())
def test_layout_and_bytes_match_a_c_struct(case: tuple[list[tuple[str, str]], list[Any]]
                                           ) -> None:
    # A C struct of the same scalar fields has the same natural-alignment layout (x86-64
    # SysV and the CUDA parameter ABI agree for these types).
    signature, values = case
    fields = [(name, _CTYPES[t[1:]]) for name, t in signature]
    struct_type = type("Params", (ctypes.Structure,), {"_fields_": fields})
    reference = struct_type()
    for (name, ptx_type), value in zip(signature, values):
        kind = ptx_type[1:]
        if kind == "f16":
            value = int(np.array(value, np.float16).view(np.uint16))
        elif kind == "bf16":
            value = int(np.array(value).astype(ml_dtypes.bfloat16).view(np.uint16))
        setattr(reference, name, value)
    packed = pack_params(signature, values)
    assert packed.offsets == tuple(getattr(struct_type, n).offset for n, _ in signature)
    last = packed.specs[-1]
    end = packed.offsets[-1] + last.size
    assert packed.buffer == bytes(reference)[:end]


def test_hand_computed_offsets_with_a_tensor_map() -> None:
    signature = [("x", ".u64"), ("alpha", ".f32"), ("h", ".f16"),
                 ("tmap_a", ".align 64 .b8 [128]"), ("n", ".u32"), ("y", ".u64")]
    tmap = bytes(range(128))
    packed = pack_params(signature, [0x1000, 1.5, -2.0, tmap, 7, 0x2000])
    # x 0..8, alpha 8..12, h 12..14, pad to 64, tmap 64..192, n 192..196, pad, y 200..208
    assert packed.offsets == (0, 8, 12, 64, 192, 200)
    assert len(packed.buffer) == 208
    assert packed.value_bytes(1) == struct.pack("<f", 1.5)
    assert packed.value_bytes(2) == b"\x00\xc0"  # -2.0 in binary16
    assert packed.value_bytes(3) == tmap
    assert packed.buffer[14:64] == bytes(50)  # padding is zero
    assert packed.specs[3] == ParamSpec("tmap_a", "bytes", 128, 64)


def test_param_spec_forms() -> None:
    assert param_spec("p", ".u64 .ptr .global .align 16") == ParamSpec("p", "u64", 8, 8)
    assert param_spec("a", ".align 8 .u32 [4]") == ParamSpec("a", "bytes", 16, 8)
    assert param_spec("b", ".b8 [3]") == ParamSpec("b", "bytes", 3, 1)
    assert param_spec("c", ".bf16") == ParamSpec("c", "bf16", 2, 2)
    with pytest.raises(ArgumentError, match="cannot read the PTX type"):
        param_spec("d", ".pred")


def test_entry_signature_reads_the_ptx() -> None:
    assert entry_signature(ADD_ONE, "add_one") == [("p_x", ".u64"), ("p_n", ".u32")]
    ptx = ".visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 .ptr .global p)\n{}"
    specs = param_specs(entry_signature(ptx, "k"))
    assert specs == (ParamSpec("tmap", "bytes", 128, 64), ParamSpec("p", "u64", 8, 8))
    with pytest.raises(ArgumentError, match=r"no kernel '\.entry nope'"):
        entry_signature(ptx, "nope")


@pytest.mark.parametrize(("ptx_type", "value", "message"), [
    (".u32", -1, "does not fit .u32"),
    (".u32", 1 << 32, "does not fit .u32"),
    (".s32", 1 << 31, "does not fit .s32"),
    (".s8", -129, "does not fit .s8"),
    (".u64", 1 << 64, "does not fit .u64"),
    (".u32", 1.5, "needs an integer"),
    (".f32", 1e39, "overflows .f32"),
    (".f16", 70000.0, "overflows .f16"),
    (".bf16", 1e39, "overflows .bf16"),
    (".f32", "x", "needs a number"),
    (".align 64 .b8 [128]", bytes(64), "exactly 128 bytes"),
    (".align 64 .b8 [128]", 5, "opaque 128-byte block"),
])
def test_out_of_range_values(ptx_type: str, value: Any, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        pack_params([("v", ptx_type)], [value])


def test_bit_types_take_both_signs_and_inf_is_kept() -> None:
    packed = pack_params([("a", ".b32"), ("b", ".f16"), ("c", ".b16")],
                         [-1, float("inf"), 0xFFFF])
    assert packed.buffer[:4] == b"\xff\xff\xff\xff"
    assert packed.value_bytes(1) == np.array(np.inf, np.float16).tobytes()
    assert packed.value_bytes(2) == b"\xff\xff"


def test_wrong_argument_count() -> None:
    with pytest.raises(ArgumentError, match=r"takes 2 parameter\(s\) \(x, n\), got 1"):
        pack_params([("x", ".u64"), ("n", ".u32")], [0])
    with pytest.raises(ArgumentError, match=r"takes 2 argument\(s\)"):
        prepare_args(param_specs([("x", ".u64"), ("n", ".u32")]), [1, 2, 3])


def test_native_params_serve_both_launch_forms() -> None:
    signature = [("n", ".u32"), ("tmap", ".align 64 .b8 [128]"), ("x", ".u64")]
    packed = pack_params(signature, [3, bytes(range(128)), 0xDEADBEEF])
    native = NativeParams(packed)
    pointers = (ctypes.c_void_p * 3).from_address(native.kernel_params)
    for i, spec in enumerate(packed.specs):
        assert native.read(i, spec.size) == packed.value_bytes(i)
        assert pointers[i] % spec.align == 0  # host copy is naturally aligned too
    extra = (ctypes.c_void_p * 5).from_address(native.extra)
    # cuda.h: CU_LAUNCH_PARAM_BUFFER_POINTER = 1, _BUFFER_SIZE = 2, _END = 0
    assert (extra[0], extra[2], extra[4]) == (1, 2, None)
    assert ctypes.string_at(extra[1], len(packed.buffer)) == packed.buffer
    assert ctypes.c_size_t.from_address(extra[3]).value == len(packed.buffer) == 200


# --- argument conversion ---------------------------------------------------------------------

POINTER = ParamSpec("x", "u64", 8, 8)


class FakeDeviceArray:
    """An object exposing a device pointer the way CuPy / Numba arrays do."""

    def __init__(self, pointer: int):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4",
                                         "data": (pointer, False), "version": 3}


class FakeDLPack:
    """Claims a DLPack device type and hands out a NumPy-made capsule."""

    def __init__(self, array: np.ndarray, device_type: int):
        self.array, self.device_type = array, device_type

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device_type, 0

    def __dlpack__(self, **_: Any) -> Any:
        return self.array.__dlpack__()


def test_numpy_array_is_staged() -> None:
    array = np.arange(4, dtype=np.float32)
    arg = convert_arg(POINTER, array)
    assert arg.host_array is array


def test_cuda_array_interface_gives_its_pointer() -> None:
    assert convert_arg(POINTER, FakeDeviceArray(0x7F0000001000)).value == 0x7F0000001000


def test_dlpack_cuda_array_gives_its_data_pointer() -> None:
    array = np.arange(8, dtype=np.float32)[2:]  # a view: DLPack's data + byte_offset
    arg = convert_arg(POINTER, FakeDLPack(array, 2))  # kDLCUDA
    assert arg.value == array.ctypes.data
    assert arg.keepalive is not None


def test_dlpack_host_array_is_staged_and_other_devices_refused() -> None:
    array = np.ones(3, dtype=np.int32)
    staged = convert_arg(POINTER, FakeDLPack(array, 1)).host_array  # kDLCPU
    assert staged is not None and np.shares_memory(staged, array)
    with pytest.raises(ArgumentError, match="device type 4"):
        convert_arg(POINTER, FakeDLPack(array, 4))  # kDLOpenCL


def test_array_to_a_scalar_parameter_is_refused() -> None:
    with pytest.raises(ArgumentError, match="64-bit pointer parameter"):
        convert_arg(ParamSpec("n", "u32", 4, 4), np.zeros(2))
    with pytest.raises(ArgumentError, match="64-bit pointer parameter"):
        convert_arg(ParamSpec("alpha", "f32", 4, 4), FakeDeviceArray(16))


def test_cutensormap_object_becomes_its_bytes() -> None:
    from cuda.bindings import driver

    tmap = driver.CUtensorMap()
    tmap.opaque = list(range(16))
    arg = convert_arg(ParamSpec("t", "bytes", 128, 64), tmap)
    assert arg.value == struct.pack("<16Q", *range(16))


# --- without a driver ------------------------------------------------------------------------


class FakeDriver(FakeDriverBase):
    """Enough of ``cuda.bindings.driver`` to run the launcher; "runs" ``add_one``."""

    def __init__(self, init_error: int = 0, devices: int = 1):
        super().__init__(init_error, devices)
        self.loaded: list[bytes] = []
        self.launches: list[tuple[Any, ...]] = []

    def cuModuleLoadData(self, image: bytes) -> tuple[int, str]:
        self.loaded.append(image)
        return 0, "module"

    def cuModuleGetFunction(self, module: str, name: bytes) -> tuple[int, bytes]:
        return (0, name) if name == b"add_one" else (500, None)

    def cuLaunchKernel(self, f: bytes, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared: int, stream: int, kernel_params: int, extra: int) -> tuple[int]:
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), shared, extra))
        pointers = (ctypes.c_void_p * 2).from_address(kernel_params)
        x = ctypes.c_uint64.from_address(pointers[0]).value
        n = ctypes.c_uint32.from_address(pointers[1]).value
        data = np.frombuffer(self.memory[x], dtype=np.float32)
        data[:n] += 1.0  # what add_one does on the device
        return (0,)


def test_launch_path_with_a_fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(launch, "_driver_module", lambda: fake)
    array = np.arange(6, dtype=np.float32)
    module = CudaModule(ADD_ONE)
    module.launch("add_one", grid=2, block=(128,), shared_bytes=0, args=[array, 4])
    assert fake.loaded[0].endswith(b"}\n\0")  # PTX is passed as a C string
    assert fake.launches == [(b"add_one", (2, 1, 1), (128, 1, 1), 0, 0)]
    np.testing.assert_array_equal(array, [1, 2, 3, 4, 4, 5])  # copied back in place
    assert fake.memory == {}  # staging buffers freed
    with pytest.raises(ArgumentError, match="grid must be 1 to 3 positive integers"):
        module.launch("add_one", grid=(0,), block=1, shared_bytes=0, args=[array, 1])
    with pytest.raises(launch.CudaError, match="cuModuleGetFunction failed"):
        module.function("missing", signature=[])


def test_a_cooperative_launch_calls_the_cooperative_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``cooperative=True`` goes through ``cuLaunchCooperativeKernel`` (no ``extra``)."""
    fake = FakeDriver()
    cooperative: list[tuple[Any, ...]] = []

    def launch_cooperative(f: bytes, *rest: Any) -> tuple[int]:
        cooperative.append((f, rest[:3], rest[3:6], rest[6]))
        return fake.cuLaunchKernel(f, *rest, 0)
    fake.cuLaunchCooperativeKernel = launch_cooperative  # type: ignore[attr-defined]
    monkeypatch.setattr(launch, "_driver_module", lambda: fake)
    array = np.zeros(4, np.float32)
    CudaModule(ADD_ONE).launch("add_one", 2, 32, 0, [array, 4], cooperative=True)
    assert cooperative == [(b"add_one", (2, 1, 1), (32, 1, 1), 0)]
    np.testing.assert_array_equal(array, 1)


def test_read_only_host_array_is_not_written_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_driver_module", FakeDriver)
    array = np.zeros(4, dtype=np.float32)
    array.flags.writeable = False
    CudaModule(ADD_ONE).launch("add_one", 1, 32, 0, [array, 4])
    assert not array.any()


def test_cubin_needs_a_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_driver_module", FakeDriver)
    module = CudaModule(b"\x7fELF" + bytes(60))
    with pytest.raises(ArgumentError, match="pass signature="):
        module.function("add_one")
    assert module.function("add_one", [("x", ".u64"), ("n", ".u32")]).specs[1].kind == "u32"


@pytest.mark.parametrize(("fake", "reason"), [
    (FakeDriver(init_error=100), "cuInit failed: CUDA_ERROR_NO_DEVICE"),
    (FakeDriver(devices=0), "no CUDA device"),
])
def test_unusable_driver_reasons(monkeypatch: pytest.MonkeyPatch, fake: FakeDriver,
                                 reason: str) -> None:
    monkeypatch.setattr(launch, "_driver_module", lambda: fake)
    assert cuda_available() == (False, reason)
    with pytest.raises(GpuUnavailable, match=reason) as info:
        CudaModule(ADD_ONE)
    assert "NVIDIA GPU" in str(info.value)


def test_missing_driver_library_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoLibrary(FakeDriver):
        def cuInit(self, flags: int) -> tuple[int]:
            raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found ...')

    monkeypatch.setattr(launch, "_driver_module", NoLibrary)
    usable, reason = cuda_available()
    assert not usable and reason.startswith("no CUDA driver library")


def test_tensor_map_rules_run_before_the_driver() -> None:
    # cuda.h cuTensorMapEncodeTiled: globalAddress must be 16-byte aligned; with a 128B
    # swizzle the inner box may span at most 128 bytes (64 bf16 elements).
    with pytest.raises(TensorMapError, match="16-byte aligned"):
        encode_tensor_map("bf16", 8, (64, 64), (128,), (64, 64))
    with pytest.raises(TensorMapError, match="128-byte span"):
        encode_tensor_map("bf16", 0, (256, 64), (512,), (128, 64), swizzle=3)
    with pytest.raises(ArgumentError, match="no tensor-map data type"):
        encode_tensor_map("f8", 0, (64,), (), (64,))


@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU path")
def test_valid_tensor_map_needs_a_gpu() -> None:
    with pytest.raises(GpuUnavailable, match=WHY_NOT.split(":")[0]):
        encode_tensor_map("bf16", 0, (256, 64), (512,), (64, 64), swizzle=3)


# --- on a GPU --------------------------------------------------------------------------------


def _need_gpu() -> None:
    if not HAVE_GPU:
        pytest.skip(WHY_NOT)


def test_gpu_launch_numpy_in_place() -> None:
    _need_gpu()
    array = np.arange(1000, dtype=np.float32)
    with CudaModule(ADD_ONE) as module:
        module.launch("add_one", grid=4, block=256, shared_bytes=0, args=[array, 900])
    expected = np.arange(1000, dtype=np.float32)
    expected[:900] += 1
    np.testing.assert_array_equal(array, expected)


def test_gpu_tensor_map_encodes_128_bytes() -> None:
    _need_gpu()
    assert len(encode_tensor_map("bf16", 0, (256, 64), (512,), (64, 64), swizzle=3)) == 128


@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU path")
def test_tensor_map_call_shape_is_accepted_by_the_bindings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The bindings convert arguments before loading libcuda: a wrong argument type would
    # be a TypeError; reaching the missing driver library means the call shape is right.
    monkeypatch.setattr(launch, "_ready_driver", launch._driver_module)
    with pytest.raises(RuntimeError, match="driver library"):
        encode_tensor_map("bf16", 0, (256, 64), (512,), (64, 64), swizzle=3)


def test_device_arrays_resolve_views_and_reject_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reshape of a staged view (a tensor map's 2-D view) resolves inside that view's
    copy; a view of a non-contiguous staged array, and overlapping arguments, are
    errors that say what to pass instead."""
    fake = FakeDriver()
    owner = np.arange(24, dtype=np.float32)
    view = owner[4:]  # a view: its reshape's base is ``owner``, which is not staged
    with launch.DeviceArrays(fake, [view]) as dev:
        base = dev.pointer(view)
        assert dev.pointer(view.reshape(-1, 4)) == base
        assert dev.pointer(view[8:]) == base + 32
    strided = owner[::2]
    with launch.DeviceArrays(fake, [strided]) as dev:
        with pytest.raises(ArgumentError, match="ascontiguousarray"):
            dev.pointer(strided.reshape(-1, 3))
    with pytest.raises(ArgumentError, match="share memory"):
        with launch.DeviceArrays(fake, [owner, owner[2:]]):
            pass
    assert fake.memory == {}


def test_failed_module_load_releases_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[int] = []

    class Failing(FakeDriver):
        def cuModuleLoadData(self, image: bytes) -> tuple[int, str | None]:
            return 999, None

        def cuDevicePrimaryCtxRelease(self, device: int) -> tuple[int]:
            released.append(device)
            return (0,)

    fake = Failing()
    monkeypatch.setattr(launch, "_driver_module", lambda: fake)
    with pytest.raises(launch.CudaError, match="cuModuleLoadData"):
        CudaModule(ADD_ONE)
    assert released == [0]


class _DestroyedContextDriver(FakeDriverBase):
    """A driver whose current context was destroyed (the primary context after the last
    module released it), which no query tells apart from a live one: tensor maps fail
    to encode until a live context is made current."""

    class CUresult:  # mirrors the driver's enum
        CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED = 201, 709

    class CUtensorMapDataType:
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9

    cuuint32_t = cuuint64_t = int
    CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = int
    CUtensorMapFloatOOBfill = int

    def __init__(self) -> None:
        super().__init__()
        self.current, self.calls = "dead", []

    def cuCtxGetCurrent(self) -> tuple[int, int]:
        return 0, 1  # a non-null handle either way

    def cuCtxSetCurrent(self, ctx: str) -> tuple[int]:
        self.calls.append("set current")
        self.current = ctx
        return (0,)

    def cuTensorMapEncodeTiled(self, *args: Any) -> tuple[int, Any]:
        if self.current == "dead":
            return 709, None
        storage = ctypes.create_string_buffer(128)
        self.keep = storage
        return 0, type("Map", (), {"getPtr": lambda _: ctypes.addressof(storage)})()


def test_a_destroyed_current_context_is_replaced_before_encoding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _DestroyedContextDriver()
    monkeypatch.setattr(launch, "_ready_driver", lambda: fake)
    encoded = encode_tensor_map("bf16", 0, (256, 64), (512,), (64, 64), swizzle=3)
    assert len(encoded) == 128 and fake.calls == ["set current"] and fake.current == "ctx"
