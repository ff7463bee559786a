"""Explain pages in headless Chromium: hovering links the lines, the pages draw.

The browser comes from :mod:`tests.explain.browser` (installed once where the tests
may install it, else these tests skip). Each test loads a page, acts on it as a
reader would, and checks the screenshot is a drawn page (many colours), not blank.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from tessera.explain.command import write_page
from tests.explain import subjects
from tests.explain.browser import distinct_colours, open_page, screenshot_pixels

EXAMPLES = Path(__file__).parents[2] / "examples" / "explain"
HIGHLIGHT = (255, 243, 176)  # --hl of the page's style sheet


def _hover(driver: Any, css: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.CSS_SELECTOR, css)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    ActionChains(driver).move_to_element(element).perform()


def _highlighted(driver: Any, panel: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll("
        f"'section[data-key=\"{panel}\"] .ln.hl')).map(e => e.textContent)")


def test_hovering_a_source_line_highlights_its_ptx(browser: Any, tmp_path: Path) -> None:
    page = write_page(subjects.saxpy, tmp_path / "saxpy.html", **subjects.saxpy_arguments())
    open_page(browser, page.as_uri())
    line = subjects.line_of("# the linked line")
    _hover(browser, f'section[data-key="source"] .ln[data-src="{line}"]')
    ptx = _highlighted(browser, "ptx")
    assert any("st.global.f32" in t for t in ptx) and any("ld.global.f32" in t for t in ptx)
    assert not any(".version" in t or ".entry" in t for t in ptx)
    assert any("tile.store" in t for t in _highlighted(browser, "tile"))
    colour = browser.execute_script(
        "return getComputedStyle(document.querySelector("
        "'section[data-key=\"ptx\"] .ln.hl')).backgroundColor")
    assert colour == "rgb({}, {}, {})".format(*HIGHLIGHT)
    pixels = screenshot_pixels(browser)
    assert distinct_colours(pixels) > 100
    lit = (pixels == HIGHLIGHT).all(axis=-1).sum()
    assert lit > 500  # the highlighted lines are on screen
    # and back: a PTX line lights its source line
    _hover(browser, f'section[data-key="ptx"] .ln[data-src="{line}"]')
    assert len(_highlighted(browser, "source")) == 1


@pytest.mark.parametrize(("example", "panels", "drawings"), [
    ("gemm_page.py", ["source", "tile", "target", "ptx"], ["Tile map", "Resources"]),
    ("flash_attention_page.py", ["source", "tile", "target", "ptx"], ["Tile map"]),
    ("training_step_page.py", ["source", "graph", "schedule", "tile", "target", "ptx"],
     ["Graph IR dataflow", "Sharding"]),
])
def test_example_pages_draw(browser: Any, tmp_path: Path, example: str, panels: list[str],
                            drawings: list[str]) -> None:
    out = tmp_path / example.replace(".py", ".html")
    runpy.run_path(str(EXAMPLES / example), run_name="__explain_test__")["main"](str(out))
    open_page(browser, out.as_uri())
    keys = browser.execute_script(
        "return Array.from(document.querySelectorAll('section.panel'))"
        ".map(e => e.dataset.key)")
    assert keys == panels
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('section.drawing h3'))"
        ".map(e => e.textContent)")
    assert all(any(t.startswith(d) for t in titles) for d in drawings), titles
    assert distinct_colours(screenshot_pixels(browser)) > 50
    browser.execute_script("document.querySelector('section.drawing').scrollIntoView()")
    assert distinct_colours(screenshot_pixels(browser)) > 20


def test_hovering_a_dataflow_node_highlights_its_lines(browser: Any, tmp_path: Path) -> None:
    import numpy as np

    a = np.ones((4, 8), np.float32)
    page = write_page(subjects.scaled_sum, tmp_path / "sum.html", a=a, b=a)
    open_page(browser, page.as_uri())
    line = subjects.line_of("c = a * 2.0 + b")
    _hover(browser, f'svg.dataflow g.node[data-src="{line}"]')
    assert len(_highlighted(browser, "source")) == 1
    assert any("graph.mul" in t for t in _highlighted(browser, "graph"))
    lit = browser.execute_script(
        f"return document.querySelectorAll('svg.dataflow g.node.hl[data-src=\"{line}\"]')"
        ".length")
    assert lit >= 2  # every op of that line, in both drawings
