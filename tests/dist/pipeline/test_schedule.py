"""Pipeline schedules: their shape, their properties, and the errors of bad ones.

The dependency rules are restated here independently of the implementation: F of
micro-batch j on stage s after F on stage s - 1; B on stage s after B on stage s + 1
and after its own F; one event per stage per step.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.dist.pipeline.schedule import (
    DeadlockError,
    Schedule,
    ScheduleError,
    gpipe,
    one_f_one_b,
)
from tests.mesh_sim.util import raises_here

sizes = st.tuples(st.integers(1, 6), st.integers(1, 10))


def check_dependencies(s: Schedule) -> None:
    at = {(e.kind, e.stage, e.micro_batch): e.step for e in s.events}
    p, m = s.stages, s.micro_batches
    assert len(at) == len(s.events) == p * m * (2 if s.backward else 1)
    assert len({(e.stage, e.step) for e in s.events}) == len(s.events)
    for j in range(m):
        for st_ in range(1, p):
            assert at[("F", st_, j)] > at[("F", st_ - 1, j)]
        if s.backward:
            for st_ in range(p):
                assert at[("B", st_, j)] > at[("F", st_, j)]
                if st_ < p - 1:
                    assert at[("B", st_, j)] > at[("B", st_ + 1, j)]


@settings(max_examples=40, deadline=None)
@given(sizes)
def test_gpipe_and_1f1b_properties(pm):
    p, m = pm
    g, o = gpipe(p, m), one_f_one_b(p, m)
    for s in (g, o):
        check_dependencies(s)
        assert s.makespan == 2 * (m + p - 1)
        assert s.bubble_fraction() == pytest.approx((p - 1) / (m + p - 1))
    assert g.peak_activations() == m
    assert o.peak_activations() <= p
    assert [o.peak_activations(s) for s in range(p)] == [min(p - s, m) for s in range(p)]
    for s in range(p):  # both run each stage's backwards in micro-batch order
        for sched in (g, o):
            assert [e.micro_batch for e in sched.stage_events(s) if e.kind == "B"] == \
                list(range(m))


def test_gpipe_steps_and_table():
    s = gpipe(3, 2)
    assert [tuple(e) for e in s.events[:4]] == [(0, 0, 0, "F"), (1, 0, 1, "F"),
                                                (1, 1, 0, "F"), (2, 1, 1, "F")]
    assert s.table().splitlines() == [
        "step      0  1  2  3  4  5  6  7",
        "stage 0  F0 F1  .  .  .  . B0 B1",
        "stage 1   . F0 F1  .  . B0 B1  .",
        "stage 2   .  . F0 F1 B0 B1  .  .",
    ]


def test_one_f_one_b_program():
    s = one_f_one_b(3, 4)
    assert s.programs[0] == (("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                             ("B", 2), ("B", 3))
    assert s.programs[2] == (("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                             ("F", 3), ("B", 3))


def test_forward_only_schedule():
    s = gpipe(3, 4, backward=False)
    check_dependencies(s)
    assert s.makespan == 4 + 3 - 1 and s.peak_activations() == 0


def test_explicit_transfers_and_given_steps():
    progs = [[("F", 0), ("send_act", 0), ("recv_grad", 0), ("B", 0)],
             [("recv_act", 0), ("F", 0), ("B", 0), ("send_grad", 0)]]
    s = Schedule.from_programs(progs)
    assert [tuple(e) for e in s.events] == [(0, 0, 0, "F"), (1, 1, 0, "F"), (2, 1, 0, "B"),
                                            (3, 0, 0, "B")]
    late = Schedule.from_events([(0, 0, 0, "F"), (5, 1, 0, "F"), (6, 1, 0, "B"),
                                 (9, 0, 0, "B")])
    assert late.makespan == 10 and late.bubble_fraction() == pytest.approx(0.8)


def test_a_cycle_is_a_deadlock_at_the_users_line():
    progs = [[("F", 0), ("B", 0), ("F", 1), ("B", 1)],
             [("F", 1), ("B", 1), ("F", 0), ("B", 0)]]
    text = raises_here(DeadlockError, lambda: Schedule.from_programs(progs), "deadlock",
                       "waits for")
    assert "F(stage 1, micro-batch 1)" in text


def test_rendezvous_deadlock_through_explicit_transfers():
    # Each stage receives before it sends: both wait forever.
    progs = [[("recv_grad", 0), ("F", 0), ("send_act", 0), ("B", 0)],
             [("recv_act", 0), ("F", 0), ("B", 0), ("send_grad", 0)]]
    raises_here(DeadlockError, lambda: Schedule.from_programs(progs), "deadlock")


def test_a_send_with_no_recv():
    progs = [[("F", 0), ("send_act", 0), ("recv_grad", 0), ("B", 0)],
             [("F", 0), ("B", 0), ("send_grad", 0)]]
    raises_here(DeadlockError, lambda: Schedule.from_programs(progs),
                "never receives", "waits forever")
    progs = [[("F", 0), ("recv_grad", 0), ("B", 0)],
             [("recv_act", 0), ("F", 0), ("B", 0), ("send_grad", 0)]]
    raises_here(DeadlockError, lambda: Schedule.from_programs(progs), "never sends")


@pytest.mark.parametrize("progs, words", [
    ([[("F", 0), ("B", 0)], [("F", 0)]], ["never runs B"]),
    ([[("B", 0), ("F", 0)]], ["before its own F"]),
    ([[("F", 0), ("F", 0), ("B", 0)]], ["twice"]),
    ([[("F", 0), ("X", 0)]], ["unknown instruction"]),
    ([[("F", 0), ("send_act", 0), ("B", 0)]], ["no stage 1"]),
])
def test_incomplete_schedules(progs, words):
    raises_here(ScheduleError, lambda: Schedule.from_programs(progs), *words)


def test_given_steps_must_respect_dependencies():
    raises_here(ScheduleError, lambda: Schedule.from_events(
        [(0, 0, 0, "F"), (0, 1, 0, "F"), (1, 1, 0, "B"), (2, 0, 0, "B")]),
        "dependency order", "F(stage 0, micro-batch 0)")
    raises_here(ScheduleError, lambda: Schedule.from_events(
        [(0, 0, 0, "F"), (0, 0, 1, "F")]), "both at step 0")


def test_bad_sizes():
    raises_here(ts.TesseraError, lambda: gpipe(0, 2), "stages")
    raises_here(ts.TesseraError, lambda: one_f_one_b(2, True), "micro_batches")


def random_program(data: st.DataObject, m: int) -> list[tuple[str, int]]:
    """A random order of one stage's events in which each B follows its own F."""
    prog: list[tuple[str, int]] = []
    while len(prog) < 2 * m:
        done = {j for k, j in prog if k == "F"}
        ready = [("F", j) for j in range(m) if j not in done] + \
            [("B", j) for j in sorted(done) if ("B", j) not in prog]
        prog.append(ready[data.draw(st.integers(0, len(ready) - 1))])
    return prog


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_stage_orders_deadlock_or_give_the_reference_bits(data):
    import numpy as np

    from tessera import dist
    from tessera.dist.pipeline.run import Pipeline, Stage

    p, m = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    progs = [random_program(data, m) for _ in range(p)]
    try:
        sched = Schedule.from_programs(progs, micro_batches=m)
    except DeadlockError as err:
        assert "waits for" in str(err)
        event("deadlock")
        return
    event("ran")
    check_dependencies(sched)
    rng = np.random.default_rng(p * 10 + m)
    ws = [(rng.standard_normal((3, 3)).astype(np.float32),) for _ in range(p)]
    pipe = Pipeline([Stage(lambda x, w: ts.tanh(x @ w), w) for w in ws],
                    dist.mesh(axes=("pp",), shape=(p,)), loss=lambda y: ts.sum(y * y))
    x = rng.standard_normal((m, 3)).astype(np.float32)
    got = pipe.run(x, micro_batches=m, schedule=sched)
    ref = pipe.reference(x, micro_batches=m)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(got.grads, ref.grads))
