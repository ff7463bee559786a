"""The graph-level seed examples of the specification (``seeds.py``, verbatim): run as
written with only their inputs added, and corrected where docs/decisions.md says the
seed is wrong ("Seed examples with bugs")."""

from __future__ import annotations

import builtins
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance import seeds
from tessera.conformance.cases.common import f64, raises, run_seed, star_namespace
from tessera.conformance.registry import case

BUGS = "decisions.md Seed examples with bugs"
NAMES = "decisions.md Names: every seed spelling works"


def _fp8(x: np.ndarray) -> np.ndarray:
    """RNE into fp8_e4m3 with satfinite, per the ruling (clip to 448, then ml_dtypes)."""
    return np.clip(x, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn)


@case("seeds.attention.as-written", spec="guide-ch2-programming-model.md §2.2 Operator Graphs")
def _attention(ctx: Any) -> None:
    """The ``@graph.module`` attention seed: softmax(Q K^T) V against float64, and its
    Graph IR holds transpose, matmul and softmax."""
    ns = run_seed(seeds.ATTENTION)
    rng = np.random.default_rng(17)
    q, k, v = (rng.standard_normal((5, 8)).astype(np.float32) for _ in range(3))
    out = f64(ns["attention"](q, k, v))
    s = (f64(q) @ f64(k).T).astype(np.float32)
    e = np.exp(f64(s) - f64(s).max(axis=-1, keepdims=True))
    a = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    assert np.allclose(out, f64(a) @ f64(v), rtol=1e-6, atol=1e-7)
    text = ts.inspect_ir(ns["attention"])
    assert text.startswith("module @attention {")
    assert all(op in text for op in ("graph.transpose", "graph.matmul", "graph.softmax"))


@case("seeds.tile-shape.as-written", spec="guide-ch2-programming-model.md §2.3 Tiles")
def _tile_shape(ctx: Any) -> None:
    """``op.matmul(A, B, tile_shape=...)`` is a schedule hint: same bits as without it."""
    rng = np.random.default_rng(18)
    a = rng.standard_normal((256, 192)).astype(np.float32)
    b = rng.standard_normal((192, 128)).astype(np.float32)
    y = run_seed(seeds.TILE_SHAPE, op=ts.op, A=a, B=b)["Y"]
    assert np.array_equal(np.asarray(y), np.asarray(ts.op.matmul(a, b)))
    assert np.allclose(f64(y), f64(a) @ f64(b), rtol=1e-6, atol=1e-5)


@case("seeds.policy-types.as-written", spec="programming-model-guide.md Type System with "
      "Policies")
def _policy_types(ctx: Any) -> None:
    """The policy annotations parse; the fp8 GEMM rounds its inputs to fp8 (saturating)
    and returns the exact product rounded once to f32."""
    ns = run_seed(seeds.POLICY_TYPES, ts=ts, accum=ts.accum,
                  stochastic_round=ts.stochastic_round, loss_scale=ts.loss_scale)
    ann = ns["__annotations__"]
    assert ann["x1"] == ts.Tensor["B", "D", "fp8_e4m3 @accum(f32)"]
    assert ann["x3"].element == ts.parse_policy("fp6_e2m3 @accum(f32) @loss_scale(128.0)")
    rng = np.random.default_rng(10)
    a = (rng.standard_normal((24, 40)) * 8).astype(np.float32)
    b = (rng.standard_normal((40, 12)) * 8).astype(np.float32)
    a[3, 4], b[5, 6] = 900.0, -2e6
    c = ns["mixed_precision_gemm"](a, b)
    assert c.element == ts.f32
    assert np.array_equal(np.asarray(c), (f64(_fp8(a)) @ f64(_fp8(b))).astype(np.float32))


@case("seeds.policy-bare.star-import", spec="overview-and-quickstart.md Numerical Policies; "
      + NAMES)
def _policy_bare(ctx: Any) -> None:
    """The quick start's bare ``Tensor[..., fp8_e4m3 @accum(fp32) @loss_scale(128.0)]``
    works after ``from tessera import *``."""
    spec = run_seed(seeds.POLICY_BARE, **star_namespace())["__annotations__"]["x"]
    assert spec == ts.Tensor["B", "D", ts.fp8_e4m3 @ ts.accum(ts.f32) @ ts.loss_scale(128.0)]


@case("seeds.stable-softmax.as-written", spec="programming-model-guide.md Safe Numerical "
      "Operations")
def _stable_softmax(ctx: Any) -> None:
    """The bf16 stable softmax against float64 within one bf16 rounding; the ``+ 1e-10``
    never changes an f32 row sum that is at least 1 (a literal property)."""
    ns = run_seed(seeds.STABLE_SOFTMAX, ts=ts)
    x = (np.random.default_rng(11).standard_normal((5, 48)) * 6).astype(ml_dtypes.bfloat16)
    y = ns["numerically_stable_softmax"](x)
    assert y.element == ts.bf16
    w = f64(x)
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    assert np.allclose(f64(y), e / e.sum(axis=-1, keepdims=True), rtol=2.0**-7, atol=2.0**-130)
    plain = run_seed(seeds.STABLE_SOFTMAX.replace("(sum_exp + 1e-10)", "sum_exp"), ts=ts)
    same = np.asarray(plain["numerically_stable_softmax"](x))
    assert np.array_equal(np.asarray(y).view(np.uint16), same.view(np.uint16))


@case("seeds.quantized-policy.as-written", spec="programming-model-guide.md Custom Numeric "
      "Policies")
def _quantized(ctx: Any) -> None:
    """``QuantizedPolicy.quantize`` gives int8 values round(x/scale) with scale max|x|/127,
    and dequantize is within half a scale step of the input."""
    qp = run_seed(seeds.QUANTIZED_POLICY, ts=ts)["QuantizedPolicy"]
    w = np.random.default_rng(13).standard_normal((6, 6)).astype(np.float32)
    q, scale = qp.quantize(w)
    want_scale = np.float32(f64(np.max(np.abs(w))) / 127.0)
    want_q = np.rint((f64(w) / np.float64(want_scale)).astype(np.float32)).astype(np.int8)
    assert np.asarray(scale) == want_scale and np.array_equal(np.asarray(q), want_q)
    deq = qp.dequantize(q, scale)
    assert np.max(np.abs(f64(deq) - w)) <= float(want_scale) / 2 * (1 + 1e-6)


@case("seeds.basic-autodiff.as-written", spec="programming-model-guide.md Basic Autodiff")
def _basic_autodiff(ctx: Any) -> None:
    """``grad_W, grad_b = grad(loss_function)(x, W, b, y_true)`` against float64."""
    rng = np.random.default_rng(14)
    x, w = rng.standard_normal((10, 4)), rng.standard_normal((4, 3))
    b, y = rng.standard_normal(3), rng.standard_normal((10, 3))
    x, w, b, y = (v.astype(np.float32) for v in (x, w, b, y))
    ns = run_seed(seeds.BASIC_AUTODIFF, ts=ts, x=x, W=w, b=b, y_true=y)
    z = f64(x) @ f64(w) + f64(b)
    d = 2.0 * (np.maximum(z, 0.0) - f64(y)) / z.size * (z > 0)
    assert np.allclose(f64(ns["grad_W"]), f64(x).T @ d, rtol=1e-5, atol=1e-6)
    assert np.allclose(f64(ns["grad_b"]), d.sum(axis=0), rtol=1e-5, atol=1e-6)


def _gelu(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1 + np.tanh(0.79788456 * (v + 0.044715 * v**3)))


@case("seeds.custom-gelu.as-written", spec=BUGS + ": custom GELU")
def _gelu_literal(ctx: Any) -> None:
    """As written the custom backward (cdf + x * Gaussian pdf) is used, which is not the
    derivative of the tanh formula: the gradient follows the rule, not the function."""
    gelu = run_seed(seeds.CUSTOM_GELU, ts=ts)["custom_gelu"]
    x = np.linspace(-4.0, 4.0, 41).astype(np.float32)
    x64 = f64(x)
    assert np.allclose(f64(gelu(x)), _gelu(x64), rtol=1e-5, atol=1e-6)
    g = f64(ts.grad(lambda v: ts.sum(gelu(v)))(x))
    cdf = 0.5 * (1 + np.tanh(0.79788456 * (x64 + 0.044715 * x64**3)))
    rule = cdf + x64 * np.exp(-0.5 * x64**2) / np.sqrt(2 * np.pi)
    fd = (_gelu(x64 + 1e-6) - _gelu(x64 - 1e-6)) / 2e-6
    assert np.max(np.abs(g - rule)) < 1e-6 and np.max(np.abs(g - fd)) > 1e-4


@case("seeds.custom-gelu.corrected", spec=BUGS + ": custom GELU")
def _gelu_corrected(ctx: Any) -> None:
    """With the exact derivative as its rule, the gradient matches float64 central
    differences (step 1e-6: error below 1e-6 for |x| <= 4)."""
    source = seeds.CUSTOM_GELU.replace(
        "    pdf = ts.exp(-0.5 * x**2) / ts.sqrt(2 * ts.pi)\n",
        "    t = 2 * cdf - 1\n"
        "    pdf = 0.5 * (1 - t * t) * 0.79788456 * (1 + 3 * 0.044715 * x**2)\n")
    assert source != seeds.CUSTOM_GELU
    gelu = run_seed(source, ts=ts)["custom_gelu"]
    x = np.linspace(-4.0, 4.0, 41).astype(np.float32)
    fd = (_gelu(f64(x) + 1e-6) - _gelu(f64(x) - 1e-6)) / 2e-6
    assert np.allclose(f64(ts.grad(lambda v: ts.sum(gelu(v)))(x)), fd, rtol=1e-5, atol=1e-6)


def _training_graph() -> str:
    return seeds.TRAINING_STEP[seeds.TRAINING_STEP.index("@ts.jit"):]


@case("seeds.training-step.as-written", spec=BUGS + ": training step")
def _training_literal(ctx: Any) -> None:
    """As written ``x`` and ``y`` are never defined: a NameError naming ``x``."""
    err = raises(NameError, run_seed, _training_graph(), ts=ts, W=np.ones((4, 2), np.float32))
    assert "'x'" in str(err)


@case("seeds.training-step.corrected", spec=BUGS + ": training step")
def _training_corrected(ctx: Any) -> None:
    """With ``x`` and ``y`` defined, one gradient comes back bare, in W's element, equal
    to the float64 gradient of the MSE within a bf16 rounding."""
    rng = np.random.default_rng(16)
    x, y = rng.standard_normal((12, 8)), rng.standard_normal((12, 3))
    w = ts.as_tensor(rng.standard_normal((8, 3)).astype(np.float32), "bf16 @accum(f32)")
    ns = run_seed(_training_graph(), ts=ts, x=x.astype(np.float32), y=y.astype(np.float32), W=w)
    g = ns["grad_W"]
    assert isinstance(g, ts.Tensor) and g.element == w.element
    pred = f64(x.astype(np.float32)) @ f64(w)
    want = f64(x.astype(np.float32)).T @ (2.0 * (pred - f64(y.astype(np.float32))) / pred.size)
    assert np.allclose(f64(g), want, rtol=2.0**-7, atol=1e-6)


@case("seeds.distributed-loss.one-device", spec=BUGS + ": effect-aware autodiff")
def _dist_loss_one(ctx: Any) -> None:
    """On one device (the gather removed, as the ruling allows) grad is 2 x^T (x W)."""
    line = '    y = ts.all_gather(y, axis="tp")  # Tensor parallel gather\n'
    assert line in seeds.DISTRIBUTED_LOSS
    rng = np.random.default_rng(15)
    x, w = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4))
    g = run_seed(seeds.DISTRIBUTED_LOSS.replace(line, ""), ts=ts, x=x,
                 W=w.astype(np.float32))["grad_W"]
    want = 2.0 * f64(x).T @ (f64(x) @ f64(w.astype(np.float32)))
    assert np.allclose(f64(g), want, rtol=1e-5, atol=1e-5)


@case("seeds.capability.cells", spec="guide-ch1-introduction-updated.md Key Capabilities at "
      "a Glance")
def _cells(ctx: Any) -> None:
    """The table's example cells: the bare policy type, ``grad(loss_fn)(W)`` bare, and
    ``inspect_ir("tile")`` as written (no function: an ArgumentError) and corrected."""
    ns = star_namespace()
    assert eval(seeds.CAPABILITY_CELLS["numerics"], ns) == ts.Tensor[
        "B", "D", ts.fp8_e4m3 @ ts.accum(ts.f32)]
    ns["loss_fn"] = ts.jit(lambda W: ts.sum(W * W))
    ns["W"] = np.array([1.0, -2.0, 3.0], np.float32)
    assert np.array_equal(np.asarray(eval(seeds.CAPABILITY_CELLS["autodiff"], ns)),
                          [2.0, -4.0, 6.0])
    raises(ts.ArgumentError, eval, seeds.CAPABILITY_CELLS["ir_stack"], ns)
    assert "graph.mul" in ns["inspect_ir"](ts.jit(lambda v: v * 2.0), "graph",
                                           np.ones(3, np.float32))


@case("seeds.star-import.names", spec=NAMES)
def _star(ctx: Any) -> None:
    """``from tessera import *`` gives the seeds' bare names and shadows no builtin."""
    ns = star_namespace()
    names = ["Tensor", "accum", "stochastic_round", "loss_scale", "fp32", "bf16", "fp8_e4m3",
             "grad", "jit", "gemm", "inspect_ir", "tile", "ShardSpec", "all_gather",
             "index_launch"]
    assert not [n for n in names if n not in ns]
    assert not set(ts.__all__) & set(dir(builtins))
    assert run_seed("from tessera import *\nr = max(sum(range(4)), abs(round(-2.6)))")["r"] == 6
    assert ts.gemm is ts.matmul is ts.op.matmul and ts.f32 is ts.fp32 is ts.dtype("fp32")
