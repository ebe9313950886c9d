"""Rendering of build, smoke and inspect results: rich tables, JSON, JUnit XML."""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from imgbuild.errors import UsageError, write_error
from imgbuild.report.tables import short_name
from imgbuild.smoke.checks import FileRow, SmokeReport

STATUS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}


def _cell(row: FileRow) -> str:
    if row.ok:
        return "[green]patched[/]" if row.actual == "patched" else row.actual
    return f"[bold red]{row.actual}[/] (want {row.expected})"


def file_matrix(
    rows: Sequence[tuple[str, Sequence[FileRow]]], title: str = "image x file (read from the image)"
) -> Table:
    """One row per image, one column per file, like section 3 of the deployment report."""
    paths = list(dict.fromkeys(r.path for _, files in rows for r in files))
    table = Table(title=title)
    table.add_column("image", no_wrap=True)
    for p in paths:
        table.add_column(short_name(p, paths))
    for name, files in rows:
        by_path = {r.path: r for r in files}
        table.add_row(name, *(_cell(by_path[p]) if p in by_path else "-" for p in paths))
    return table


def checks_table(report: SmokeReport) -> Table:
    table = Table(title=f"smoke {report.image} ({report.platform}, {report.image_id[7:19]})")
    for col in ("group", "check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        if c.group == "files":
            continue  # shown in the matrix
        table.add_row(c.group, c.name, STATUS.get(c.status, c.status), c.detail)
    files = [c for c in report.checks if c.group == "files"]
    bad = [c for c in files if c.status == "fail"]
    table.add_row(
        "files",
        f"{len(files)} planned files",
        STATUS["fail" if bad else "pass"],
        "; ".join(f"{c.name}: {c.detail}" for c in bad) or "every sha256 matches its state",
    )
    return table


def junit(reports: Sequence[SmokeReport]) -> bytes:
    suites = ET.Element("testsuites", name="imgbuild smoke")
    for r in reports:
        skipped = sum(1 for c in r.checks if c.status == "skip")
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"smoke {r.image}",
            tests=str(len(r.checks)),
            failures=str(len(r.failures)),
            errors="0",
            skipped=str(skipped),
            time=f"{sum(c.seconds for c in r.checks):.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for k, v in (("image_id", r.image_id), ("platform", r.platform), ("variant", r.variant or "")):
            ET.SubElement(props, "property", name=k, value=v)
        for c in r.checks:
            cls = f"smoke.{r.variant or 'image'}.{c.group}"
            case = ET.SubElement(suite, "testcase", classname=cls, name=c.name, time=f"{c.seconds:.3f}")
            if c.status == "fail":
                ET.SubElement(case, "failure", message=c.detail[:500]).text = c.detail
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail[:500])
    ET.indent(suites)
    text: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return text + b"\n"


def check_junit_path(path: Path) -> None:
    """Refuse an unwritable --junit FILE before anything is built, not after."""
    parent = Path(os.path.abspath(path)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=f".{path.name}.", dir=parent):
            pass
    except OSError as exc:
        raise write_error(path, exc, "write the JUnit report to") from exc
    if path.is_dir():
        raise UsageError(f"--junit {path} is a directory", hint="pass a file name, e.g. smoke.xml")


def write_junit(path: Path, reports: Sequence[SmokeReport]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(junit(reports))
    except OSError as exc:
        raise write_error(path, exc, "write the JUnit report to") from exc
