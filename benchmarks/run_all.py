"""Run every benchmark script in this folder, one process each, BLAS pinned to one thread.

Each script prints its own Markdown table (the tables in benchmarks/README.md come from
these runs). Usage: ``python benchmarks/run_all.py [NAME ...]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    # triton_anchor.py runs inside its own environment, started by tile_kernels.py;
    # revisions.py is the A/B driver that runs the others.
    skip = {Path(__file__).name, "triton_anchor.py", "revisions.py"}
    scripts = sorted(p for p in HERE.glob("*.py") if p.name not in skip)
    if names:
        scripts = [p for p in scripts if p.stem in names]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    failed = 0
    for script in scripts:
        print(f"\n## {script.stem}\n", flush=True)
        failed += subprocess.run([sys.executable, str(script)], env=env).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
