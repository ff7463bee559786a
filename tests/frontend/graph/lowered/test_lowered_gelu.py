"""Both GELUs under ``backend="target"``: the specified binary64 algorithms
(``numerics.transcendental.gelu64``) on f64 registers, the tanh form with the specified
f64 exp, the erf form with the specified erfc (``numerics.transcendental.erf64``), give
the graph interpreter's bits on sm_80 and sm_90a, alone, as a matmul's epilogue, in the
MLP and in the pre-norm transformer block; their PTX assembles with no advisory and no
spills. So do the specified ``tanh``, ``erf`` and ``log`` ops
(``numerics.transcendental``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target
from tests.frontend.graph.lowered.test_lowered_exact import FORMATS, _values
from tests.ir.transforms.schedule.programs import block


def gelu(x):  # type: ignore[no-untyped-def]
    return op.gelu(x)


def linear_gelu(x, w, b):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w + b)


def mlp(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w1 + b1) @ w2 + b2


def gelu_erf(x):  # type: ignore[no-untyped-def]
    return op.gelu(x, approximate=False)


def linear_gelu_erf(x, w, b):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w + b, approximate=False)


def mlp_erf(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w1 + b1, approximate=False) @ w2 + b2


def tanh(x):  # type: ignore[no-untyped-def]
    return op.tanh(x)


def linear_tanh(x, w, b):  # type: ignore[no-untyped-def]
    return op.tanh(x @ w + b)


def log(x):  # type: ignore[no-untyped-def]
    return op.log(x)


def linear_log(x, w, b):  # type: ignore[no-untyped-def]
    return op.log(x @ w + b)


def erf(x):  # type: ignore[no-untyped-def]
    return op.erf(x)


def linear_erf(x, w, b):  # type: ignore[no-untyped-def]
    return op.erf(x @ w + b)


FORMS = {"tanh": (gelu, linear_gelu, mlp), "erf": (gelu_erf, linear_gelu_erf, mlp_erf)}
#: the GELUs and the plain specified functions: (alone, as a matmul's epilogue)
CURVES = {**{f"gelu_{k}": v[:2] for k, v in FORMS.items()}, "tanh": (tanh, linear_tanh),
          "erf": (erf, linear_erf), "log": (log, linear_log)}


def _curve(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    """Values over the whole curve: the tails past -10.8 and 10.7 (tanh form) and -14.3
    (erf form), where binary32 results reach 0 and e^z or erfc is flushed, the erf's
    interval bounds, tiny and subnormal values (the nudged results), zeros of both
    signs, infinities and NaN."""
    x = rng.uniform(-24, 24, shape) * (rng.random(shape) < 0.7) \
        + rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 3, shape)
    flat = x.reshape(-1)
    for v in (np.nan, np.inf, -np.inf, 0.0, -0.0, -10.8, 10.69, 3 * 2.0**-149,
              -5 * 2.0**-149, 2.0**-70, -14.3, -14.39, -1.19324, 1.7678, 4.0406):
        flat[rng.integers(0, flat.size)] = v
    return ts.Tensor(x, FORMATS[fmt]).array


@settings(max_examples=24, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 70), fmt=st.sampled_from(sorted(FORMATS)),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16),
       form=st.sampled_from(sorted(CURVES)))
def test_gelu_on_target_gives_the_graph_bits(rows: int, cols: int, fmt: str, target: str,
                                             seed: int, form: str) -> None:
    same_on_target(CURVES[form][0], (_curve(np.random.default_rng(seed), (rows, cols), fmt),),
                    target)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 24), n=st.integers(1, 24), k=st.integers(1, 24),
       fmt=st.sampled_from(sorted(FORMATS)), kind=st.sampled_from(["normal", "wide", "special"]),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16),
       form=st.sampled_from(sorted(CURVES)))
def test_gelu_epilogue_on_target_gives_the_graph_bits(m: int, n: int, k: int, fmt: str,
                                                      kind: str, target: str, seed: int,
                                                      form: str) -> None:
    if fmt != "f32":  # 16-bit operands are copied in 4-byte chunks: even rows
        n, k = 2 * -(-n // 2), 2 * -(-k // 2)
    rng = np.random.default_rng(seed)
    args = (_values(rng, (m, k), fmt, kind), _values(rng, (k, n), fmt, kind),
            _values(rng, (n,), fmt, "normal"))
    same_on_target(CURVES[form][1], args, target)


def test_the_gelu_mlp_and_the_transformer_block_on_target() -> None:
    """The MLP of two kernels and the block of six (layernorms, attention over 16 keys,
    the MLP), as in examples/compiled_programs.py."""
    rng = np.random.default_rng(3)
    d = 8
    shapes = [(24, 16), (16, 40), (40,), (40, 16), (16,)]
    same_on_target(mlp, [_values(rng, s, "f32", "normal") for s in shapes], "sm_80")
    same_on_target(mlp_erf, [_values(rng, s, "f32", "special") for s in shapes], "sm_90a")
    shapes = [(16, d), (d,), (d,), (d, d), (d, d), (d, d), (d, d), (d,), (d,), (d, 4 * d),
              (4 * d,), (4 * d, d), (d,)]
    same_on_target(block, [_values(rng, s, "f32", "normal") for s in shapes], "sm_90a")


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("target", TARGETS)
def test_gelu_ptx_assembles_without_advisories_or_spills(target: str, form: str) -> None:
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype(np.float32) for s in
            [(16, 32), (32, 64), (64,), (64, 16), (16,)]]
    program = FORMS[form][2]
    for kernel in ts.jit(program).lower(*args).target(target).kernels:
        assembles_clean(kernel)
    (first, _) = ts.jit(program).lower(*args).target(target).kernels
    assert "div.rn.f64" in first.ptx and "cvt.rni.s32.f64" in first.ptx  # quotient, exp


def test_the_schedule_programs_reach_ptx() -> None:
    """The benchmark's programs at their test sizes (S = 64, width 32, MLP 128): the
    Target program picks exact tiles that fit (whole rows for the scores and for the
    output projection a layernorm reduces, fewer rows for the three fused projections,
    one row tile where fused matmuls share a loop) and every kernel renders."""
    from tests.ir.transforms.schedule import programs

    for name in ("block", "mlp", "attention", "causal_additive"):
        fn, make = programs.PROGRAMS[name]
        args = make()
        ptx = ts.jit(fn).lower(*args).ptx("sm_90a")
        assert 1 <= len(ptx) <= programs.KERNELS[name], name
        assert all(".visible .entry" in text for text in ptx.values()), name
