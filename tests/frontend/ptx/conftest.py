"""With ``TESSERA_GPU_CROSSCHECK=1`` every ``ts.ptx`` run here also runs on the GPU
(:mod:`tests.frontend.ptx.gpu_crosscheck`)."""

from __future__ import annotations

import os


def pytest_configure() -> None:
    if os.environ.get("TESSERA_GPU_CROSSCHECK") == "1":
        from tests.frontend.ptx import gpu_crosscheck

        gpu_crosscheck.install()
