"""The mbarrier phase / tx-count state machine.

PTX ISA 9.x, sec. 9.7.13.15 "mbarrier": init sets the expected arrival count and phase 0;
arrive.expect_tx raises the tx-count before arriving; complete_tx lowers it; the phase
completes when pending arrivals and tx-count are both zero, flipping its parity and
resetting pending arrivals; try_wait.parity p succeeds once the phase of parity p is done;
the tx-count ranges over -(2^20-1)..2^20-1; inval precedes re-initialisation.
"""

from __future__ import annotations

import numpy as np
import pytest

from tessera.arch import TX_LIMIT, MbarrierArray, MbarrierError


def test_arrivals_complete_the_phase_and_flip_parity() -> None:
    bars = MbarrierArray(1)
    bars.init(0, 2)
    assert not bars.try_wait_parity(0, 0)[0]
    assert bars.arrive(0).tolist() == [0]
    assert not bars.try_wait_parity(0, 0)[0]
    bars.arrive(0)
    assert bars.try_wait_parity(0, 0)[0]       # phase 0 completed
    assert not bars.try_wait_parity(0, 1)[0]   # phase 1 has not
    assert bars.phase_parity(0).tolist() == [1]
    bars.arrive(0, count=2)                    # pending was reset to the expected 2
    assert bars.try_wait_parity(0, 1)[0] and not bars.try_wait_parity(0, 0)[0]


def test_tma_pattern_expect_tx_then_complete_tx() -> None:
    bars = MbarrierArray(1)
    bars.init(0, 1)
    for phase in range(4):  # a ring slot reused over several phases
        bars.arrive(0, expect_tx=8192)
        assert not bars.try_wait_parity(0, phase & 1)[0]
        bars.complete_tx(0, 4096)
        assert not bars.try_wait_parity(0, phase & 1)[0]
        bars.complete_tx(0, 4096)
        assert bars.try_wait_parity(0, phase & 1)[0]


def test_copy_may_complete_before_expect_tx_while_arrivals_pend() -> None:
    # The tx-count may go negative transiently (its range is signed).
    bars = MbarrierArray(1)
    bars.init(0, 1)
    bars.complete_tx(0, 1024)
    assert not bars.try_wait_parity(0, 0)[0]
    bars.arrive(0, expect_tx=1024)
    assert bars.try_wait_parity(0, 0)[0]


def test_expect_tx_too_small_raises() -> None:
    bars = MbarrierArray(1)
    bars.init(0, 1)
    bars.arrive(0, expect_tx=2048)
    bars.complete_tx(0, 1024)
    with pytest.raises(MbarrierError, match="expect-tx count too small"):
        bars.complete_tx(0, 2048)
    bars2 = MbarrierArray(1)
    bars2.init(0, 1)
    bars2.complete_tx(0, 4096)
    with pytest.raises(MbarrierError, match="expect-tx count too small"):
        bars2.arrive(0, expect_tx=2048)
    bars3 = MbarrierArray(1)
    bars3.init(0, 1)
    bars3.arrive(0, expect_tx=2048)
    with pytest.raises(MbarrierError, match="1 more bytes"):  # one byte over is enough
        bars3.complete_tx(0, 2049)


def test_lifecycle_errors() -> None:
    bars = MbarrierArray(2)
    with pytest.raises(MbarrierError, match="never initialised"):
        bars.arrive(1)
    bars.init(0, 1)
    with pytest.raises(MbarrierError, match="inval"):
        bars.init(0, 1)
    bars.inval(0)
    with pytest.raises(MbarrierError, match="invalidated"):
        bars.arrive(0)
    bars.init(0, 3)  # re-init after inval is legal
    assert bars.phase_parity(0).tolist() == [0]
    with pytest.raises(MbarrierError, match="more arrivals"):
        bars.arrive(0, count=4)
    with pytest.raises(MbarrierError):
        bars.init(1, 0)
    with pytest.raises(MbarrierError, match="range"):
        bars.expect_tx(0, TX_LIMIT + 1)
    with pytest.raises(MbarrierError, match="out of range"):
        bars.arrive(5)


def test_vectorised_over_barriers_with_repeated_ids() -> None:
    bars = MbarrierArray(100)
    bars.init(np.arange(100), 4)
    bars.arrive(np.repeat(np.arange(0, 100, 2), 4))  # even barriers get all four arrivals
    done = bars.try_wait_parity(np.arange(100), 0)
    assert np.array_equal(done, np.arange(100) % 2 == 0)
    bars.arrive(np.arange(1, 100, 2), count=3)
    assert not np.any(bars.try_wait_parity(np.arange(1, 100, 2), 0))
    bars.arrive(np.arange(1, 100, 2), expect_tx=128)
    bars.complete_tx(np.arange(1, 100, 2), 128)
    assert np.all(bars.try_wait_parity(np.arange(100), 0))
