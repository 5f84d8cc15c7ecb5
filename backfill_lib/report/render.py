"""The run report a reviewer reads: one self-contained HTML file and a Markdown summary for logs.

The HTML has inline CSS and an inline SVG chart, and links nothing outside the report folder except the GX Data
Docs index, by relative path; it opens from the file system with no server. Every string that comes from a
request, a table or a check is HTML-escaped.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from html import escape
from pathlib import Path
from urllib.parse import quote

from backfill_lib.core.checks import Check

Number = int | float | Decimal


@dataclass(frozen=True)
class PartitionRow:
    """One partition's line in the report: rows (counts) before and after, the diff counts, the gate result."""

    partition: str
    rows_before: int | None
    rows_after: int | None
    inserted: int | None = None
    deleted: int | None = None
    updated: int | None = None
    unchanged: int | None = None
    gate: str = ""


@dataclass(frozen=True)
class MetricPoint:
    """The chosen metric of one partition before (current target) and after (staged or published)."""

    partition: str
    before: Number | None
    after: Number | None


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows. ``checks`` holds passed and failed checks; the report splits them.

    ``data_docs`` is the GX Data Docs ``index.html``; a relative path is taken relative to the report folder.
    """

    run_id: str
    request_name: str
    owner: str
    reason: str
    strategy: str
    target_table: str
    target_version_seen: int | None
    status: str
    published_version: int | None = None
    #: until when (UTC) RESTORE to the pre-publish version stays possible, under the table's retention
    rollback_until: str | None = None
    plan_lines: tuple[str, ...] = ()
    partitions: tuple[PartitionRow, ...] = ()
    checks: tuple[Check, ...] = ()
    metric_name: str = ""
    metric: tuple[MetricPoint, ...] = ()
    data_docs: Path | None = None


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#1d2330;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #dde}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1.2em}dt{color:#667}dd{margin:0}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}th,td{padding:.25em .6em;border-bottom:1px solid #eef}
th{text-align:left;background:#f4f5f8}td.n{text-align:right}pre{background:#f4f5f8;padding:.8em;overflow-x:auto}
.status{padding:.1em .5em;border-radius:.3em;background:#dde}.status-published,.status-validated{background:#cfe8d4}
.status-failed,.status-rolled_back{background:#f5cccc}.fail{color:#a11}.chart{overflow-x:auto}
.before{fill:#9aa5b1}.after{fill:#2f6fbf}.axis{stroke:#667}.tick{font-size:11px;fill:#445}
"""


def _text(value: object) -> str:
    if value is None:
        return ""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def _e(value: object) -> str:
    return escape(_text(value), quote=True)


def _change(row: PartitionRow) -> int | None:
    if row.rows_before is None or row.rows_after is None:
        return None
    return row.rows_after - row.rows_before


def _columns(data: ReportData) -> list[tuple[str, object]]:
    """Header and cell getter of the partition table; diff and metric columns only when there are values."""
    cols = [("partition", lambda r, m: r.partition), ("rows before", lambda r, m: r.rows_before),
            ("rows after", lambda r, m: r.rows_after), ("change", lambda r, m: _change(r))]
    for name in ("inserted", "deleted", "updated", "unchanged"):
        if any(getattr(r, name) is not None for r in data.partitions):
            cols.append((name, lambda r, m, name=name: getattr(r, name)))
    if data.metric:
        cols += [(f"{data.metric_name} before", lambda r, m: m.before if m else None),
                 (f"{data.metric_name} after", lambda r, m: m.after if m else None)]
    cols.append(("gate", lambda r, m: r.gate))
    return cols


def _table_rows(data: ReportData) -> tuple[list[str], list[list[object]]]:
    points = {p.partition: p for p in data.metric}
    cols = _columns(data)
    return [h for h, _ in cols], [[get(r, points.get(r.partition)) for _, get in cols] for r in data.partitions]


def chart_svg(name: str, points: tuple[MetricPoint, ...]) -> str:
    """An inline SVG bar chart of ``name`` before versus after, one bar per partition and series.

    Bars are ``<rect class="bar before|after" data-partition=...>`` with the exact value in a ``<title>``
    tooltip; ``None`` values draw no bar. Geometry uses floats; the exact values are only in the text.
    """
    values = [float(v) for p in points for v in (p.before, p.after) if v is not None and math.isfinite(float(v))]
    lo, hi = min([0.0, *values]), max([0.0, *values])
    hi = hi if hi > lo else lo + 1
    left, top, plot_h, bar, gap = 70, 24, 180, 10, 8
    width = max(480, left + len(points) * (2 * bar + gap) + 20)
    height = top + plot_h + 90

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * plot_h

    zero = y(0.0)
    out = [f'<svg role="img" aria-label="{_e(name)} before and after by partition" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}">',
           f'<line class="axis" x1="{left}" y1="{zero:.1f}" x2="{width - 10}" y2="{zero:.1f}"/>']
    for v in sorted({lo, 0.0, hi}):
        out.append(f'<text class="tick" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_e(f"{v:.6g}")}</text>')
    # Label at most about 30 partitions so the names stay readable on long ranges.
    step = max(1, math.ceil(len(points) / 30))
    for i, p in enumerate(points):
        x = left + i * (2 * bar + gap) + gap / 2
        for j, (series, value) in enumerate((("before", p.before), ("after", p.after))):
            if value is None or not math.isfinite(float(value)):
                continue
            top_y, bottom_y = sorted((y(float(value)), zero))
            out.append(f'<rect class="bar {series}" data-partition="{_e(p.partition)}" data-series="{series}" '
                       f'x="{x + j * bar:.1f}" y="{top_y:.1f}" width="{bar}" height="{bottom_y - top_y:.1f}">'
                       f'<title>{_e(p.partition)} {series}: {_e(value)}</title></rect>')
        if i % step == 0:
            lx, ly = x + bar, top + plot_h + 14
            out.append(f'<text class="tick" x="{lx:.1f}" y="{ly}" text-anchor="end" '
                       f'transform="rotate(-45 {lx:.1f} {ly})">{_e(p.partition)}</text>')
    for j, series in enumerate(("before", "after")):
        out.append(f'<rect class="{series}" x="{left + j * 80}" y="4" width="10" height="10"/>'
                   f'<text class="tick" x="{left + j * 80 + 14}" y="13">{series}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _html_table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{_e(v)}</td>' if isinstance(v, (int, float, Decimal)) else f"<td>{_e(v)}</td>"
                         for v in row) + "</tr>\n"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _check_rows(checks: list[Check]) -> list[list[object]]:
    return [[c.kind, c.name, c.partition or (f"batch {c.batch}" if c.batch is not None else ""), c.observed,
             c.expected, c.message] for c in checks]


_CHECK_HEADERS = ["kind", "check", "partition", "observed", "expected", "message"]


def _docs_href(directory: Path, docs: Path) -> str:
    # Relative, so the report folder can be copied or archived with its Data Docs and still link.
    target = docs if docs.is_absolute() else directory / docs
    return quote(Path(os.path.relpath(target, directory)).as_posix())


def render_html(data: ReportData, directory: Path) -> str:
    """The HTML report as a string; ``directory`` is where it will live (for the Data Docs link)."""
    failed = [c for c in data.checks if not c.success]
    passed = [c for c in data.checks if c.success]
    status_class = re.sub(r"[^a-z_]", "", data.status.lower())
    facts = [("run ID", data.run_id), ("request", data.request_name), ("owner", data.owner), ("reason", data.reason),
             ("strategy", data.strategy), ("target table", data.target_table),
             ("target version seen", data.target_version_seen),
             ("published version", data.published_version if data.published_version is not None else "not published")]
    if data.rollback_until:
        facts.append(("rollback possible until", data.rollback_until))
    headers, rows = _table_rows(data)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Backfill report {_e(data.run_id)}</title><style>{_CSS}</style></head><body>",
        f'<h1>Backfill {_e(data.request_name)} <span class="status status-{status_class}">{_e(data.status)}</span></h1>',
        "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts) + "</dl>",
        "<h2>Plan</h2>", f"<pre>{_e(chr(10).join(data.plan_lines))}</pre>",
        "<h2>Partitions</h2>", _html_table(headers, rows),
    ]
    if data.metric:
        parts += [f"<h2>{_e(data.metric_name)}: before and after by partition</h2>",
                  f'<div class="chart">{chart_svg(data.metric_name, data.metric)}</div>']
    parts += ["<h2>Validation</h2>",
              f'<p class="{"fail" if failed else ""}">{len(passed)} of {len(data.checks)} checks passed.</p>']
    if data.data_docs is not None:
        parts.append(f'<p><a href="{_e(_docs_href(directory, Path(data.data_docs)))}">Great Expectations Data Docs</a></p>')
    if failed:
        parts += ["<h3>Failed checks</h3>", _html_table(_CHECK_HEADERS, _check_rows(failed))]
    if passed:
        parts += [f"<details><summary>Passed checks ({len(passed)})</summary>",
                  _html_table(_CHECK_HEADERS, _check_rows(passed)), "</details>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _md(value: object) -> str:
    # Markdown viewers render inline HTML, so user text is escaped there too; pipes would split table cells;
    # back-quotes (a quoted table name: sales.`order-lines`) would open code spans.
    return escape(_text(value), quote=False).replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def render_markdown(data: ReportData) -> str:
    """The Markdown summary: the facts, the plan, the partition table and the failed checks."""
    failed = [c for c in data.checks if not c.success]
    v = data.published_version
    published = f"published as version {v}" if v is not None else "not published"
    headers, rows = _table_rows(data)
    lines = [
        f"# Backfill {_md(data.request_name)}: {_md(data.status)}", "",
        f"- run ID: {_md(data.run_id)}", f"- owner: {_md(data.owner)}", f"- reason: {_md(data.reason)}",
        f"- strategy: {_md(data.strategy)}",
        f"- target: {_md(data.target_table)} (version seen {_md(data.target_version_seen)}, {published})",
        *([f"- rollback possible until: {_md(data.rollback_until)}"] if data.rollback_until else []), "",
        "## Plan", "", *[f"    {_md(line)}" for line in data.plan_lines], "",
        "## Partitions", "", "| " + " | ".join(_md(h) for h in headers) + " |",
        "|" + "---|" * len(headers), *["| " + " | ".join(_md(v) for v in row) + " |" for row in rows], "",
        "## Validation", "", f"{len(data.checks) - len(failed)} of {len(data.checks)} checks passed.", "",
        *[f"- {_md(c.describe())}" for c in failed],
        "", "Full report with chart: report.html", "",
    ]
    return "\n".join(lines)


def write_report(directory: str | Path, data: ReportData) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` into ``directory`` (created if missing), replacing old ones.

    Returns
    -------
    tuple of Path
        ``(html_path, markdown_path)``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    html_path, md_path = directory / "report.html", directory / "report.md"
    html_path.write_text(render_html(data, directory), encoding="utf-8")
    md_path.write_text(render_markdown(data), encoding="utf-8")
    return html_path, md_path
