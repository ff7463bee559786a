"""Headless Chromium for the page tests: Debian's ``chromium`` and ``chromium-driver``
driven by Selenium (no browser download).

The packages are installed once per machine when missing and the tests run as root
with ``apt-get`` (``make test`` on a fresh CI machine); otherwise the browser tests
skip and say why. The install waits for the package manager's lock, so two test
workers installing at once take turns.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PACKAGES = ("chromium", "chromium-driver")


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", *args], env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def ensure_chromium() -> str | None:
    """Install chromium and its driver if missing; None when they are there, else the
    reason the browser tests cannot run."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return None
    if shutil.which("apt-get") is None:
        return "no /usr/bin/chromium and no apt-get to install it"
    if os.geteuid() != 0:
        return "no /usr/bin/chromium, and installing it needs root (apt-get install -y " \
               "chromium chromium-driver)"
    done = _apt("install", "-y", *PACKAGES)
    if done.returncode != 0:  # a fresh machine may have no package lists yet
        _apt("update")
        done = _apt("install", "-y", *PACKAGES)
    if done.returncode != 0 or not CHROMEDRIVER.exists():
        return f"apt-get install chromium chromium-driver failed: {done.stderr[-400:]}"
    return None


def start_browser(width: int = 1400, height: int = 1000):
    """A headless Chromium window of this size."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def open_page(driver, uri: str, timeout: float = 60.0) -> None:
    """Load ``uri`` and wait until the whole document is parsed and loaded: a page of
    several megabytes (a kernel's PTX) can still be parsing on a loaded machine when
    the driver hands back control."""
    import time

    driver.get(uri)
    end = time.monotonic() + timeout
    while driver.execute_script("return document.readyState") != "complete":
        if time.monotonic() > end:
            raise TimeoutError(f"{uri} did not finish loading in {timeout} s")
        time.sleep(0.05)


def screenshot_pixels(driver) -> np.ndarray:
    """The window's pixels as an (H, W, 3) uint8 array."""
    from PIL import Image

    png = driver.get_screenshot_as_png()
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def distinct_colours(pixels: np.ndarray) -> int:
    """How many different colours the picture has."""
    flat = pixels.reshape(-1, 3).astype(np.uint32)
    return int(np.unique((flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]).size)
