"""Run benchmark scripts of two revisions back to back, alternating, on one machine.

The machine is shared and its load drifts over minutes, so a figure measured an hour
ago is no baseline for one measured now. This driver checks the older revision out
into a temporary ``git worktree`` and runs each named script as that revision has it,
against that revision's package, then the current tree's script against the current
package, alternating ``--rounds`` times (old, new, old, new, ...). Each run's output is
printed under a header naming its side and round, so the tables can be read side by
side.

Both sides use this interpreter and its installed dependencies; each side imports its
own package through ``PYTHONPATH`` (which comes before the editable install's finder,
and which the scripts' own child processes inherit, as ``import_time.py``'s do). BLAS
is pinned to one thread.

Usage::

    .venv/bin/python benchmarks/revisions.py OLD_REV SCRIPT [SCRIPT ...] \\
        [--rounds 2] [--args "SCRIPT=--repeats 5" ...]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run_side(tree: Path, script: str, extra: list[str], env: dict[str, str]) -> str:
    """Run ``benchmarks/SCRIPT.py`` of ``tree`` (or the current one, copied there, where
    ``tree`` has none) against ``tree``'s package; its output, headed by where
    ``tessera`` was imported from."""
    path = tree / "benchmarks" / f"{script}.py"
    note = ""
    if not path.exists():
        # A script newer than the old revision measures it with the current script,
        # copied into the old tree: scripts find their repository (sys.path, examples,
        # sibling scripts) from their own place. It must only use names the old package
        # has.
        path.write_text((HERE / f"{script}.py").read_text())
        note = f"(the current {script}.py, on this revision)\n"
    # Run from the tree's benchmarks folder, never from the checkout's root, whose
    # ``tessera/`` would otherwise come first on sys.path.
    side_env = dict(env, PYTHONPATH=str(tree))
    where = subprocess.run([sys.executable, "-c", "import tessera; print(tessera.__file__)"],
                           cwd=path.parent, env=side_env, capture_output=True, text=True)
    note += f"(tessera from {where.stdout.strip()})\n"
    done = subprocess.run([sys.executable, str(path), *extra], cwd=path.parent,
                          env=side_env, capture_output=True, text=True)
    failed = f"\n[exit {done.returncode}]\n{done.stderr[-2000:]}" if done.returncode else ""
    return note + done.stdout + failed


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, make the old worktree, run the rounds, remove the worktree."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the older revision (any git revision name)")
    parser.add_argument("scripts", nargs="+", help="benchmark names, e.g. graph_matmul")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--args", action="append", default=[],
                        help="SCRIPT=ARGS: extra arguments for one script, both sides")
    opts = parser.parse_args(argv)
    extra = {}
    for item in opts.args:
        name, _, rest = item.partition("=")
        extra[name] = shlex.split(rest)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="tessera-old-") as tmp:
        old_tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(old_tree), opts.old], check=True)
        try:
            for script in opts.scripts:
                for k in range(opts.rounds):
                    for side, tree in (("old " + opts.old, old_tree), ("new", ROOT)):
                        print(f"\n### {script}: {side}, round {k + 1}\n", flush=True)
                        print(run_side(tree, script, extra.get(script, []), env), flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(old_tree)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
