"""The tile-kernel seeds: corrected (``kernels/``) against float64 NumPy on every
backend, and as written (``tile_seeds.py``) with the literal behaviour docs/decisions.md
records. Launch shapes are small so that the Target IR interpreter runs them quickly;
each example's own ``main`` (larger shapes) is a slow case."""

from __future__ import annotations

import contextlib
import importlib
import io
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance import tile_seeds
from tessera.conformance.cases.common import f64, raises
from tessera.conformance.registry import KERNEL, RULE, case, register

QUICK = "overview-and-quickstart.md"
GUIDE = "programming-model-guide.md"
BUGS = "decisions.md Seed examples with bugs"
RNG = np.random.default_rng(31)


def _k(name: str) -> Any:
    return importlib.import_module(f"tessera.conformance.kernels.{name}")


def _bf16(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _exact_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact product of narrow operands (exact in float64 here), rounded once."""
    return (f64(a) @ f64(b)).astype(np.float32)


@case("kernels.saxpy.corrected", spec=f"{QUICK} Example 1: SAXPY", backends=KERNEL)
def _saxpy(ctx: Any) -> None:
    """y = alpha x + y in f32 under the default grid and a larger guarded grid."""
    for grid in (None, 1024):
        x, y = RNG.standard_normal(1000).astype(np.float32), np.ones(1000, np.float32)
        want = np.float32(2.5) * x + y
        launch = {} if grid is None else {"grid": grid}
        ctx.launch(_k("saxpy").saxpy, x, y, 2.5, **launch)
        assert np.array_equal(y, want)


def _gemm_case(name: str, make: Any, tile: tuple[int, ...], doc: str,
               **launch: Any) -> Any:
    def run(ctx: Any) -> None:
        a, b, reference = make()
        c = np.zeros(reference.shape, np.float32)
        ctx.launch(getattr(_k(name), name), a, b, c, tile_shape=tile, **launch)
        assert np.array_equal(c, reference), float(np.abs(c - reference).max())

    run.__doc__ = doc
    return run


register("kernels.gemm.corrected", _gemm_case(
    "gemm", lambda: (a := _bf16(64, 96), b := _bf16(96, 64), _exact_f32(a, b)), (64, 64, 32),
    "Tensor-core GEMM with its K loop: the exact bf16 product rounded once to f32."),
    spec=f"{QUICK} Example 2; {BUGS}: tensor-core GEMM", backends=KERNEL)
register("kernels.gemm.persistent", _gemm_case(
    "gemm", lambda: (a := _bf16(2048, 128), b := _bf16(128, 1280), _exact_f32(a, b)),
    (128, 128, 64), "The GEMM with persistent CTAs on sm_90a (one an SM, 160 tiles: some "
    "CTAs walk two): the same bits as one CTA a tile; the option changes no result.",
    config={"persistent": True}),
    spec="ptx-backend.md Persistent CTAs: each tile runs the same wgmma sequence",
    backends=KERNEL)
register("kernels.double-buffered-gemm.corrected", _gemm_case(
    "double_buffered_gemm", lambda: (a := _bf16(64, 96), b := _bf16(96, 64),
                                     _exact_f32(a, b)), (64, 64, 32),
    "Double-buffered GEMM multiplies every K block, the last included: exact, rounded once."),
    spec=f"{GUIDE} Double Buffering Pattern; {BUGS}", backends=KERNEL)
register("kernels.fp8-gemm.corrected", _gemm_case(
    "fp8_gemm", lambda: (a := RNG.standard_normal((64, 128)).astype(ml_dtypes.float8_e4m3fn),
                         bt := RNG.standard_normal((64, 128)).astype(ml_dtypes.float8_e4m3fn),
                         _exact_f32(a, bt.T)), (64, 64, 64),
    "fp8 e4m3 GEMM (B stored N x K) with f32 accumulation: the exact product rounded once."),
    spec="decisions.md Numerics: fp8_e4m3 @accum(f32)", backends=KERNEL)


@case("kernels.row-softmax.corrected", spec=f"{GUIDE} Safe Numerical Operations (row "
      "softmax kernel)", backends=KERNEL)
def _row_softmax(ctx: Any) -> None:
    """Row softmax against float64 within a few f32 roundings of values <= 1."""
    x = (3 * RNG.standard_normal((16, 64))).astype(np.float32)
    y = np.zeros_like(x)
    ctx.launch(_k("row_softmax").row_softmax, x, y, tile_shape=(4,))
    assert np.abs(f64(y) - _k("row_softmax").reference(x)).max() < 4 * 2.0**-24 * 64


def _flash(causal: bool) -> Any:
    def run(ctx: Any) -> None:
        q, k, v = _bf16(1, 128, 32), _bf16(1, 128, 32), _bf16(1, 128, 32)
        out = ctx.launch(_k("flash_attention").flash_attention, q, k, v, is_causal=causal)
        err = np.abs(f64(out) - _k("flash_attention").reference(q, k, v, causal)).max()
        # one bf16 rounding of the output (|out| <= max|v|) plus f32 softmax arithmetic
        assert err <= 2.0**-8 * np.abs(f64(v)).max() + 1e-4, err

    run.__doc__ = (f"Flash attention ({'causal' if causal else 'full'}) with the corrected "
                   "normaliser, one group per query block, against float64 attention.")
    return run


for _causal in (True, False):
    register(f"kernels.flash-attention.corrected.{'causal' if _causal else 'full'}",
             _flash(_causal), spec=f"{QUICK} Example 4; {BUGS}: flash attention",
             backends=KERNEL)


@case("kernels.block-reduction.corrected", spec=f"{GUIDE} Tile Groups and Synchronization",
      backends=KERNEL)
def _block_reduction(ctx: Any) -> None:
    """Sixteen groups each reduce a block and add it into ``total`` with ``+=``:
    within the f32 summation bound gamma_n sum|x| of the exact sum."""
    data = RNG.standard_normal(1024).astype(np.float32)
    total = np.zeros(1, np.float32)
    ctx.launch(_k("cooperative_reduction").block_reduction, data, total, grid=16,
               group_size=64)
    bound = 1024 * 2.0**-24 * np.abs(f64(data)).sum()
    assert abs(float(total[0]) - f64(data).sum()) <= bound


@case("kernels.memory-hierarchy.corrected", spec=f"{GUIDE} Memory Hierarchy Operations",
      backends=KERNEL)
def _memory(ctx: Any) -> None:
    """Each tile adds its top-left element (staged through shared memory) to itself."""
    a = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    out = np.zeros_like(a)
    ctx.launch(_k("memory_hierarchy").memory_hierarchy_example, a, out, tile_shape=(64, 64))
    assert np.array_equal(out, a + np.repeat(np.repeat(a[::64, ::64], 64, 0), 64, 1))


@case("kernels.optimized-memory-access.corrected", spec=f"{GUIDE} Memory Access Patterns",
      backends=KERNEL)
def _copy(ctx: Any) -> None:
    """The staged copy writes ``dst`` equal to ``src``, every tile in bounds."""
    src = _bf16(64, 96)
    dst = np.zeros_like(src)
    ctx.launch(_k("optimized_memory_access").optimized_memory_access, src, dst,
               tile_shape=(32, 32))
    assert np.array_equal(dst.view(np.uint16), src.view(np.uint16))


@case("kernels.process-chunks.corrected", spec=f"{GUIDE} Tile Ranges and Iteration",
      backends=KERNEL)
def _chunks(ctx: Any) -> None:
    """Chunks of 128 spread over a group: out = x * x + 1 in f32, the ragged end too."""
    x = RNG.standard_normal(300).astype(np.float32)
    out = np.zeros_like(x)
    ctx.launch(_k("process_chunks").process_chunks, x, out, grid=3, group_size=4)
    assert np.array_equal(out, x * x + np.float32(1.0))


@case("kernels.tile-example.corrected", spec=f"{GUIDE} Basic Tile Operations",
      backends=KERNEL)
def _tile_example(ctx: Any) -> None:
    """``data[tile_id] *= 2`` doubles each element once; extra tiles do nothing."""
    data = np.arange(100, dtype=np.float32)
    ctx.launch(_k("tile_example").tile_example, data, grid=13, group_size=8)
    assert np.array_equal(data, 2 * np.arange(100, dtype=np.float32))


# ------------------------------------------------------------------------- as written
@case("kernels.seed.saxpy.as-written", spec=f"{QUICK} Example 1", backends=KERNEL)
def _saxpy_seed(ctx: Any) -> None:
    """The seed SAXPY is correct as written: y is updated in place and returned."""
    x, y = RNG.standard_normal(300).astype(np.float32), RNG.standard_normal(300).astype(
        np.float32)
    want = np.float32(-1.5) * x + y
    assert ctx.launch(tile_seeds.saxpy, x, y, -1.5) is y and np.array_equal(y, want)


@case("kernels.seed.tile-example.as-written", spec=f"{GUIDE} Basic Tile Operations",
      backends=KERNEL)
def _tile_seed(ctx: Any) -> None:
    """The seed ``tile_example`` doubles every element under the default grid."""
    data = np.arange(50, dtype=np.float32)
    ctx.launch(tile_seeds.tile_example, data)
    assert np.array_equal(data, 2 * np.arange(50, dtype=np.float32))


def _undefined(kernel: Any, args: Any, name: str, text: str) -> Any:
    def run(ctx: Any) -> None:
        err = raises(ts.tile.UndefinedNameError, kernel, *args())
        assert f"'{name}'" in str(err) and err.loc.file.endswith("tile_seeds.py"), str(err)
        with open(err.loc.file) as source:
            assert text in source.read().splitlines()[err.loc.line - 1]

    run.__doc__ = f"As written the seed uses ``{name}`` undefined: a compile error at its line."
    return run


register("kernels.seed.process-chunks.as-written", _undefined(
    tile_seeds.process_chunks, lambda: (np.ones(8, np.float32), np.zeros(8, np.float32)),
    "process", "process(input[i])"), spec=f"{GUIDE} Tile Ranges and Iteration; {BUGS}",
    backends=RULE)
register("kernels.seed.memory-hierarchy.as-written", _undefined(
    tile_seeds.memory_hierarchy_example, lambda: (np.ones((64, 64), np.float32),), "i",
    "A[i, j]"), spec=f"{GUIDE} Memory Hierarchy Operations; {BUGS}", backends=RULE)


@case("kernels.seed.gemm.as-written", spec=f"{QUICK} Example 2; {BUGS}: tensor-core GEMM",
      backends=KERNEL)
def _gemm_seed(ctx: Any) -> None:
    """No K loop: with a 2-D grid ``tile_k`` is 0 and one launch adds only the first BK
    slice of the product into C, rounded once."""
    a, b = _bf16(128, 96), _bf16(96, 128)
    c = np.zeros((128, 128), np.float32)
    ctx.launch(tile_seeds.gemm, a, b, c, grid=(2, 2))
    assert np.array_equal(c, _exact_f32(a[:, :32], b[:32]))


@case("kernels.seed.double-buffered-gemm.as-written", spec=f"{GUIDE} Double Buffering "
      f"Pattern; {BUGS}", backends=KERNEL)
def _double_seed(ctx: Any) -> None:
    """As written the last K block is never multiplied: C is A[:, :96] @ B[:96]."""
    a, b = _bf16(64, 128), _bf16(128, 64)
    c = np.zeros((64, 64), np.float32)
    ctx.launch(tile_seeds.double_buffered_gemm, a, b, c)
    assert np.allclose(c, f64(a)[:, :96] @ f64(b)[:96], rtol=0, atol=1e-4)
    assert not np.allclose(c, f64(a) @ f64(b), rtol=0, atol=1e-2)


@case("kernels.seed.cooperative-reduction.as-written", spec=f"{GUIDE} Tile Groups and "
      "Synchronization", backends=KERNEL)
def _coop_seed(ctx: Any) -> None:
    """As written it is a correct single-group reduction: tile 0's value is the sum."""
    data = RNG.standard_normal(1024).astype(np.float32)
    got = float(ctx.launch(tile_seeds.cooperative_reduction, data, grid=1, group_size=128))
    assert abs(got - f64(data).sum()) <= 1024 * 2.0**-24 * np.abs(f64(data)).sum()


@case("kernels.seed.optimized-memory-access.as-written", spec=f"{GUIDE} Memory Access "
      f"Patterns; {BUGS}")
def _oma_seed(ctx: Any) -> None:
    """As written ``dst`` is never written, and under the default grid the second group
    reads past the tensor: an out-of-bounds report naming group 1."""
    src = _bf16(128, 128)
    dst = np.zeros_like(src)
    tile_seeds.optimized_memory_access(src, dst, grid=1)
    assert not dst.astype(np.float32).any()
    err = raises(ts.tile.SanitizerError, tile_seeds.optimized_memory_access, src, dst)
    assert err.kind == "out of bounds" and err.group == 1, str(err)


def _main(name: str) -> Any:
    def run(ctx: Any) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            _k(name).main()

    run.__doc__ = f"``kernels/{name}.py``'s own check (larger shapes) passes."
    return run


for _name in ("cooperative_reduction", "double_buffered_gemm", "flash_attention", "fp8_gemm",
              "gemm", "memory_hierarchy", "optimized_memory_access", "process_chunks",
              "row_softmax", "saxpy", "tile_example"):
    register(f"kernels.example.{_name}", _main(_name), spec="decisions.md Seed examples "
             "with bugs: corrected examples", slow=True)
