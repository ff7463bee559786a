"""Suite-wide set-up: with ``TESSERA_GPU_CROSSCHECK=1`` (``make gpu-check``) every Target
IR interpreter run is also run on the GPU and compared bit for bit
(:mod:`tests.backend.ptx.driver.crosscheck`); without a GPU that setting is an error,
never a silent pass."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TESSERA_GPU_CROSSCHECK") != "1":
        return
    from tessera.backend.ptx.driver import cuda_available
    from tests.backend.ptx.driver import crosscheck

    usable, why = cuda_available()
    if not usable:
        raise pytest.UsageError(f"TESSERA_GPU_CROSSCHECK=1 needs a CUDA GPU: {why}")
    crosscheck.install()
