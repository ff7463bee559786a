"""The two reports of a run: a self-contained HTML page and JUnit XML.

The HTML page has no script and loads nothing: one table, a line per case with its
id, specification reference, outcome, duration and message, under a summary line. A
failing case that launched a kernel links to that kernel's explain page (made beside
the report, for failing cases only: :mod:`tessera.explain.failures`).
The XML follows the JUnit schema CI tools read (``testsuites/testsuite/testcase`` with
``failure``, ``error`` and ``skipped`` children); a case's ``classname`` is
``tessera.conformance.<area>``.
"""

from __future__ import annotations

import html
import platform
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from tessera.conformance.runner import Report
from tessera.files import write_output

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } p.summary { font-size: 1.1em; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left;
         vertical-align: top; }
th { background: #eee; } td.num { text-align: right; white-space: nowrap; }
tr.passed td.outcome { color: #176f2c; } tr.skipped td.outcome { color: #777; }
tr.failed td.outcome, tr.error td.outcome { color: #b00020; font-weight: bold; }
tr.failed, tr.error { background: #fff0f0; }
pre { white-space: pre-wrap; margin: 0; font-size: 0.85em; }
code { font-size: 0.95em; }
"""


def to_html(report: Report, title: str = "Tessera conformance",
            pages: dict[str, str] | None = None) -> str:
    """The report as one HTML page (UTF-8, inline style, no network); ``pages`` maps
    a case id to the (relative) address of its explain page."""
    esc = html.escape
    rows = []
    for r in report.results:
        message = f"<pre>{esc(r.message)}</pre>" if r.message else ""
        if pages and r.case.id in pages:
            message += f'<a class="explain" href="{esc(pages[r.case.id])}">explain page</a>'
        rows.append(
            f'<tr class="{r.outcome}" id="{esc(r.case.id)}"><td><code>{esc(r.case.id)}</code>'
            f"<br><small>{esc(r.case.doc)}</small></td><td>{esc(r.case.spec)}</td>"
            f'<td class="outcome">{r.outcome}</td><td class="num">{r.seconds * 1e3:.1f} ms'
            f"</td><td>{message}</td></tr>")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{esc(title)}: backend <code>{esc(report.backend)}</code></h1>\n"
        f'<p class="summary">{esc(report.summary())}</p>\n'
        f"<p><small>{stamp}, Python {platform.python_version()}, "
        f"{esc(platform.platform())}</small></p>\n"
        "<table><thead><tr><th>case</th><th>specification</th><th>result</th>"
        "<th>duration</th><th>message</th></tr></thead><tbody>\n"
        + "\n".join(rows) + "\n</tbody></table></body></html>\n")


def to_junit(report: Report) -> ET.ElementTree:
    """The report as a JUnit XML tree: one testsuite per run."""
    counts = report.counts
    suites = ET.Element("testsuites", name="tessera conformance",
                        tests=str(len(report.results)), failures=str(counts.get("failed", 0)),
                        errors=str(counts.get("error", 0)),
                        skipped=str(counts.get("skipped", 0)), time=f"{report.seconds:.3f}")
    suite = ET.SubElement(
        suites, "testsuite", name=f"tessera.conformance[{report.backend}]",
        tests=str(len(report.results)), failures=str(counts.get("failed", 0)),
        errors=str(counts.get("error", 0)), skipped=str(counts.get("skipped", 0)),
        time=f"{report.seconds:.3f}",
        timestamp=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
        hostname=platform.node() or "localhost")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="backend", value=report.backend)
    for r in report.results:
        tc = ET.SubElement(suite, "testcase", classname=f"tessera.conformance.{r.case.area}",
                           name=r.case.id, time=f"{r.seconds:.6f}")
        cprops = ET.SubElement(tc, "properties")
        ET.SubElement(cprops, "property", name="spec", value=r.case.spec)
        if r.outcome == "failed":
            ET.SubElement(tc, "failure", message=r.message, type="AssertionError").text = \
                r.detail
        elif r.outcome == "error":
            ET.SubElement(tc, "error", message=r.message,
                          type=r.message.partition(":")[0]).text = r.detail
        elif r.outcome == "skipped":
            ET.SubElement(tc, "skipped", message=r.message)
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_html(report: Report, path: str | Path) -> None:
    """Write :func:`to_html` to ``path``, with explain pages for the failing cases in
    the folder ``<report name>-explain`` beside it."""
    path = Path(path)
    pages: dict[str, str] = {}
    if not report.ok:
        from tessera.explain.failures import failure_pages

        folder = path.parent / f"{path.stem}-explain"
        pages = {case: f"{folder.name}/{page.name}"
                 for case, page in failure_pages(report, folder).items()}
    write_output(path, to_html(report, pages=pages), "report")


def write_junit(report: Report, path: str | Path) -> None:
    """Write :func:`to_junit` to ``path`` with an XML declaration."""
    root = to_junit(report).getroot()
    write_output(path, ET.tostring(root, encoding="utf-8", xml_declaration=True), "JUnit XML")


__all__ = ["to_html", "to_junit", "write_html", "write_junit"]
