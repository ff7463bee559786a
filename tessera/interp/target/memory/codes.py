"""Thread ids as the shared-memory race records hold them (:mod:`.state`): coded so
that 0 means "none", which lets a launch allocate its records as zero pages and
touch only those its CTAs access."""

from __future__ import annotations

import numpy as np

_BIG = np.int32(np.iinfo(np.int32).max)


def code_first(ids: np.ndarray | int) -> np.ndarray:
    """The code of a lowest reader: its global thread id minus int32 max, so that "no
    reader" is 0 and above every reader (a minimum keeps the lowest)."""
    return np.asarray(ids, np.int32) - _BIG


def code_last(ids: np.ndarray | int) -> np.ndarray:
    """The code of a highest reader or a writer: its global thread id plus 1 ("none"
    is 0, below every thread)."""
    return np.asarray(ids, np.int32) + np.int32(1)


__all__ = ["code_first", "code_last"]
