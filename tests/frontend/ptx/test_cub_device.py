"""CUB's device-wide algorithms (reduce, arg-max, scans, radix sorts, merge sort, select,
histogram, segmented reduce, run-length encode), run on the CPU launch by launch as
CUB's host code made the launches (tests/ir/text/ptx/ptx_corpus/device_algorithms.cu,
recorded by make_device_ptx.sh): the arguments' bytes as recorded, each array at the
device address the host program gave it (``run(..., buffers=...)``), structs passed by
value as their bytes. Results are checked against NumPy; decoupled look-back scans,
onesweep radix sort passes and merge-path partitions span many CTAs."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise

import numpy as np
import pytest

import tessera as ts
from tests.frontend.ptx.corpus import CORPUS

#: where the recorded program's arrays live: 0 the temporary storage, 1... its arrays
BASE, STEP = 0x7E55_0000_0000, 1 << 32
rng = np.random.default_rng(90)


def _calls() -> dict[str, dict]:
    """Each algorithm's size, temporary storage bytes and events, by name."""
    calls: dict[str, dict] = {}
    name = ""
    for line in (CORPUS / "device_algorithms_launches.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("note") == "temp":
            calls[name]["temp"] = event["value"]
        elif "note" in event:
            name = event["note"]
            calls[name] = {"n": event["value"], "events": []}
        else:
            calls[name]["events"].append(event)
    return calls


CALLS = _calls()


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(CORPUS / "device_algorithms_sm80.ptx")


def replay(mod: ts.ptx.PtxProgram, name: str, *arrays: np.ndarray) -> None:
    """Run algorithm ``name``'s recorded launches and memsets over ``arrays`` (the
    program's arrays 1...), with temporary storage of the recorded size."""
    call = CALLS[name]
    memory = [np.zeros(max(call["temp"], 1), np.uint8), *arrays]
    buffers = {BASE + k * STEP: a for k, a in enumerate(memory)}
    for event in call["events"]:
        if "memset" in event:
            k, at = divmod(int(event["memset"], 16) - BASE, STEP)
            memory[k].view(np.uint8).reshape(-1)[at:at + event["bytes"]] = event["value"]
        elif "launch" in event:
            kernel = mod.kernel(event["launch"])
            args = kernel.arguments_from_bytes([bytes.fromhex(a) for a in event["args"]])
            kernel.run(grid=event["grid"], block=event["block"], args=args,
                       shared_bytes=event["shared"], buffers=buffers)
        else:
            raise AssertionError(f"unexpected event {event}")


def test_the_recording_spans_many_ctas() -> None:
    """The sizes make look-back and multi-pass paths run, not the single-tile ones."""
    grids = {name: max(e["grid"][0] for e in c["events"] if "launch" in e)
             for name, c in CALLS.items()}
    assert grids["exclusive_sum"] >= 20 and grids["sort_pairs"] >= 10
    assert sum("Onesweep" in e.get("launch", "") for e in CALLS["sort_pairs"]["events"]) == 4


def test_reduce_sum_and_argmax(mod) -> None:
    n = CALLS["reduce_sum"]["n"]
    x = rng.integers(-1000, 1000, n).astype(np.float32)  # every order of the sums is exact
    out = np.zeros(1, np.float32)
    replay(mod, "reduce_sum", x, out)
    assert out[0] == x.astype(np.float64).sum()
    v = rng.integers(-10**6, 10**6, n).astype(np.int32)
    v[n // 3] = v[n // 2] = 2**30  # the first of equal maxima
    best, where = np.zeros(1, np.int32), np.zeros(1, np.int64)
    replay(mod, "reduce_argmax", v, best, where)
    assert (best[0], where[0]) == (2**30, n // 3)


@pytest.mark.parametrize("name, make, want", [
    ("exclusive_sum", lambda n: rng.integers(-100, 100, n).astype(np.int32),
     lambda x: np.cumsum(x) - x),
    ("inclusive_max", lambda n: rng.standard_normal(n).astype(np.float32),
     np.maximum.accumulate),
])
def test_scans(mod, name: str, make: Callable, want: Callable) -> None:
    x = make(CALLS[name]["n"])
    out = np.zeros_like(x)
    replay(mod, name, x, out)
    np.testing.assert_array_equal(out, want(x))


def test_radix_sorts(mod) -> None:
    n = CALLS["sort_pairs"]["n"]
    keys = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    keys[: n // 4] = keys[n // 4: n // 2]  # equal keys keep their order
    values = np.arange(n, dtype=np.int32)
    keys_out, values_out = np.zeros_like(keys), np.zeros_like(values)
    replay(mod, "sort_pairs", keys, keys_out, values, values_out)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(keys_out, keys[order])
    np.testing.assert_array_equal(values_out, order)
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    replay(mod, "sort_keys_descending", x, out)
    np.testing.assert_array_equal(out, np.sort(x)[::-1])


def test_merge_sort_reads_past_its_ranges_harmlessly(mod) -> None:
    """The merge loads the element after each range's last and discards it: a partial
    last tile leaves those shared words unwritten, which is no error while no result
    depends on them."""
    x = rng.integers(-1000, 1000, CALLS["merge_sort"]["n"]).astype(np.int32)
    want = np.sort(x)
    replay(mod, "merge_sort", x)  # in place
    np.testing.assert_array_equal(x, want)


def test_select_histogram_segments_and_runs(mod) -> None:
    n = CALLS["select_if"]["n"]
    x = rng.integers(-100, 100, n).astype(np.int32)
    out, count = np.zeros(n, np.int32), np.zeros(1, np.int32)
    replay(mod, "select_if", x, out, count)
    kept = x[x > 0]
    assert count[0] == len(kept)
    np.testing.assert_array_equal(out[:len(kept)], kept)

    f = rng.uniform(-0.1, 1.1, n).astype(np.float32)  # some below and above the range
    hist = np.zeros(32, np.int32)
    replay(mod, "histogram_even", f, hist)
    np.testing.assert_array_equal(hist, np.histogram(f[(f >= 0) & (f < 1)], 32, (0, 1))[0])

    v = rng.integers(-100, 100, 5000).astype(np.float32)
    offsets = np.sort(rng.integers(0, 5000, 41)).astype(np.int32)
    sums = np.zeros(40, np.float32)
    replay(mod, "segmented_sum", v, sums, offsets)
    np.testing.assert_array_equal(sums, [v[a:b].sum() for a, b in pairwise(offsets)])

    runs = np.repeat(rng.integers(0, 5, n), rng.integers(1, 4, n))[:n].astype(np.int32)
    unique, counts, nruns = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(1, np.int32)
    replay(mod, "run_length_encode", runs, unique, counts, nruns)
    starts = np.r_[0, np.flatnonzero(np.diff(runs)) + 1]
    assert nruns[0] == len(starts)
    np.testing.assert_array_equal(unique[:len(starts)], runs[starts])
    np.testing.assert_array_equal(counts[:len(starts)], np.diff(np.r_[starts, n]))
