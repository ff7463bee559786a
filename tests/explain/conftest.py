"""Fixtures of the explain tests: one headless browser per test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.explain.browser import ensure_chromium, start_browser


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium (installed on first use where the process may; else the
    test skips with the reason)."""
    why = ensure_chromium()
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("selenium")
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()
