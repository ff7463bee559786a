"""Shared hypothesis strategies: shapes, arrays, random Graph IR functions, and the
kernels drawn as source text."""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tessera.ir.core import Block, Builder, Function
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import Dense, TensorType
from tessera.numerics import Policy, dtype

FLOAT_ELEMENTS = [dtype("f32"), dtype("bf16"), dtype("f16"), dtype("f64"),
                  Policy(dtype("bf16"), accum=dtype("f32")),
                  Policy(dtype("fp8_e4m3"), accum=dtype("f32"), loss_scale=128.0),
                  Policy(dtype("f16"), stochastic_round=True, seed=3)]

UNARY = [
    graph_ir.Neg,
    graph_ir.Exp,
    graph_ir.Log,
    graph_ir.Tanh,
    graph_ir.Sqrt,
    graph_ir.Relu,
    graph_ir.Sin,
    graph_ir.Cos,
    graph_ir.Abs,
    graph_ir.Sign,
    graph_ir.Erf,
]
BINARY = [
    graph_ir.Add,
    graph_ir.Sub,
    graph_ir.Mul,
    graph_ir.Div,
    graph_ir.Maximum,
    graph_ir.Minimum,
    graph_ir.Pow,
]


def shapes(min_rank: int = 0, max_rank: int = 3, max_side: int = 5) -> st.SearchStrategy:
    return st.lists(st.integers(1, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


def arrays(shape: tuple[int, ...], lo: float = -3.0, hi: float = 3.0) -> st.SearchStrategy:
    n = int(np.prod(shape, dtype=np.int64))
    return st.lists(st.floats(lo, hi, allow_nan=False, width=64), min_size=n,
                    max_size=n).map(lambda v: np.asarray(v, np.float64).reshape(shape))


@st.composite
def graph_functions(draw: st.DrawFn, max_ops: int = 12) -> Function:
    """A random, valid Graph IR function over tensors of one element type."""
    elem = draw(st.sampled_from(FLOAT_ELEMENTS))
    shape = draw(shapes(1, 2, 4))
    block = Block()
    b = Builder(block)
    values = [block.add_arg(TensorType(shape, elem), f"a{k}")
              for k in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "const", "transpose",
                                     "matmul", "softmax", "cast"]))
        x = draw(st.sampled_from(values))
        t: TensorType = x.type  # type: ignore[assignment]
        if kind == "unary":
            values += b.create(draw(st.sampled_from(UNARY))(), [x])
        elif kind == "binary":
            same = [v for v in values if v.type == t]
            values += b.create(draw(st.sampled_from(BINARY))(), [x, draw(st.sampled_from(same))])
        elif kind == "reduce" and t.rank:
            axis = draw(st.integers(0, t.rank - 1))
            op = draw(st.sampled_from([graph_ir.Sum, graph_ir.Mean, graph_ir.Max, graph_ir.Min]))
            values += b.create(op((axis,), draw(st.booleans())), [x])
        elif kind == "const":
            data = draw(st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=1,
                                 max_size=4))
            values += b.create(graph_ir.Constant(Dense(np.asarray(data)), t.element))
        elif kind == "transpose" and t.rank >= 2:
            values += b.create(graph_ir.Transpose(tuple(reversed(range(t.rank)))), [x])
        elif kind == "matmul" and t.rank == 2:
            (xt,) = b.create(graph_ir.Transpose((1, 0)), [x])
            tile = draw(st.none() | st.just((16, 16, 8)))
            values += b.create(graph_ir.MatMul(tile), [x, xt])
        elif kind == "softmax" and t.rank:
            values += b.create(graph_ir.Softmax(-1), [x])
        elif kind == "cast":
            values += b.create(graph_ir.Cast(draw(st.sampled_from(FLOAT_ELEMENTS))), [x])
    outs = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2))
    b.create(graph_ir.Return(), outs)
    return Function("random", block, [v.type for v in outs])


#: where drawn kernels' sources are written (a kernel reads its own source)
DRAWN_DIR = Path(tempfile.mkdtemp(prefix="tessera-drawn-"))
_DRAWN = itertools.count()


def kernel_from_source(source: str, name: str = "drawn") -> Any:
    """The function ``name`` of Python ``source``, written to a file of
    :data:`DRAWN_DIR` and imported (a ``@ts.kernel`` compiles from its file)."""
    path = DRAWN_DIR / f"drawn_{next(_DRAWN)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)
