"""Layouts that hold the same registers: row statistics of rows one element wide are
their blocked tile (:func:`tessera.lower.layout.as_blocked`)."""

from __future__ import annotations

import pytest

from tessera.lower.layout import Acc, BRow, Row, as_blocked, blocked
from tessera.lower.rules.tensor import register_count


@pytest.mark.parametrize("shape", [(1, 1), (5, 1), (300, 1), (2, 5, 1)])
def test_row_statistics_of_unit_rows_are_their_blocked_tile(shape: tuple[int, ...]) -> None:
    layout = BRow(blocked(shape))
    held = as_blocked(layout)
    assert held == blocked(shape) and held.vec == 1
    assert register_count(held) == register_count(layout)


def test_other_layouts_have_no_blocked_twin() -> None:
    assert as_blocked(blocked((5, 7))) == blocked((5, 7))
    assert as_blocked(BRow(blocked((5, 7)))) is None  # one register per chunk, not per element
    assert as_blocked(Acc(64, 8)) is None
    assert as_blocked(Row(64)) is None
