"""``tessera conformance``: run the conformance suite on one backend.

    tessera conformance [--backend interp|tile|target|cuda] [--report out.html]
                        [--junit out.xml] [-k PATTERN] [--slow] [--list]

Prints a line per area and the failures with their messages (on a terminal, a
progress bar on standard error shows the case running now once the run takes more
than a second); exits with 1 when any case failed or raised.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any, TextIO

from tessera.conformance.registry import BACKENDS
from tessera.errors import ArgumentError
from tessera.progress import ProgressBar
from tessera.progress import progress as progress_bar


def add_parser(sub: Any) -> None:
    """Add the ``conformance`` subcommand to the ``tessera`` parser's subparsers."""
    p = sub.add_parser("conformance", help="run the conformance suite against the "
                       "specification")
    p.add_argument("--backend", default="interp",
                   help=f"one of {', '.join(BACKENDS)} (default interp)")
    p.add_argument("--report", default="", metavar="OUT.html", help="write an HTML report")
    p.add_argument("--junit", default="", metavar="OUT.xml", help="write JUnit XML")
    p.add_argument("-k", dest="pattern", default="", metavar="PATTERN",
                   help="select cases whose id matches, e.g. 'numerics and not fp4'")
    p.add_argument("--slow", action="store_true", help="include the slow cases")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.set_defaults(run=cmd_conformance)


class Progress:
    """A line per area on ``out`` as each area finishes; ``bar`` advances per case."""

    def __init__(self, out: TextIO, bar: ProgressBar) -> None:
        self.out, self.bar = out, bar
        self.area: str | None = None
        self.counts: Counter[str] = Counter()

    def __call__(self, result: Any) -> None:
        if result.case.area != self.area:
            self.flush()
            self.area = result.case.area
        self.counts[result.outcome] += 1
        self.bar.update(1)
        self.bar.describe(result.case.id)

    def flush(self) -> None:
        """Print the finished area's line."""
        if self.area is None:
            return
        c = self.counts
        bad = c["failed"] + c["error"]
        self.bar.write(f"{self.area:<10} {c['passed']:4d} passed  {bad:3d} failed  "
                       f"{c['skipped']:3d} skipped", file=self.out)
        self.counts = Counter()


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run the selected cases and write the reports asked for."""
    from tessera.conformance import registry, report, runner
    from tessera.files import check_writable

    backend = registry.check_backend(args.backend)
    for path, what in ((args.report, "report"), (args.junit, "JUnit XML")):
        if path:  # before the run, not after it
            check_writable(path, what)
    cases = registry.select(args.pattern)
    if not cases:  # a mistyped -k would otherwise pass, having run nothing
        areas = sorted({c.area for c in registry.select()})
        raise ArgumentError(f"no conformance case matches -k {args.pattern!r}",
                            hint="match words of the case ids, e.g. -k 'numerics and not "
                                 f"fp4'; the areas are {', '.join(areas)} (--list shows "
                                 "every case)")
    if args.list:
        for entry in cases:
            print(f"{entry.id}  [{entry.spec}]")
        return 0
    out = sys.stdout
    with progress_bar("conformance", len(cases), unit="case") as bar:
        progress = Progress(out, bar)
        result = runner.run(cases, backend, slow=args.slow, progress=progress)
        progress.flush()
    for r in result.results:
        if r.outcome in ("failed", "error"):
            first = r.message.splitlines()[0] if r.message else ""
            out.write(f"{r.outcome.upper()} {r.case.id} [{r.case.spec}]: {first}\n")
    if args.report:
        report.write_html(result, args.report)
    if args.junit:
        report.write_junit(result, args.junit)
    out.write(f"{'=' * 8} {result.summary()}\n")
    return 0 if result.ok else 1


__all__ = ["add_parser", "cmd_conformance"]
