"""The Target IR math library against the tile interpreter's checked-mode meaning.

Small ``ptx.kernel``s built with the emitter run on the Target IR interpreter and must
give the bits of :func:`tessera.numerics.transcendental.exp.exp_f32` and of the tile
``reduce`` rule (a float64 adjacent-pair tree), special values included.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.interp.tile.rules import IMPLS
from tessera.ir.core import Block, Builder, Function, Value, walk
from tessera.ir.dialects.target import KERNEL, RegType, Return
from tessera.ir.dialects.target.ops import Binary, Cvt, Fma, Shfl, Unary
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.arith import mathlib
from tessera.lower.emit import TargetEmitter
from tessera.numerics.reductions.treesum import tree_sum_f64
from tessera.numerics.transcendental.exp import exp_f32

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")

U64 = RegType("u64")
THREADS = 128


def kernel(name: str, nparams: int, ncta: int,
           body: Callable[[TargetEmitter, Value, list[Value]], None]) -> Function:
    """A 1-D kernel of ``ncta`` CTAs of 128 threads over ``nparams`` pointer parameters;
    ``body(e, thread_index, params)`` emits what one thread does."""
    block = Block()
    params = [block.add_arg(U64) for _ in range(nparams)]
    e = TargetEmitter(block)
    cta = e.mul(e.sreg("ctaid.x"), e.const(THREADS, "u32"), "u32")
    body(e, e.add(cta, e.sreg("tid.x"), "u32"), params)
    e.op(Return())
    return Function(name, block, [], kind=KERNEL,
                    attrs={"target": "sm_80", "block": [THREADS], "grid": [ncta]})


def address(e: TargetEmitter, base: Value, index: Value, size: int) -> Value:
    """``base + index * size`` as a u64 global address (``mul.wide.u32``)."""
    return e.add(base, e.bin("mul", index, e.const(size, "u32"), "u32", "wide"), "u64")


def exp_kernel(ncta: int, emit: Callable[[TargetEmitter, Value], Value] = mathlib.emit_exp_f32,
               ) -> Function:
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        x = e.ld("global", address(e, p[0], i, 4), "f32")
        e.st("global", address(e, p[1], i, 4), emit(e, x), "f32")
    return kernel("exp_f32", 2, ncta, body)


def run_exp(x: np.ndarray, emit: Callable[[TargetEmitter, Value], Value] = mathlib.emit_exp_f32,
            ) -> np.ndarray:
    assert x.size % THREADS == 0
    out = np.zeros_like(x)
    target.run_target(exp_kernel(x.size // THREADS, emit), [x, out])
    return out


def special_inputs() -> np.ndarray:
    codes = [0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF812345,  # quiet and signalling NaNs
             0x00000001, 0x80000001, 0x007FFFFF]  # subnormal inputs
    floats = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 88.72283, 88.72284, 89.0,
                       -103.97, -103.972, -104.0, -87.33655, 1e-30, -2.0**-25, 200.0,
                       -200.0, 0.5 * np.log(2), -0.5 * np.log(2)], np.float32)
    return np.concatenate([np.array(codes, np.uint32).view(np.float32), floats])


@pytest.mark.parametrize("emit", [mathlib.emit_exp_f32, mathlib.emit_exp_f32_specified])
def test_exp_kernel_matches_exp_f32_bit_for_bit(emit: Callable[[TargetEmitter, Value], Value],
                                                ) -> None:
    rng = np.random.default_rng(7)
    special = special_inputs()
    uniform = rng.uniform(-110, 90, 900).astype(np.float32)
    patterns = rng.integers(0, 2**32, 1024 - 900 - special.size, dtype=np.uint64)
    x = np.concatenate([special, uniform, patterns.astype(np.uint32).view(np.float32)])
    got = run_exp(x, emit)
    want = exp_f32(x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(got[:4]).all() and got[7 + 2] == np.inf and got[7 + 3] == 0  # specials


def test_exp_uses_only_ieee_rounded_operations() -> None:
    """The specified algorithm: binary64 add/sub/mul with an explicit .rn (so ptxas may
    not contract them into fma, PTX ISA sec. 9.7.3.1), no fma, no approximate unit."""
    fn = exp_kernel(1, mathlib.emit_exp_f32_specified)
    ops = [i.op for i in walk(fn)]
    assert not any(isinstance(op, Fma) for op in ops)
    assert not any(isinstance(op, Unary) and op.op in ("ex2", "lg2", "rcp") for op in ops)
    floats = [op for op in ops if isinstance(op, Binary) and op.type in ("f32", "f64")]
    assert floats and all(op.mode == "rn" and op.type == "f64" for op in floats)
    cvts = {(op.to, op.frm, op.rnd) for op in ops if isinstance(op, Cvt)}
    assert ("s32", "f64", "rni") in cvts and ("f32", "f64", "rn") in cvts


def test_exp_kernel_assembles() -> None:
    """ptxas accepts the rendered kernel (its table declared at module scope) for sm_80."""
    from tessera.backend.ptx.driver.assemble import ToolchainMissing, assemble
    from tessera.backend.ptx.render import render

    text = render(exp_kernel(1))
    assert isinstance(text, str)
    head = text.split(".visible .entry")[0]
    assert ".global .align 8 .b64 tessera_exp2_7[128] = {0x3FF0000000000000," in head
    assert "ld.global.nc.f64" in text
    try:
        assemble(text, "sm_80")
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")


def tile_reduce(x: np.ndarray, kind: str) -> np.ndarray:
    """The tile interpreter's checked-mode ``reduce`` rule over the last axis."""
    block = Block()
    arg = block.add_arg(TensorType(x.shape, "f32"))
    (res,) = Builder(block).create(tile_compute.Reduce(kind, -1), [arg])
    return IMPLS[tile_compute.Reduce](res.owner, False)(x)  # type: ignore[arg-type]


def row_kernel(kind: str, per: int, group: int) -> Function:
    """Rows of ``group * per`` f32 values: lane k of a ``group``-lane group loads its
    contiguous chunk, reduces it as a tree, joins the group with a butterfly, and every
    lane stores the row's result."""
    offsets = [1 << s for s in range(group.bit_length() - 1)]

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        base = address(e, p[0], i, 4 * per)
        vals = [e.ld("global", base, "f32", offset=4 * j) for j in range(per)]
        if kind == "sum":
            wide = [e.cvt(v, "f64", "f32") for v in vals]
            s = mathlib.emit_shfl_sum_f64(e, mathlib.emit_tree_sum_f64(e, wide), offsets)
            r = e.cvt(s, "f32", "f64", "rn")
        else:
            r = mathlib.emit_shfl_max_f32(e, mathlib.emit_tree_max_f32(e, vals), offsets)
        e.st("global", address(e, p[1], i, 4), r, "f32")
    return kernel(f"row_{kind}", 2, 1, body)


def wild(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values over 2^-40 .. 2^40, so float64 sums depend on the order of addition."""
    mant = rng.standard_normal(shape)
    return np.ldexp(mant, rng.integers(-40, 40, shape)).astype(np.float32)


@pytest.mark.parametrize(("per", "group"), [(4, 32), (8, 8), (2, 4), (5, 1), (1, 32)])
def test_tree_and_butterfly_sum_equal_the_tile_rule(per: int, group: int) -> None:
    rows = THREADS // group
    x = wild(np.random.default_rng(per * 100 + group), (rows, group * per))
    x[0] = 0.0
    x[0, :4] = [1.0, 2.0**60, -(2.0**60), 1.0]  # the tree gives 0, a sequential sum 1
    out = np.zeros(THREADS, np.float32)
    target.run_target(row_kernel("sum", per, group), [x, out])
    want = tile_reduce(x, "sum")
    assert np.array_equal(tree_sum_f64(x.astype(np.float64)).astype(np.float32), want)
    got = out.reshape(rows, group)  # every lane of a group holds the row's sum
    assert np.array_equal(got.view(np.uint32), np.repeat(want, group).reshape(rows, group)
                          .view(np.uint32))
    # the order matters for these values: a sequential float64 sum differs somewhere
    seq = np.zeros(rows)
    for j in range(x.shape[1]):
        seq = seq + x[:, j].astype(np.float64)
    assert not np.array_equal(seq.astype(np.float32), want)


@pytest.mark.parametrize(("per", "group"), [(4, 32), (3, 8), (1, 2)])
def test_tree_and_butterfly_max_equal_the_tile_rule(per: int, group: int) -> None:
    rows = THREADS // group
    x = wild(np.random.default_rng(per + group), (rows, group * per))
    x[1] = -np.inf
    x[2, -1] = np.inf
    out = np.zeros(THREADS, np.float32)
    target.run_target(row_kernel("max", per, group), [x, out])
    want = tile_reduce(x, "max")
    assert np.array_equal(out.reshape(rows, group), np.repeat(want, group).reshape(rows, group))


def test_tree_sum_pads_with_negative_zero() -> None:
    """-0.0 is the identity: a row of -0.0 sums to -0.0 (a +0.0 pad would give +0.0)."""
    x = np.full((THREADS, 3), -0.0, np.float32)
    out = np.zeros(THREADS, np.float32)
    target.run_target(row_kernel("sum", 3, 1), [x, out])
    assert np.signbit(out).all() and np.signbit(tile_reduce(x, "sum")).all()


def halving(v: list[float]) -> float:
    """sum(first half) + sum(second half) of a power-of-two list, recursively."""
    if len(v) == 1:
        return v[0]
    h = len(v) // 2
    return halving(v[:h]) + halving(v[h:])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 13, 32, 33])
def test_tree_sum_is_the_recursive_halving_tree(size: int) -> None:
    x = wild(np.random.default_rng(size), (6, size)).astype(np.float64)
    width = 1 << (size - 1).bit_length()
    want = [halving([*row.tolist(), *[-0.0] * (width - size)]) for row in x]
    assert tree_sum_f64(x).tolist() == want
    # (1 + 2^60) + (-2^60 + 1) loses both ones; a sequential sum keeps the last
    assert tree_sum_f64(np.array([1.0, 2.0**60, -(2.0**60), 1.0]))[()] == 0.0


def test_mathlib_rejects_wrong_types() -> None:
    e = TargetEmitter(Block())
    with pytest.raises(IRVerifyError, match="reg<f32>"):
        mathlib.emit_exp_f32(e, e.const(1.0, "f64"))
    with pytest.raises(IRVerifyError, match="reg<f64>"):
        mathlib.emit_tree_sum_f64(e, [e.const(1.0, "f32")])
    with pytest.raises(IRVerifyError, match="power of two"):
        mathlib.emit_shfl_sum_f64(e, e.const(1.0, "f64"), [3])
    with pytest.raises(IRVerifyError, match="at least one"):
        mathlib.emit_tree_max_f32(e, [])


def test_butterfly_uses_two_b32_shuffles_per_step() -> None:
    """shfl.sync moves 32 bits (PTX ISA sec. 9.7.9.6): an f64 travels as two halves."""
    e = TargetEmitter(Block())
    mathlib.emit_shfl_sum_f64(e, e.const(1.0, "f64"), [1, 2, 4])
    shfls = [i for i in e.block.instrs if isinstance(i.op, Shfl)]
    assert len(shfls) == 6 and all(i.op.mode == "bfly" for i in shfls)


def test_max_propagates_nan_like_the_tile_rule() -> None:
    """``max.NaN`` (PTX ISA sec. 9.7.3.11): a NaN anywhere in a row gives NaN, as np.max."""
    x = wild(np.random.default_rng(3), (THREADS // 8, 8 * 2))
    x[0, 5] = np.nan
    x[3, 0] = np.nan
    out = np.zeros(THREADS, np.float32)
    target.run_target(row_kernel("max", 2, 8), [x, out])
    want = tile_reduce(x, "max")
    assert np.isnan(want[[0, 3]]).all()
    assert np.array_equal(out.reshape(-1, 8), np.repeat(want, 8).reshape(-1, 8), equal_nan=True)
