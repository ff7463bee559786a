"""Timelines and their Chrome / Perfetto trace-event JSON.

``problems`` checks a trace against the rules of the Trace Event Format (Google's
"Trace Event Format" document, JSON Object Format): required keys and their types per
phase, non-negative durations, known metadata events, and complete events on one
thread either nested or one after another, never partly overlapping.
"""

from __future__ import annotations

import json
from numbers import Number
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.moe import MoE
from tessera.dist.pipeline.run import Pipeline, Stage
from tessera.mesh_sim.cost import Work
from tessera.mesh_sim.trace import Timeline

META = {"process_name", "process_labels", "process_sort_index", "thread_name",
        "thread_sort_index"}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def problems(trace: Any) -> list[str]:
    """Every way ``trace`` breaks the Trace Event Format (empty: valid)."""
    out: list[str] = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the top level must be an object with a traceEvents array"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        out.append("displayTimeUnit must be 'ms' or 'ns'")
    threads: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for k, e in enumerate(trace["traceEvents"]):
        if not isinstance(e, dict) or not isinstance(e.get("ph"), str) or len(e["ph"]) != 1:
            out.append(f"event {k}: ph must be a one-letter string")
            continue
        for key in ("name", "pid", "tid"):
            if key not in e:
                out.append(f"event {k}: missing {key}")
        if not isinstance(e.get("name"), str) or not all(
                _is_int(e.get(key)) or isinstance(e.get(key), str) for key in ("pid", "tid")):
            out.append(f"event {k}: name must be a string, pid and tid ints or strings")
        if "args" in e and not isinstance(e["args"], dict):
            out.append(f"event {k}: args must be an object")
        if "cat" in e and not isinstance(e["cat"], str):
            out.append(f"event {k}: cat must be a string")
        if e["ph"] == "M":
            if e.get("name") not in META or ("name" not in e.get("args", {}) and \
                    e.get("name", "").endswith("_name")):
                out.append(f"event {k}: bad metadata event {e.get('name')!r}")
        elif e["ph"] == "X":
            ts_, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts_, Number) or not isinstance(dur, Number) or \
                    isinstance(ts_, bool) or isinstance(dur, bool):
                out.append(f"event {k}: ts and dur must be numbers")
                continue
            if dur < 0 or ts_ < 0:
                out.append(f"event {k}: negative ts or dur")
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(ts_), float(ts_) + float(dur), e.get("name", "")))
        else:
            out.append(f"event {k}: unexpected phase {e['ph']!r}")
    for key, evs in threads.items():
        stack: list[tuple[float, float, str]] = []
        for start, end, name in sorted(evs, key=lambda v: (v[0], -v[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                out.append(f"thread {key}: {name!r} [{start}, {end}] overlaps "
                           f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}]")
            stack.append((start, end, name))
    return out


def test_the_validator_catches_broken_traces():
    good = {"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0},
                            {"name": "b", "ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0},
                            {"name": "c", "ph": "X", "ts": 5, "dur": 1, "pid": 0, "tid": 0}]}
    assert problems(good) == []
    bad = json.loads(json.dumps(good))
    bad["traceEvents"][1]["dur"] = 9  # [1, 10] overlaps [0, 5] partly
    assert "overlaps" in problems(bad)[0]
    bad["traceEvents"][1]["dur"] = -1
    assert "negative" in problems(bad)[0]
    del bad["traceEvents"][2]["pid"]
    assert any("missing pid" in p for p in problems(bad))
    assert problems([]) != []


@ts.jit
def layer(x, W):
    return ts.tanh(x @ W)


def pipeline_timeline() -> Timeline:
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
    mesh = dist.mesh(axes=("dp", "pp"), shape=(2, 3))
    pipe = Pipeline([Stage(layer, (w,)) for w in ws], mesh, "pp",
                    loss=lambda y, t: ts.sum((y - t) * (y - t)))
    x = rng.standard_normal((8, 4)).astype(np.float32)
    return pipe.run(x, x, micro_batches=4).timeline


def test_pipeline_trace_is_valid(tmp_path):
    tl = pipeline_timeline()
    for group_by in ("device", "tray"):
        trace = json.loads(tl.write(tmp_path / f"{group_by}.json", group_by).read_text())
        assert problems(trace) == []
        xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert len(xs) == len(tl.events)
        assert {e["cat"] for e in xs} == {"forward", "backward", "send_recv"}
        assert all({"bytes", "op", "device"} <= set(e["args"]) for e in xs)
        assert all("flops" in e["args"] for e in xs if e["cat"] != "send_recv")
    by_device = tl.chrome("device")["traceEvents"]
    names = {e["args"]["name"] for e in by_device if e["name"] == "process_name"}
    assert names == {f"GPU {i} (tray {i // 4})" for i in range(6)}
    trays = {e["pid"] for e in tl.chrome("tray")["traceEvents"]}
    assert trays == {0, 1}


def test_moe_trace_is_valid():
    rng = np.random.default_rng(1)
    experts = [(rng.standard_normal((4, 4)).astype(np.float32),) for _ in range(4)]
    layer_ = MoE(rng.standard_normal((4, 4)).astype(np.float32), experts, layer, k=2)
    out = layer_.forward(rng.standard_normal((8, 4)).astype(np.float32),
                         mesh=dist.mesh(axes=("ep",), shape=(4,)), train=True)
    layer_.backward(out, np.ones((8, 4), np.float32))
    from tessera.mesh_sim.profile import profile

    with profile() as prof:
        out = layer_.forward(np.ones((8, 4), np.float32),
                             mesh=dist.mesh(axes=("ep",), shape=(4,)), train=True)
        layer_.backward(out, np.ones((8, 4), np.float32))
    assert problems(prof.trace()) == []
    assert {e.kind for e in prof.events} >= {"all_to_all", "all_gather", "all_reduce",
                                             "moe experts"}


def test_timeline_clocks():
    tl = Timeline("h100")
    one_us = Work(989e6, 989e6, 0, "bf16")  # 989e6 FLOP at 989 TFLOP/s: 1 µs
    assert tl.compute([0, 1], "work", one_us)[1] == pytest.approx(1.0)
    tl.compute([1], "more", one_us)
    cost, end = tl.collective([[0, 1]], "all_reduce", 8.0)
    assert tl.events[-1].start == pytest.approx(2.0)  # waits for GPU 1's compute
    assert end == pytest.approx(2.0 + cost.seconds * 1e6)
    # a transfer that does not wait for compute starts at once on idle GPUs
    send = tl.cost.collective("send_recv", 8.0, 2).seconds * 1e6
    assert tl.collective([[2, 3]], "send_recv", 8.0, wait_compute=False, ranks=2)[1] == \
        pytest.approx(send)
    assert tl.ready([0, 1]) == end and tl.clock(0, "compute") == pytest.approx(1.0)
    assert problems(tl.chrome()) == []
