"""``ts.jit(f, backend="target")`` and ``CompiledProgram.ir("target")`` / ``.ptx()``: the
generated kernels lowered to Target IR give the graph interpreter's bits in the Target
IR interpreter, assemble with ptxas, and what the lowering cannot take is refused at
the graph op's line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.backend.ptx.driver import GpuUnavailable, cuda_available
from tessera.frontend.graph.lowered_target import TargetGenerationError
from tessera.ir.transforms.to_tile import TileGenerationError
from tests.backend.ptx.driver.fake_driver import FakeDriverBase
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, bits, same_on_target

FORMATS = {"f32": ts.f32, "bf16": ts.bf16, "f16": ts.f16}


def _as(fmt: str, x: np.ndarray) -> np.ndarray:
    return ts.Tensor(np.asarray(x, np.float64), FORMATS[fmt]).array  # rounded once (RNE)


def chain(x, y, b):  # type: ignore[no-untyped-def]
    z = op.relu(x * y - 1.5) + op.maximum(x, b) / (op.abs(y) + 1.0)
    w = op.sqrt(op.abs(z)) - op.minimum(x, 0.5)
    return op.where(x > y, w, -z), (w * 0.25).astype(ts.f32)


def with_exp(x, y):  # type: ignore[no-untyped-def]
    return op.exp(x - y) * 0.5


side = st.integers(1, 40)


@settings(max_examples=20, deadline=None)
@given(rows=side, cols=side, fmt=st.sampled_from(sorted(FORMATS)),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_elementwise_chain_on_target_gives_the_graph_bits(rows: int, cols: int, fmt: str,
                                                          target: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = (_as(fmt, rng.standard_normal((rows, cols)) * 4) for _ in range(2))
    b = _as(fmt, rng.standard_normal(cols))
    same_on_target(chain, (x, y, b), target)


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=0, max_size=5),
       fmt=st.sampled_from(["f32", "bf16"]), target=st.sampled_from(TARGETS),
       seed=st.integers(0, 2**16))
def test_exp_any_rank_on_target_gives_the_graph_bits(shape: list[int], fmt: str, target: str,
                                                     seed: int) -> None:
    # ranks 0 to 5: more than three loops share one linear grid axis
    rng = np.random.default_rng(seed)
    x, y = (_as(fmt, rng.standard_normal(shape) * 30) for _ in range(2))
    same_on_target(with_exp, (x, y), target)


@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(),
       target=st.sampled_from(TARGETS))
def test_broadcasts_of_every_kind_on_target(shape: list[int], data: st.DataObject,
                                            target: str) -> None:
    # an operand of fewer axes, or of size-1 axes, broadcast into the kernel's tiles
    small = [d if data.draw(st.booleans()) else 1 for d in shape][data.draw(
        st.integers(0, len(shape) - 1)):]
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    v = rng.standard_normal(small).astype(np.float32)
    same_on_target(lambda x, v: op.maximum(x * v, v) + 2.0, (x, v), target)


@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(),
       target=st.sampled_from(TARGETS), fmt=st.sampled_from(["f32", "bf16"]))
def test_broadcasts_of_computed_tiles_on_target(shape: list[int], data: st.DataObject,
                                                target: str, fmt: str) -> None:
    # the small operand is computed on before it is broadcast (hoisted by the lowering)
    small = [d if data.draw(st.booleans()) else 1 for d in shape][data.draw(
        st.integers(0, len(shape) - 1)):]
    rng = np.random.default_rng(len(shape))
    x = _as(fmt, rng.standard_normal(shape) * 3)
    v = _as(fmt, rng.standard_normal(small) * 3)
    same_on_target(lambda x, v: op.maximum(x, v * 0.5 + 1.0) * op.exp(-op.abs(v)) +
                    op.where(v > 0.0, v, x), (x, v), target)


def test_broadcasts_of_computed_scalars_on_target() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    s = np.float32(1.75)
    for target in TARGETS:
        same_on_target(lambda x, s: op.maximum(x, s * 2.0 - 1.0) / op.abs(s + 0.5), (x, s),
                        target)


def test_specials_and_nan_payloads_on_target() -> None:
    payload = np.array([0x7FC00001, 0xFFC12345], np.uint32).view(np.float32)
    x = np.array([np.inf, -np.inf, 0.0, -0.0, 3e38, 1e-45, *payload, 1.0, -2.0], np.float32)
    y = np.array([np.inf, 1.0, -0.0, 0.0, 3e38, 1e-45, 1.0, *payload, -2.0], np.float32)
    for target in TARGETS:
        same_on_target(chain, (x, y, y[::-1].copy()), target)
        same_on_target(with_exp, (x, y), target)


def test_int32_selections_on_target() -> None:
    rng = np.random.default_rng(3)
    x, y = (rng.integers(-2**31, 2**31, (9, 7)).astype(np.int32) for _ in range(2))
    for target in TARGETS:
        same_on_target(lambda x, y: op.where(x > y, op.minimum(x, y), op.maximum(x, y)),
                        (x, y), target)


def test_stages_ptx_and_seconds() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 48)).astype(np.float32), np.ones((64, 48), np.float32)
    b = np.zeros(48, np.float32)
    lowered = ts.jit(chain).lower(x, y, b)
    text = lowered.ir("target", target="sm_80")
    assert 'ptx.kernel @chain_k0' in text and 'target = "sm_80"' in text
    assert "launch @chain_k0 grid (4, 1)" in text  # the host program is the tile level's
    assert text == ts.inspect_ir(chain, "target", x, y, b, target="sm_80")
    ptx = lowered.ptx()
    assert list(ptx) == ["chain_k0"] and ".target sm_90a" in ptx["chain_k0"]
    assert str(ptx).startswith("// kernel chain_k0\n.version")
    assert set(lowered.seconds()) == {"schedule", "to_tile", "lower", "verify", "render"}
    assert bits(ts.jit(chain, backend="target")(x, y, b)) == bits(lowered.run(x, y, b))


@pytest.mark.parametrize("target", TARGETS)
def test_generated_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(1)
    cases = [(chain, [rng.standard_normal(s).astype(np.float32) for s in [(64, 48)] * 2 +
                      [(48,)]]),
             (chain, [_as("bf16", rng.standard_normal(s)) for s in [(33, 7), (33, 7), (7,)]]),
             (with_exp, [rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)] * 2)]
    for fn, args in cases:
        for kernel in ts.jit(fn).lower(*args).target(target).kernels:
            assembles_clean(kernel)


def mlp_relu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1 + b1) @ w2 + b2


def with_pow(x):  # type: ignore[no-untyped-def]
    return op.pow(op.abs(x) + 1.0, 3.0) * 2.0


def test_what_the_lowering_cannot_take_is_refused_at_the_graph_line() -> None:
    rng = np.random.default_rng(2)
    # fp6 tiles have no loads or stores; int32 sums may leave the s32 range in int64
    fp6 = [ts.Tensor(rng.standard_normal(s), ts.fp6_e3m2).array
           for s in [(64, 32), (32, 64), (64,), (64, 16), (16,)]]
    ints = [np.ones((4, 4), np.int32)] * 2
    x = np.ones((4, 4), np.float32)
    cases = [(mlp_relu, fp6, 1, "graph.matmul", "moves fp6_e3m2 tiles"),
             (with_pow, [x], 1, "graph.pow", "tile.pow"),
             (lambda x, y: x + y, ints, 0, "graph.add", "int64 tiles .* may leave the 32-bit")]
    for fn, args, offset, name, why in cases:
        for target in TARGETS:
            with pytest.raises(TargetGenerationError, match=rf"{name} cannot be lowered for "
                                                            rf"{target} yet .*{why}") as err:
                ts.jit(fn).lower(*args).run(*args, backend="target", target=target)
            _, start = inspect.getsourcelines(fn)
            assert err.value.loc.line == start + offset
            assert isinstance(err.value, TileGenerationError)
        assert bits(ts.jit(fn, backend="tile")(*args)) == bits(ts.jit(fn)(*args))


def test_cuda_backend_without_a_gpu_says_why() -> None:
    ok, _ = cuda_available()
    if ok:
        pytest.skip("a GPU is present: the refusal is not reachable")
    x = np.ones((4, 4), np.float32)
    with pytest.raises(GpuUnavailable, match="no CUDA GPU"):
        ts.jit(with_exp, backend="cuda")(x, x)


def test_cuda_backend_runs_the_generated_kernels() -> None:
    ok, why = cuda_available()
    if not ok:
        pytest.skip(f"no CUDA GPU: {why}")
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((64, 48)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(48).astype(np.float32)
    # the GPU computes these ops correctly rounded, as the interpreters do
    assert bits(ts.jit(chain, backend="cuda")(x, y, b)) == bits(ts.jit(chain)(x, y, b))


class _TargetIrDevice(FakeDriverBase):
    """Enough of ``cuda.bindings.driver`` for the "cuda" backend of a graph function: a
    device of compute capability 9.0 whose launches run the lowered kernel in the Target
    IR interpreter on the device buffers (so the host-side path — assembly, staging,
    parameter packing, copies back — is exercised without a GPU)."""

    class CUdevice_attribute:  # mirrors the driver's class name
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    def __init__(self, kernels: dict[str, object]) -> None:
        super().__init__()
        self.kernels = kernels
        self.launched: list[str] = []

    def cuDeviceGetAttribute(self, attr: int, dev: int) -> tuple[int, int]:
        return 0, 9 if attr == 75 else 0

    def cuModuleLoadData(self, image: bytes) -> tuple[int, str]:
        assert image.startswith(b"\x7fELF")  # a cubin ptxas assembled
        return 0, "module"

    def cuModuleGetFunction(self, module: str, name: bytes) -> tuple[int, bytes]:
        return 0, name

    def cuLaunchKernel(self, f: bytes, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared: int, stream: int, kernel_params: int, extra: int) -> tuple[int]:
        import ctypes

        from tessera.interp.target import run_target

        kernel = self.kernels[f.decode()]
        n = len(kernel.args)  # type: ignore[attr-defined]
        slots = (ctypes.c_void_p * n).from_address(kernel_params)
        pointers = [ctypes.c_uint64.from_address(slots[k]).value for k in range(n)]
        arrays = [np.frombuffer(self.memory[p], np.uint8) for p in pointers]
        run_target(kernel, arrays, grid=(gx, gy, gz), block=(bx, by, bz))
        self.launched.append(f.decode())
        return (0,)


def test_cuda_backend_path_with_a_target_ir_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.backend.ptx.driver import launch

    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((40, 24)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(24).astype(np.float32)
    lowered = ts.jit(chain).lower(x, y, b)
    device = _TargetIrDevice({k.name: k.kernel for k in lowered.target("sm_90a").kernels})
    monkeypatch.setattr(launch, "_driver_module", lambda: device)
    got = lowered.run(x, y, b, backend="cuda")
    assert device.launched == ["chain_k0"] and device.memory == {}  # buffers freed
    assert bits(got) == bits(lowered.run(x, y, b))


@ts.kernel
def _leaky(x: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    t = x[tile_m:tile_m + BM, tile_n:tile_n + BN]
    return ts.tile.where(t > 0.0, t, 0.01 * t)


@ts.kernel
def _scaled_into(x: ts.Tensor["M", "N", ts.f32], out: ts.Tensor["M", "N", ts.f32]):
    out[tile_m:tile_m + BM, tile_n:tile_n + BN] = \
        x[tile_m:tile_m + BM, tile_n:tile_n + BN] * 3.0


def test_kernel_calls_in_a_graph_function_on_target() -> None:
    # hand-written kernels (a returned tile; an out_shape= buffer) beside generated ones
    def f(x, y):  # type: ignore[no-untyped-def]
        return _leaky(x * 2.0, tile_shape=(4, 8)) + _scaled_into(y, out_shape=y,
                                                                  tile_shape=(4, 8))

    rng = np.random.default_rng(8)
    x, y = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    for target in TARGETS:
        same_on_target(f, (x, y), target)
