"""Cold import time of ``import tessera``, against ``import numpy`` in the same run.

Also timed: ``import tessera`` followed by the first use of the two parts it leaves for
later (``ts.kernel``: the tile kernel compiler and simulator; ``ts.dist.index_launch``:
the mesh simulator).

Each measurement is a fresh interpreter (``python -c "import X"``), so nothing is cached
in-process; the operating system's file cache is warm after the first run, which is what
a user who runs a script twice sees. Runs of the two statements are interleaved so that
the load of a shared machine hits both alike. Reported: median, min and max wall time
of the whole process (interpreter start-up included) and the import alone (measured
inside the process with ``time.perf_counter``).

Usage: ``.venv/bin/python benchmarks/import_time.py [--repeats 7] [--python PATH]``.
Set ``PYTHONPATH`` to measure another checkout (``PYTHONPATH=/tmp/old .venv/bin/...``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

#: what each run imports; numpy is the anchor (tessera imports it too). The last two
#: rows are ``import tessera`` plus the first use of a part that loads on demand.
STATEMENTS = {
    "numpy": "import numpy",
    "tessera": "import tessera",
    "kernel": "import tessera; tessera.kernel",
    "dist": "import tessera; tessera.dist.index_launch",
}

# The import is timed inside the child, so interpreter start-up is reported apart.
_CHILD = ("import time; t0 = time.perf_counter(); {stmt}; "
          "print(time.perf_counter() - t0)")


def one_run(python: str, stmt: str) -> tuple[float, float]:
    """Seconds of one cold process running ``stmt``: (whole process, import alone)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    # A neutral working directory: ``python -c`` puts it first on sys.path, and a
    # checkout there would shadow PYTHONPATH.
    out = subprocess.run([python, "-c", _CHILD.format(stmt=stmt)], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    return time.perf_counter() - t0, float(out.strip().splitlines()[-1])


def measure(python: str, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """``repeats`` interleaved runs of every statement (after one unrecorded warm-up
    run each, which fills the file cache)."""
    for stmt in STATEMENTS.values():
        one_run(python, stmt)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in STATEMENTS}
    for _ in range(repeats):
        for name, stmt in STATEMENTS.items():
            runs[name].append(one_run(python, stmt))
    return runs


def table(runs: dict[str, list[tuple[float, float]]]) -> str:
    """The Markdown table of the runs (seconds)."""
    rows = ["| statement | import median (s) | min | max | process median (s) | "
            "vs numpy (import) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    anchor = statistics.median(i for _, i in runs["numpy"])
    for name, samples in runs.items():
        imports = [i for _, i in samples]
        med = statistics.median(imports)
        rows.append(f"| `{STATEMENTS[name]}` | {med:.3f} | {min(imports):.3f} | "
                    f"{max(imports):.3f} | {statistics.median(p for p, _ in samples):.3f} | "
                    f"{med / anchor:.2f}x |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="cold processes per statement")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to time")
    args = parser.parse_args(argv)
    runs = measure(args.python, max(args.repeats, 1))
    where = subprocess.run([args.python, "-c", "import tessera; print(tessera.__file__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    print(f"{args.repeats} cold processes each, interleaved; tessera from {where.strip()}\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
