"""Drawn kernel *sources* run alike in ``mode="reference"`` and in checked mode with
every fast path, in every schedule: the same result bits, or the same sanitizer report
(kind, line, tile, element, lane).

The kernels are written as text from a small grammar of statements: ``ts.tile.range``
loops (uniform and per-tile trip counts), ``if`` on ids and on values, shared-memory
exchanges between the tiles of a group with barriers, the ``while`` tree of a block
reduction, ``mma`` accumulation (``acc =
mma(a, b, acc)``, ``acc += mma(a, b)``, a scaled product), row and whole-tile
reductions, elementwise ops in f32, bf16, f16 and f64, ``+=`` into global memory.
Planted bugs draw a missing barrier (a race) or a window one element too long (out of
bounds) at a drawn place.

``mma`` accumulators are drawn everywhere, also in branches and loops whose path differs
between tiles: whether a value is held wide (float64) is decided by the kernel's data
flow, not by the tiles that happen to run together (docs/kernels.md, section 7), so a
tile's bits never depend on the schedule. The last test pins such a kernel against a
NumPy model of that rule.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera as ts
from tests.strategies import kernel_from_source

T = 8  # each tile works on an 8-element slice and an 8x8 accumulator
HEADER = '''import tessera as ts


@ts.kernel
def drawn(x: ts.Tensor["N", ts.f32], a: ts.Tensor[8, 8, ts.bf16],
          b: ts.Tensor[8, 8, ts.bf16], out: ts.Tensor["N", ts.f32],
          mout: ts.Tensor["P", 8, ts.f32], total: ts.Tensor[2, ts.f32],
          upd: ts.Tensor["N", ts.f32]):
    lid = ts.tile.local_id()
    base = ts.tile.linear_id() * 8
    buf = ts.tile.alloc_shared((ts.tile.group_size() * 8,), ts.f32)
    mine = lid * 8
    other = ((lid + 1) % ts.tile.group_size()) * 8
    t = x[base:base + 8] * 1.0
    s = ts.tile.reduce_sum(t) * 0.0
    m = ts.tile.zeros((8, 8), ts.f32)
'''
FOOTER = '''    out[base:base + 8] = t + s
    mout[base:base + 8, 0:8] = m
    total[0] += s
'''

consts = st.sampled_from(["0.5", "1.5", "-0.25", "2.0", "3.0", "-1.0"])


@st.composite
def elementwise(draw: st.DrawFn) -> list[str]:
    c, d = draw(consts), draw(consts)
    fmt = draw(st.sampled_from(["bf16", "f16", "f64"]))
    return [draw(st.sampled_from([
        f"t = t * {c} + {d}",
        f"t = ts.tile.exp(t * {c} * 0.125)",
        f"t = ts.tile.maximum(t, {d}) - ts.tile.minimum(t, {c})",
        f"t = ts.tile.where(t > {c}, t, t * {d})",
        f"t = ts.tile.cast(ts.tile.cast(t, ts.{fmt}) * {c} + {d}, ts.f32)",
        f"t = ts.tile.abs(t) + ts.tile.sqrt(ts.tile.abs(t) + {c} * {c})",
    ]))]


@st.composite
def reductions(draw: st.DrawFn) -> list[str]:
    return [draw(st.sampled_from([
        "s += ts.tile.reduce_sum(t)",
        "s = ts.tile.maximum(s, ts.tile.reduce_max(t))",
        "t = t + ts.tile.row_sum(m) * 0.125",
        "t = t - ts.tile.row_max(m)",
        "s = s + ts.tile.reduce_min(t) * 0.5",
    ]))]


@st.composite
def products(draw: st.DrawFn) -> list[str]:
    # scales that are no powers of two: f32 sums of the scaled products round, so a
    # sum held wide (float64) differs from one rounded in f32 in the last bit
    c = draw(st.sampled_from(["0.1", "0.3", "-0.7", "1.5"]))
    return [draw(st.sampled_from([
        "m = ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8], m)",
        "m += ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8])",
        f"m = m + ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8]) * {c}",
        f"m = m * {c}",
    ]))]


def exchange(racy: bool) -> list[str]:
    """Each tile writes its slot of the group's buffer, then reads its neighbour's: a
    barrier before the write (the previous exchange's reads) and one before the read
    (the writes); ``racy`` leaves the second out."""
    lines = ["ts.tile.barrier()", "buf[mine:mine + 8] = t"]
    if not racy:
        lines.append("ts.tile.barrier()")
    return [*lines, "t = t * 0.5 + buf[other:other + 8]"]


def tree() -> list[str]:
    """The group's sum of ``s`` by the shared-memory tree of a block reduction."""
    return ["ts.tile.barrier()", "buf[lid] = s", "ts.tile.barrier()",
            "stride = ts.tile.group_size() // 2",
            "while stride > 0:",
            "    if ts.tile.local_id() < stride:",
            "        buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]",
            "    ts.tile.barrier()",
            "    stride //= 2",
            "s = s * 0.5 + buf[0]"]


def indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@st.composite
def blocks(draw: st.DrawFn, depth: int, uniform: bool) -> list[str]:
    """Statements; ``uniform``: every tile of a group runs them (barriers allowed)."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        # products in divergent code too: wideness is the data flow's, not the run's
        kinds = ["elementwise", "reduction", "update", "product", "product"]
        if uniform:
            kinds += ["exchange", "tree", "product"]
        if depth < 2:
            kinds += ["for", "for", "if"]
        kind = draw(st.sampled_from(kinds))
        if kind == "elementwise":
            lines += draw(elementwise())
        elif kind == "reduction":
            lines += draw(reductions())
        elif kind == "product":
            lines += draw(products())
        elif kind == "update":  # += into global memory, each tile its own slice
            lines.append(draw(st.sampled_from(["upd[base:base + 8] += t",
                                               "upd[base] += s"])))
        elif kind == "exchange":
            lines += exchange(racy=False)
        elif kind == "tree":
            lines += tree()
        elif kind == "for":
            var = f"i{depth}"
            per_tile = draw(st.booleans())
            bound = "lid + 1" if per_tile else str(draw(st.integers(0, 3)))
            step = draw(st.sampled_from(["", ", 2"]) if not per_tile else st.just(""))
            lines.append(f"for {var} in ts.tile.range(0, {bound}{step}):")
            body = draw(blocks(depth + 1, uniform and not per_tile))
            lines += indent([*body, f"t = t + ts.tile.cast({var}, ts.f32) * 0.25"])
        else:
            cond = draw(st.sampled_from([
                "lid % 2 == 0", "ts.tile.linear_id() < 3", "s > 0.5",
                "ts.tile.reduce_max(t) < 1.0", "ts.tile.group_id() == 1"]))
            lines.append(f"if {cond}:")
            lines += indent(draw(blocks(depth + 1, False)))
            if draw(st.booleans()):
                lines.append("else:")
                lines += indent(draw(blocks(depth + 1, False)))
    return lines


@st.composite
def kernels(draw: st.DrawFn) -> tuple[str, str | None]:
    """A kernel's source and the bug planted in it (None, "race" or "oob")."""
    body = draw(blocks(0, True))
    bug = draw(st.sampled_from([None, None, "race", "oob"]))
    if bug == "race":
        at = draw(st.integers(0, len(body)))
        # at the top level, between two statements of the body (never inside a block)
        while at < len(body) and body[at].startswith((" ", "else")):
            at += 1
        body[at:at] = exchange(racy=True)
    elif bug == "oob":
        body.append("t = t + x[base + 1:base + 9]")  # the last tile reads past the end
    return HEADER + "".join(f"    {line}\n" for line in body) + FOOTER, bug


def outcome(kernel: Any, inputs: list[np.ndarray], **launch: Any) -> tuple[Any, ...]:
    """The bits of every output, or the report of the launch."""
    args = [a.copy() for a in inputs]
    try:
        kernel(*args, **launch)
    except ts.tile.SanitizerError as err:
        return ("report", err.kind, err.loc.line, err.tile, err.index, err.lane)
    return ("bits", *(a.tobytes() for a in args[3:]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=kernels(), groups=st.integers(1, 3), group=st.sampled_from([1, 2, 4]),
       seed=st.integers(0, 2**16))
def test_drawn_kernels_run_alike_in_every_mode_and_schedule(drawn: tuple[str, str | None],
                                                           groups: int, group: int,
                                                           seed: int) -> None:
    source, bug = drawn
    kernel = kernel_from_source(source)
    n = groups * group * T
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(n).astype(np.float32),
              rng.standard_normal((T, T)).astype(ml_dtypes.bfloat16),
              rng.standard_normal((T, T)).astype(ml_dtypes.bfloat16),
              np.zeros(n, np.float32), np.zeros((n, T), np.float32), np.zeros(2, np.float32),
              rng.standard_normal(n).astype(np.float32)]
    launch = dict(grid=groups, group_size=group)
    want = outcome(kernel, inputs, mode="reference", **launch)
    for schedule in ("auto", "vectorized", "sequential"):
        got = outcome(kernel, inputs, mode="checked", schedule=schedule, **launch)
        assert got == want, (schedule, source)
    if bug == "oob":
        assert want[:2] == ("report", "out of bounds"), source
    if bug == "race" and group > 1:
        assert want[:2] == ("report", "race"), source


WIDE_ACROSS_PATHS = HEADER + '''    for i0 in ts.tile.range(0, lid + 1):
        if ts.tile.linear_id() < 3:
            m = ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8], m)
        else:
            m = m + ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8]) * 0.1
    m = ts.tile.mma(a[0:8, 0:8], b[0:8, 0:8], m)
''' + FOOTER


def wide_across_paths_model(a: np.ndarray, b: np.ndarray, tiles: int,
                            group: int) -> np.ndarray:
    """``mout`` of :data:`WIDE_ACROSS_PATHS` by the rule of docs/kernels.md section 7:
    ``m`` is a wide slot (one branch assigns it an ``mma`` accumulation), so every tile
    holds it in float64, and the other branch's ``m + p * 0.1`` adds the f32 product
    ``p * 0.1`` (``*`` rounds ``p`` to f32 first) in float64; ``mout`` rounds once."""
    p = a.astype(np.float64) @ b.astype(np.float64)  # exact: 8 bf16 products, one tile
    half = (p.astype(np.float32) * np.float32(0.1)).astype(np.float64)
    rows = []
    for tile in range(tiles):
        m = np.zeros((T, T))
        for _ in range(tile % group + 1):
            m = m + p if tile < 3 else m + half
        rows.append((m + p).astype(np.float32))
    return np.concatenate(rows)


def test_wide_accumulators_merged_across_paths_agree() -> None:
    """An accumulator updated by an ``mma`` in one branch and scaled in the other, in a
    loop of per-tile trip counts: each tile's bits follow its own path, the same in the
    reference, every schedule, and tile by tile (a group of one)."""
    kernel = kernel_from_source(WIDE_ACROSS_PATHS)
    rng = np.random.default_rng(0)
    n = 8 * T
    inputs = [rng.standard_normal(n).astype(np.float32),
              rng.standard_normal((T, T)).astype(ml_dtypes.bfloat16),
              rng.standard_normal((T, T)).astype(ml_dtypes.bfloat16),
              np.zeros(n, np.float32), np.zeros((n, T), np.float32), np.zeros(2, np.float32),
              np.zeros(n, np.float32)]
    want = outcome(kernel, inputs, mode="reference", grid=2, group_size=4)
    model = wide_across_paths_model(inputs[1], inputs[2], 8, 4)
    assert want[2] == model.tobytes()
    # not the rule of the values that happen to run together: group 1's tiles (4-7)
    # all take the scaling branch, and adding in f32 there changes bits
    p = inputs[1].astype(np.float64) @ inputs[2].astype(np.float64)
    narrow, rounded = np.zeros((T, T), np.float32), []
    for _ in range(4):
        narrow = narrow + p.astype(np.float32) * np.float32(0.1)
        rounded.append((narrow.astype(np.float64) + p).astype(np.float32))
    assert np.concatenate(rounded).tobytes() != model[4 * T:].tobytes()
    for schedule in ("auto", "vectorized", "sequential"):
        assert outcome(kernel, inputs, mode="checked", schedule=schedule, grid=2,
                       group_size=4) == want, schedule


SIGNED_ZEROS = HEADER + '''    if ts.tile.reduce_max(t) < 1.0:
        m = m * -0.7
''' + FOOTER


def test_signed_zeros_merged_across_paths_agree() -> None:
    """Tiles that scaled a zero accumulator by a negative number hold -0.0, the others
    0.0: a merge of the two sides keeps each tile's bits (equal values are not the
    same bits), in every schedule."""
    kernel = kernel_from_source(SIGNED_ZEROS)
    x = np.array([5.0] * T + [0.0] * T + [5.0] * T + [0.0] * T, np.float32)
    n = 4 * T
    inputs = [x, np.zeros((T, T), ml_dtypes.bfloat16), np.zeros((T, T), ml_dtypes.bfloat16),
              np.zeros(n, np.float32), np.zeros((n, T), np.float32), np.zeros(2, np.float32),
              np.zeros(n, np.float32)]
    want = np.repeat(np.array([0.0, -0.0, 0.0, -0.0], np.float32), T * T).reshape(n, T)
    for group in (1, 2, 4):
        launch = dict(grid=4 // group, group_size=group)
        ref = outcome(kernel, inputs, mode="reference", **launch)
        assert ref[2] == want.tobytes()
        for schedule in ("auto", "vectorized", "sequential"):
            assert outcome(kernel, inputs, mode="checked", schedule=schedule,
                           **launch) == ref, (group, schedule)
