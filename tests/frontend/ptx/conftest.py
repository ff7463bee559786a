"""With ``TESSERA_GPU_CROSSCHECK=1`` or ``TESSERA_PTX_CROSSCHECK=1`` every ``ts.ptx`` run
in the session also runs on the GPU (:mod:`tests.frontend.ptx.gpu_crosscheck`)."""

from __future__ import annotations

import os


def pytest_configure() -> None:
    if "1" in (os.environ.get("TESSERA_GPU_CROSSCHECK"), os.environ.get("TESSERA_PTX_CROSSCHECK")):
        from tests.frontend.ptx import gpu_crosscheck

        gpu_crosscheck.install()
