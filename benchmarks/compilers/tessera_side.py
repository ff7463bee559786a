"""Tessera's side of ``schedule_counts.py``: kernel counts, compile times by stage, and
the generated kernels in the tile simulator against the graph interpreter.

Runs in the project's own environment (in the driver's process). For each program of
``common.PROGRAMS``, written here with ``tessera.op``:

* **kernels**: ``len(ts.jit(f).lower(*args).kernels)``, the generated tile kernels,
  where Schedule IR → Tile IR generation accepts the program; where it refuses today
  (a :class:`~tessera.ir.transforms.to_tile.TileGenerationError` naming an op), the
  ``schedule.kernel`` ops of the scheduled function, as tests/ir/transforms/schedule
  counts them, and the row says which op was refused;
Two programs are Tessera's alone (:data:`TESSERA_ONLY`): the MLP with ReLU in float8
e4m3 and in int8, which generate and reach PTX today (the e4m3 products through the
exact ``mma``, the int8 ones on integer tensor cores in ``s32``, where their sums
provably stay).

* **compile time** from the Python function (tracing included) to each stage reached:
  Schedule IR, Tile IR, and PTX where the lowered program has ``ptx()``; the median of
  ``repeats`` compiles, each with a fresh ``ts.jit`` (nothing cached between them),
  after an untimed compile of a small other program.

:func:`simulator_rows` times ``backend="tile"`` (the generated kernels in the tile
simulator, checked mode and fast mode) against ``backend="interp"`` (the graph
interpreter, exact and fast) on the programs that generate.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

import tessera as ts
from tessera import op
from tessera.ir.core import Module
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.schedule import schedule_module
from tessera.ir.transforms.to_tile import TileGenerationError

from .common import arrays, timed


def keys_t(k: Any) -> Any:
    """Kᵀ: the last two axes swapped."""
    n = len(k.shape)
    return op.transpose(k, (*range(n - 2), n - 1, n - 2))


def attention(q: Any, k: Any, v: Any) -> Any:
    return op.matmul(op.softmax(op.matmul(q, keys_t(k)) * 0.125, axis=-1), v)


def causal_where(q: Any, k: Any, v: Any, mask: Any) -> Any:
    s = op.where(mask, op.matmul(q, keys_t(k)) * 0.125, -1e9)
    return op.matmul(op.softmax(s, axis=-1), v)


def causal_additive(q: Any, k: Any, v: Any, bias: Any) -> Any:
    s = op.matmul(q, keys_t(k)) * 0.125 + bias
    return op.matmul(op.softmax(s, axis=-1), v)


def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return op.gelu(x @ w1 + b1) @ w2 + b2


def mlp_relu(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return op.relu(x @ w1 + b1) @ w2 + b2


def layernorm(x: Any, g: Any, b: Any) -> Any:
    d = x - op.mean(x, axis=-1, keepdims=True)
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def softmax(x: Any) -> Any:
    return op.softmax(x, axis=-1)


def chain(x: Any) -> Any:
    return op.exp(op.relu(x * 2.0 + 1.0) - 0.5) / 3.0


def block(x: Any, g1: Any, b1: Any, wq: Any, wk: Any, wv: Any, wo: Any, g2: Any, b2: Any,
          w1: Any, c1: Any, w2: Any, c2: Any) -> Any:
    h = layernorm(x, g1, b1)
    r = x + attention(h @ wq, h @ wk, h @ wv) @ wo
    return r + mlp(layernorm(r, g2, b2), w1, c1, w2, c2)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "attention": attention, "attention_4d": attention, "causal_where": causal_where,
    "causal_additive": causal_additive, "mlp": mlp, "layernorm": layernorm,
    "softmax": softmax, "chain": chain, "block": block,
    "mlp_relu_fp8": mlp_relu, "mlp_relu_int8": mlp_relu}

#: programs measured in Tessera alone: the MLP with ReLU in formats whose products the
#: tile kernels' ``mma`` sums exactly (the CPU compilers have no such float8 matmul)
TESSERA_ONLY = {"mlp_relu_fp8": "MLP relu(x@W1+b1)@W2+b2, fp8 e4m3, 256×512×1024",
                "mlp_relu_int8": "MLP relu(x@W1+b1)@W2+b2, int8, 256×512×1024"}
#: the programs of the simulator table whatever else generates
SIMULATED = ["chain", "mlp_relu_fp8", "mlp_relu_int8"]


def arguments(name: str) -> list[Any]:
    """The arguments of ``name``: ``common.arrays`` or, for the narrow MLPs, seeded
    values in their format (float8 e4m3 rounded once from normal values × 4; int8
    uniform over its range)."""
    if name not in TESSERA_ONLY:
        return list(arrays(name))
    rng = np.random.default_rng(7)
    shapes = [(256, 512), (512, 1024), (1024,), (1024, 512), (512,)]
    if name == "mlp_relu_int8":
        return [rng.integers(-128, 128, s).astype(np.int8) for s in shapes]
    return [ts.Tensor(rng.standard_normal(s) * 4, ts.fp8_e4m3).array for s in shapes]


def schedule_kernels(fn: Callable[..., Any], args: list[Any]) -> int:
    """``schedule.kernel`` ops after the schedule passes (traced afresh)."""
    graph = ts.jit(fn).lower(*args).compiled.function
    scheduled = schedule_module(Module("m", {graph.name: graph})).functions[graph.name]
    return len(schedule_ops.kernels(scheduled))


def tile_kernels(fn: Callable[..., Any], args: list[Any]) -> int:
    """Generated tile kernels (traced, scheduled and generated afresh)."""
    return len(ts.jit(fn).lower(*args).kernels)


def ptx_modules(fn: Callable[..., Any], args: list[Any]) -> str:
    """The PTX of every kernel (traced and compiled afresh), where ``ptx()`` exists."""
    return str(ts.jit(fn).lower(*args).ptx())


def has_ptx() -> bool:
    """Whether lowered graph programs can be compiled to PTX in this version."""
    from tessera.frontend.graph.lowered import CompiledProgram

    return hasattr(CompiledProgram, "ptx")


def median_time(stage: Callable[..., Any], fn: Callable[..., Any], args: list[Any],
                repeats: int) -> float:
    return statistics.median(timed(lambda: stage(fn, args))[0] for _ in range(repeats))


def warm_up() -> None:
    """Compile a small other program through every stage (imports, first-use set-up)."""
    x = np.ones((8, 8), np.float32)
    tile_kernels(chain, [x])
    schedule_kernels(softmax, [x])
    if has_ptx():
        try:
            ptx_modules(chain, [x])
        except Exception:
            pass


def count_row(name: str, repeats: int = 5) -> dict[str, Any]:
    """Kernels and compile times of program ``name``."""
    fn, args = FUNCTIONS[name], arguments(name)
    row: dict[str, Any] = {"program": name, "schedule_kernels": schedule_kernels(fn, args),
                           "schedule_s": median_time(schedule_kernels, fn, args, repeats)}
    try:
        row["kernels"] = tile_kernels(fn, args)
        row["level"] = "tile"
        row["tile_s"] = median_time(tile_kernels, fn, args, repeats)
    except TileGenerationError as err:
        row["kernels"] = row["schedule_kernels"]
        row["level"] = "schedule"
        row["refused"] = refused_op(err)
        return row
    if has_ptx():
        try:
            row["ptx_s"] = median_time(ptx_modules, fn, args, repeats)
        except Exception as err:
            row["ptx_error"] = reason(err)
    return row


def reason(err: Exception) -> str:
    """An error's class and first line, without the ``file:line:`` it starts with."""
    text = re.sub(r"^\S+:\d+: ", "", str(err).splitlines()[0] if str(err) else "")
    return f"{type(err).__name__}: {text[:120]}"


def refused_op(err: TileGenerationError) -> str:
    """The op a refusal names (``graph.mean``), or its first words."""
    words = [w.rstrip(":,") for w in str(err).split() if w.startswith("graph.")]
    return words[0] if words else str(err).split(":")[-1].strip()[:60]


def count_rows(names: list[str], repeats: int = 5) -> list[dict[str, Any]]:
    """:func:`count_row` of each program, after :func:`warm_up`."""
    warm_up()
    return [count_row(name, repeats) for name in names if name in FUNCTIONS]


def simulator_rows(names: list[str], repeats: int = 5) -> list[dict[str, Any]]:
    """Medians of ``repeats`` interleaved calls of each program on the graph
    interpreter (exact, fast) and on its generated kernels in the tile simulator
    (``backend="tile"``: checked, fast), and whether the checked results have the
    interpreter's exact bits."""
    rows = []
    for name in names:
        fn, args = FUNCTIONS[name], arguments(name)
        variants = {(backend, mode): ts.jit(fn, backend=backend, mode=mode)
                    for mode in ("exact", "fast") for backend in ("interp", "tile")}
        outs = {key: jitted(*args) for key, jitted in variants.items()}  # untimed first
        samples: dict[tuple[str, str], list[float]] = {key: [] for key in variants}
        for _ in range(repeats):
            for key, jitted in variants.items():
                samples[key].append(timed(functools.partial(jitted, *args))[0])
        row: dict[str, Any] = {"program": name, "kernels": tile_kernels(fn, args)}
        for (backend, mode), times in samples.items():
            row[f"{backend}_{mode}_s"] = statistics.median(times)
        row["bitwise"] = bits(outs["tile", "exact"]) == bits(outs["interp", "exact"])
        row["fast_bitwise"] = bits(outs["tile", "fast"]) == bits(outs["interp", "fast"])
        rows.append(row)
    return rows


def bits(out: Any) -> list[bytes]:
    leaves = out if isinstance(out, tuple) else (out,)
    return [np.asarray(t.array).tobytes() for t in leaves]
