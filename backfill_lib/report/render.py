"""The run report a reviewer reads: one self-contained HTML file and a Markdown summary for logs.

The HTML's first screen answers "what changed, and is it right": status, versions and rollback horizon; the
totals (rows before and after, inserted, deleted, updated, unchanged); per column the rows changed and the sum of
the absolute change; a sample of changed rows before and after, by key; the checks, failures first. Below come the
chart (scaled to the page's width at any number of partitions: bars up to :data:`BAR_CHART_LIMIT` partitions, lines
beyond), the plan, the partition table (folded when long) and one section per downstream mart. It has inline CSS
and inline SVG, no script, and links nothing outside the report folder except the GX Data Docs index, by relative
path; it opens from the file system with no server. Every string that comes from a request, a table or a check is
HTML-escaped.
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
class ColumnChange:
    """One value column over the whole run: in how many updated rows it changed and, for a numeric column, the sum
    of ``|after - before|`` over them (``None``: not numeric, or a decimal sum past 38 digits in a partition)."""

    column: str
    rows_changed: int
    abs_change: Decimal | None = None


@dataclass(frozen=True)
class SampleRow:
    """One changed row, before and after (see :attr:`backfill_lib.validate.diff.PartitionDiff.samples`): ``key``
    maps the key and partition columns to their text, ``before``/``after`` every value column (``None``: the key
    is not on that side, i.e. inserted or deleted); ``h`` is the key hash that chose it."""

    partition: str
    change: str
    key: dict[str, str | None]
    before: dict[str, str | None] | None
    after: dict[str, str | None] | None
    h: int = 0


@dataclass(frozen=True)
class MartSection:
    """A downstream mart of the run: its table, its child run's ID and that run's report (``None``: not run)."""

    table: str
    run_id: str
    report: ReportData | None = None


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
    pre_publish_version: int | None = None
    #: per value column, from the diff by key; empty when no diff was computed
    columns: tuple[ColumnChange, ...] = ()
    #: at most :data:`SAMPLE_LIMIT` changed rows, in the order shown
    samples: tuple[SampleRow, ...] = ()
    #: whether a diff by key was computed (else the diff counts, columns and samples are unknown)
    diffed: bool = True
    marts: tuple[MartSection, ...] = ()


#: the most changed rows a report shows
SAMPLE_LIMIT = 20
#: the most partitions drawn as bars; a longer range is drawn as lines across the page's width
BAR_CHART_LIMIT = 36
#: the most partitions listed in an open table; a longer list is folded in a <details>
OPEN_TABLE_LIMIT = 31
#: the most value columns a sample of an inserted or deleted row lists
SAMPLE_COLUMNS = 12
#: the most characters of one value a sample shows (the whole value is in its tooltip)
VALUE_CHARS = 120
#: the most failed checks listed openly; more are folded
OPEN_FAILED_LIMIT = 50

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.2em auto;max-width:1100px;color:#1d2330;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #dde}h3{font-size:1.05em}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr) max-content minmax(0,1fr);gap:.1em 1.2em;margin:.4em 0}
dt{color:#667}dd{margin:0}th{white-space:nowrap}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;max-width:100%}
th,td{padding:.2em .6em;border-bottom:1px solid #eef;overflow-wrap:anywhere;vertical-align:top}
th{text-align:left;background:#f4f5f8}td.n,th.n{text-align:right}pre{background:#f4f5f8;padding:.8em;overflow-x:auto}
dd,p,li,summary{overflow-wrap:anywhere}
.status{padding:.1em .5em;border-radius:.3em;background:#dde}.status-published,.status-validated{background:#cfe8d4}
.status-failed,.status-rolled_back{background:#f5cccc}.fail{color:#a11}.ok{color:#176a2c}.muted{color:#667}
.totals td{font-size:1.25em;text-align:right}.null{color:#99a;font-style:italic}
.samples{table-layout:fixed;width:100%}.samples tbody{border-top:2px solid #dde}.samples td.before{background:#fbf1f1}.samples td.after{background:#eef6ee}
.chart svg{max-width:100%;height:auto;display:block}
.before{fill:#9aa5b1}.after{fill:#2f6fbf}.axis{stroke:#667}.tick{font-size:11px;fill:#445}
.line{fill:none;stroke-width:1.4}.line.before{stroke:#b5bec8;stroke-width:3.5}.line.after{stroke:#2f6fbf}
.changed{fill:#d9822b}.grid{stroke:#eef}
.mart{border-left:3px solid #dde;padding-left:1em;margin-top:1.5em}
"""


def _text(value: object) -> str:
    if value is None:
        return ""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def _e(value: object) -> str:
    return escape(_text(value), quote=True)


def readable(value: object) -> str:
    """A number as a person reads it in a table: integers with thousands separators (``8,293``); other numbers
    rounded to 2 decimals without trailing zeros (``16.67``, ``46,981.12``, ``75.5``), or to 3 significant
    digits when smaller than 0.01 (``0.000123``); NaN and infinities as Python writes them. Anything else as
    :func:`_text`. The exact values stay in the run's JSON and the ledger."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return _text(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not (value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)):
        return str(value)
    if value == value.to_integral_value() if isinstance(value, Decimal) else value.is_integer():
        return f"{int(value):,}"
    if abs(value) < Decimal("0.01"):
        return format(value, ".3g")
    return f"{value:,.2f}".rstrip("0").rstrip(".")


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
    """An inline SVG bar chart of ``name`` before versus after, one bar per partition and series, across a fixed
    width of 1000 units (the page scales it to its own width; meant for up to :data:`BAR_CHART_LIMIT` partitions).

    Bars are ``<rect class="bar before|after" data-partition=...>`` with the exact value in a ``<title>``
    tooltip; ``None`` values draw no bar. Geometry uses floats; the exact values are only in the text.
    """
    values = [float(v) for p in points for v in (p.before, p.after) if v is not None and math.isfinite(float(v))]
    lo, hi = min([0.0, *values]), max([0.0, *values])
    hi = hi if hi > lo else lo + 1
    width, left, top, plot_h = 1000, 70, 24, 180
    slot = (width - left - 20) / max(len(points), 1)
    bar = min(24.0, slot * 0.38)
    gap = slot - 2 * bar
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
                       f'x="{x + j * bar:.1f}" y="{top_y:.1f}" width="{bar:.1f}" height="{bottom_y - top_y:.1f}">'
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
        "<tr>" + "".join(f'<td class="n">{escape(readable(v))}</td>' if isinstance(v, (int, float, Decimal))
                         else f"<td>{_e(v)}</td>"
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


def _count(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def _status_badge(status: str) -> str:
    return f'<span class="status status-{re.sub(r"[^a-z_]", "", status.lower())}">{_e(status)}</span>'


#: the totals the first screen shows: (data-total name, header, PartitionRow attribute)
_TOTALS = (("rows_before", "rows before", "rows_before"), ("rows_after", "rows after", "rows_after"),
           ("inserted", "inserted", "inserted"), ("deleted", "deleted", "deleted"),
           ("updated", "updated", "updated"), ("unchanged", "unchanged", "unchanged"))


def totals(data: ReportData) -> dict[str, tuple[int | None, int]]:
    """Per total of :data:`_TOTALS`: the sum over the partitions that have the count (``None`` when none has it,
    or for a diff count when no diff was computed) and how many partitions lack it."""
    out = {}
    for name, _, attr in _TOTALS:
        values = [getattr(r, attr) for r in data.partitions]
        known = [v for v in values if v is not None]
        diff_count = attr not in ("rows_before", "rows_after")
        out[name] = (None if not known or (diff_count and not data.diffed) else sum(known), len(values) - len(known))
    return out


def _versions(data: ReportData) -> str:
    def v(x: int | None) -> str:
        return "—" if x is None else str(x)

    return (f"seen by the plan {v(data.target_version_seen)} · before publish {v(data.pre_publish_version)} · "
            f"published {v(data.published_version) if data.published_version is not None else 'not published'}")


def _facts_html(data: ReportData) -> str:
    failed = sum(not c.success for c in data.checks)
    checks = (f"{failed:,} of {len(data.checks):,} failed" if failed else f"all {len(data.checks):,} passed"
              if data.checks else "none recorded")
    facts = [("target table", data.target_table), ("run ID", data.run_id), ("versions", _versions(data)),
             ("request", data.request_name), ("rollback possible until", data.rollback_until or "—"),
             ("owner", data.owner), ("checks", checks), ("strategy", data.strategy), ("reason", data.reason)]
    return '<dl class="facts">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts) + "</dl>"


def _totals_html(data: ReportData) -> str:
    sums = totals(data)
    head = "".join(f'<th class="n">{_e(h)}</th>' for _, h, _ in _TOTALS)
    cells = "".join(f'<td data-total="{n}" data-value="{_e(sums[n][0])}">{_count(sums[n][0])}</td>'
                    for n, _, _ in _TOTALS)
    parts = [f'<table class="totals"><thead><tr>{head}</tr></thead><tbody><tr>{cells}</tr></tbody></table>']
    changed = sum(1 for r in data.partitions if (r.inserted or 0) + (r.deleted or 0) + (r.updated or 0))
    line = f"{len(data.partitions):,} partitions"
    if data.diffed and any(r.updated is not None for r in data.partitions):
        line += f", {changed:,} with changed rows"
    missing = sorted({f"{h} of {sums[n][1]:,}" for n, h, _ in _TOTALS if sums[n][1] and sums[n][0] is not None})
    if missing:
        line += f"; partitions without a count, left out of the sums: {', '.join(missing)}"
    if not data.diffed:
        line += ("; no diff by key was recorded (the run stopped before it, or the keys are not on both sides), "
                 "so changed rows are not known")
    return "\n".join(parts + [f'<p class="muted">{_e(line)}.</p>'])


def _columns_html(data: ReportData) -> str:
    if not data.columns:
        return ""
    changed = sorted((c for c in data.columns if c.rows_changed), key=lambda c: (-c.rows_changed, c.column))
    same = [c.column for c in data.columns if not c.rows_changed]
    out = []
    if changed:
        rows = "".join(
            f'<tr data-column="{_e(c.column)}"><td>{_e(c.column)}</td><td class="n">{c.rows_changed:,}</td>'
            + (f'<td class="n" title="{_e(c.abs_change)}">{escape(readable(c.abs_change))}</td>' if c.abs_change is not None else
               '<td class="n muted" title="not numeric, or a decimal sum past 38 digits">n/a</td>') + "</tr>"
            for c in changed)
        out.append('<table class="columns"><thead><tr><th>column</th><th class="n">rows changed</th>'
                   f'<th class="n">sum of |after − before|</th></tr></thead><tbody>{rows}</tbody></table>')
        if any(c.abs_change is None for c in changed):
            out.append('<p class="muted">n/a: not a numeric column (its number of distinct new values is not counted: '
                       "that would take another scan of the staged rows), or a decimal column whose changes in a "
                       "partition add up past the 38 digits Spark's decimals hold.</p>")
    else:
        out.append("<p>No value column changed in any row.</p>")
    if same:
        names = ", ".join(same[:30]) + (f" and {len(same) - 30} more" if len(same) > 30 else "")
        out.append(f'<p class="muted">Unchanged in every row: {_e(names)}.</p>')
    return "\n".join(out)


def _value_html(value: str | None, css: str) -> str:
    if value is None:
        return f'<td class="{css}"><span class="null">NULL</span></td>'
    shown = value if len(value) <= VALUE_CHARS else value[:VALUE_CHARS] + "…"
    title = f' title="{_e(value)}"' if shown != value else ""
    return f'<td class="{css}"{title}>{_e(shown)}</td>'


def _sample_lines(sample: SampleRow) -> tuple[list[str], int]:
    """The value columns a sample lists (an update: those that changed) and how many more it leaves out."""
    side = sample.after if sample.after is not None else sample.before or {}
    columns = list(side)
    if sample.before is not None and sample.after is not None:
        columns = [c for c in columns if sample.before.get(c) != sample.after.get(c)] or columns
    return columns[:SAMPLE_COLUMNS], max(0, len(columns) - SAMPLE_COLUMNS)


def _samples_html(data: ReportData, changed_rows: int | None) -> str:
    if not data.samples:
        if not data.diffed:
            return "<p>No sample: no diff by key was recorded.</p>"
        return "<p>No changed row to show.</p>" if not changed_rows else \
            '<p class="muted">No sample of changed rows was recorded for this run.</p>'
    body = []
    for s in data.samples:
        columns, more = _sample_lines(s)
        lines = [(c, (s.before or {}).get(c) if s.before is not None else None,
                  s.after.get(c) if s.after is not None else None) for c in columns]
        span = len(lines) + (1 if more else 0) or 1
        key = ", ".join(f"{k}={'NULL' if v is None else v}" for k, v in s.key.items())
        rows = []
        for i, (column, before, after) in enumerate(lines or [("", None, None)]):
            lead = (f'<td class="key" rowspan="{span}">{_e(key)}</td><td class="change" rowspan="{span}">{_e(s.change)}'
                    "</td>") if i == 0 else ""
            cells = (('<td class="before muted">—</td>' if s.before is None or not column else _value_html(before, "before"))
                     + ('<td class="after muted">—</td>' if s.after is None or not column else _value_html(after, "after")))
            rows.append(f'<tr>{lead}<td class="column">{_e(column)}</td>{cells}</tr>')
        if more:
            rows.append(f'<tr><td class="muted" colspan="3">and {more} more columns</td></tr>')
        body.append(f'<tbody class="sample" data-partition="{_e(s.partition)}" data-key="{_e(key)}" '
                    f'data-change="{_e(s.change)}">' + "".join(rows) + "</tbody>")
    of = f" of {changed_rows:,} changed" if changed_rows is not None else ""
    return "\n".join([
        f'<p class="muted">{len(data.samples)}{of} rows, chosen by a hash of the key (the same run always shows the '
        "same rows); an update lists the columns that changed.</p>",
        '<table class="samples"><colgroup><col style="width:22%"><col style="width:8%"><col style="width:14%">'
        '<col style="width:28%"><col style="width:28%"></colgroup>'
        "<thead><tr><th>key</th><th>change</th><th>column</th><th>before</th><th>after</th></tr></thead>",
        *body, "</table>"])


def _checks_html(data: ReportData, directory: Path | None) -> str:
    failed = [c for c in data.checks if not c.success]
    passed = [c for c in data.checks if c.success]
    if not data.checks:
        out = ["<p>No checks recorded.</p>"]
    elif failed:
        out = [f'<p class="fail checks-summary">{len(failed):,} of {len(data.checks):,} checks failed.</p>']
    else:
        out = [f'<p class="ok checks-summary">All {len(data.checks):,} checks passed.</p>']
    kinds: dict[str, list[int]] = {}
    for c in data.checks:
        kinds.setdefault(c.kind, [0, 0])[0 if c.success else 1] += 1
    if len(kinds) > 1:
        out.append(_html_table(["kind", "passed", "failed"], [[k, p, f] for k, (p, f) in kinds.items()]))
    if failed:
        out += ['<h4 class="fail">Failed checks</h4>', _html_table(_CHECK_HEADERS, _check_rows(failed[:OPEN_FAILED_LIMIT]))]
        if len(failed) > OPEN_FAILED_LIMIT:
            out += [f"<details><summary>{len(failed) - OPEN_FAILED_LIMIT:,} more failed checks</summary>",
                    _html_table(_CHECK_HEADERS, _check_rows(failed[OPEN_FAILED_LIMIT:])), "</details>"]
    if passed:
        out += [f"<details><summary>Passed checks ({len(passed):,})</summary>",
                _html_table(_CHECK_HEADERS, _check_rows(passed)), "</details>"]
    if data.data_docs is not None and directory is not None:
        out.append(f'<p><a href="{_e(_docs_href(directory, Path(data.data_docs)))}">Great Expectations Data Docs</a></p>')
    return "\n".join(out)


def _summary_html(data: ReportData, h: str, directory: Path | None) -> list[str]:
    """The first screen of a run (the target's, or a mart's): facts, totals, columns, samples, checks."""
    changed_rows = None
    sums = totals(data)
    if all(sums[n][0] is not None for n in ("inserted", "deleted", "updated")):
        changed_rows = sums["inserted"][0] + sums["deleted"][0] + sums["updated"][0]
    return [_facts_html(data), f"<{h}>What changed</{h}>", _totals_html(data), _columns_html(data),
            f"<{h}>Sample of changed rows</{h}>", _samples_html(data, changed_rows),
            f"<{h}>Checks</{h}>", _checks_html(data, directory)]


def line_chart_svg(name: str, points: tuple[MetricPoint, ...]) -> str:
    """An inline SVG line chart of ``name`` before versus after, one point per partition across a fixed width (so
    it scales to the page at any number of partitions), with a strip marking the partitions whose value changed
    and about eight partition labels.

    Lines are ``<path class="line before|after">``, broken where a value is ``None``; changed partitions are
    ``<rect class="changed">`` runs, each with its first and last partition in a ``<title>``."""
    n = len(points)
    values = [float(v) for p in points for v in (p.before, p.after) if v is not None and math.isfinite(float(v))]
    # Lines need no zero baseline: the axis spans the values (padded), so small changes stay visible.
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.05 if hi > lo else max(abs(hi), 1.0) * 0.05
    lo, hi = lo - pad, hi + pad
    width, left, right, top, plot_h = 1000, 70, 20, 24, 200
    plot_w = width - left - right
    strip_y = top + plot_h + 8
    label_y = strip_y + 24
    height = label_y + 10
    slot = plot_w / max(n, 1)

    def x(i: int) -> float:
        return left + (i + 0.5) * slot

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * plot_h

    def finite(v) -> bool:
        return v is not None and math.isfinite(float(v))

    out = [f'<svg class="line-chart" role="img" aria-label="{_e(name)} before and after by partition" '
           f'data-partitions="{n}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<line class="grid" x1="{left}" y1="{y(v):.1f}" x2="{width - right}" y2="{y(v):.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_e(f"{v:.6g}")}</text>')
    for series in ("before", "after"):
        d, run = [], 0
        for i, p in enumerate(points):
            value = getattr(p, series)
            if not finite(value):
                run = 0
                continue
            d.append(f"{'L' if run else 'M'}{x(i):.1f} {y(float(value)):.1f}")
            run += 1
            nxt = getattr(points[i + 1], series) if i + 1 < n else None
            if run == 1 and not finite(nxt):
                d.append("h0.01")  # a lone point: a round cap draws it as a dot
        out.append(f'<path class="line {series}" data-series="{series}" stroke-linecap="round" '
                   f'vector-effect="non-scaling-stroke" d="{" ".join(d)}"/>')
    i = 0
    while i < n:  # runs of partitions whose value changed, merged into one mark each
        if points[i].before == points[i].after:
            i += 1
            continue
        j = i
        while j + 1 < n and points[j + 1].before != points[j + 1].after:
            j += 1
        label = points[i].partition if i == j else f"{points[i].partition} .. {points[j].partition}"
        out.append(f'<rect class="changed" x="{left + i * slot:.2f}" y="{strip_y}" width="{max(slot * (j - i + 1), 1):.2f}" '
                   f'height="8"><title>{_e(label)}: {_e(name)} changed</title></rect>')
        i = j + 1
    count = min(n, 8)
    picks = sorted({round(k * (n - 1) / (count - 1)) for k in range(count)}) if count > 1 else [0] * count
    for k in picks:
        anchor = "start" if k == 0 and n > 1 else "end" if k == n - 1 and n > 1 else "middle"
        lx = left + k * slot if anchor == "start" else left + (k + 1) * slot if anchor == "end" else x(k)
        out.append(f'<text class="tick" x="{lx:.1f}" y="{label_y}" text-anchor="{anchor}">{_e(points[k].partition)}</text>')
    for j, (series, label) in enumerate((("before", "before"), ("after", "after"), ("changed", "changed"))):
        lx = left + j * 110
        mark = (f'<rect class="{series}" x="{lx}" y="4" width="12" height="10"/>' if series == "changed" else
                f'<line class="line {series}" x1="{lx}" y1="9" x2="{lx + 12}" y2="9"/>')
        out.append(mark + f'<text class="tick" x="{lx + 16}" y="13">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


def chart_html(name: str, points: tuple[MetricPoint, ...]) -> str:
    """The chart of ``points`` in a ``<figure class="chart">``: bars up to :data:`BAR_CHART_LIMIT` partitions, lines
    beyond; either scales down to the page's width, so the page never scrolls sideways. Empty without points."""
    if not points:
        return ""
    svg = chart_svg(name, points) if len(points) <= BAR_CHART_LIMIT else line_chart_svg(name, points)
    return f'<figure class="chart" data-partitions="{len(points)}">{svg}</figure>'


def _partitions_html(data: ReportData) -> str:
    headers, rows = _table_rows(data)
    table = _html_table(headers, rows)
    if len(rows) <= OPEN_TABLE_LIMIT:
        return table
    return (f'<details class="partitions"><summary>{len(rows):,} partitions: rows, diff and gate of each</summary>'
            f"{table}</details>")


def _below_html(data: ReportData, h: str) -> list[str]:
    """Below the first screen: the chart, the plan and the partition table."""
    parts = []
    if data.metric:
        parts.append(f"<{h}>{_e(data.metric_name)}: before and after by partition</{h}>")
        known = any(p.before is not None or p.after is not None for p in data.metric)
        parts.append(chart_html(data.metric_name, data.metric) if known else
                     '<p class="muted">No value known on either side: the tables were not read (see the plan).</p>')
    return parts + [f"<{h}>Plan</{h}>", f"<pre>{_e(chr(10).join(data.plan_lines))}</pre>",
                    f"<{h}>Partitions</{h}>", _partitions_html(data)]


def _mart_html(index: int, mart: MartSection, directory: Path) -> list[str]:
    head = f'<section class="mart" id="mart-{index}" data-table="{_e(mart.table)}"><h2>Mart {_e(mart.table)} '
    if mart.report is None:
        return [head + "</h2>", f"<p>Not run (run {_e(mart.run_id)}): a mart runs after the target is published, "
                "in dependency order.</p></section>"]
    r = mart.report
    return [head + _status_badge(r.status) + "</h2>", *_summary_html(r, "h3", None), *_below_html(r, "h3"),
            "</section>"]


def render_html(data: ReportData, directory: Path) -> str:
    """The HTML report as a string; ``directory`` is where it will live (for the Data Docs link)."""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Backfill report {_e(data.run_id)}</title><style>{_CSS}</style></head><body>",
        '<section id="run">',
        f"<h1>Backfill {_e(data.request_name)} {_status_badge(data.status)}</h1>",
        *_summary_html(data, "h2", directory), "</section>",
        *_below_html(data, "h2"),
    ]
    for i, mart in enumerate(data.marts):
        parts += _mart_html(i, mart, directory)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _md(value: object) -> str:
    # Markdown viewers render inline HTML, so user text is escaped there too; pipes would split table cells;
    # back-quotes (a quoted table name: sales.`order-lines`) would open code spans.
    return escape(_text(value), quote=False).replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _markdown_changes(data: ReportData) -> list[str]:
    """The totals and the changed columns as Markdown lines."""
    sums = totals(data)
    lines = ["| " + " | ".join(h for _, h, _ in _TOTALS) + " |", "|" + "---:|" * len(_TOTALS),
             "| " + " | ".join(_count(sums[n][0]) for n, _, _ in _TOTALS) + " |", ""]
    changed = sorted((c for c in data.columns if c.rows_changed), key=lambda c: (-c.rows_changed, c.column))
    if changed:
        lines += ["| column | rows changed | sum of abs(after - before) |", "|---|---:|---:|",
                  *[f"| {_md(c.column)} | {c.rows_changed:,} | {'n/a' if c.abs_change is None else _md(readable(c.abs_change))} |"
                    for c in changed], ""]
    return lines


def render_markdown(data: ReportData) -> str:
    """The Markdown summary: the facts, what changed (totals and changed columns), the plan, the partition table,
    the failed checks and each mart's status."""
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
        "## What changed", "", *_markdown_changes(data),
        "## Plan", "", *[f"    {_md(line)}" for line in data.plan_lines], "",
        "## Partitions", "", "| " + " | ".join(_md(h) for h in headers) + " |",
        "|" + "---|" * len(headers), *["| " + " | ".join(_md(readable(v)) for v in row) + " |" for row in rows], "",
        "## Validation", "", f"{len(data.checks) - len(failed)} of {len(data.checks)} checks passed.", "",
        *[f"- {_md(c.describe())}" for c in failed],
        *(["", "## Marts", ""] if data.marts else []),
        *[f"- {_md(m.table)} (run {_md(m.run_id)}): " + ("not run" if m.report is None else
          f"{_md(m.report.status)}, {sum(not c.success for c in m.report.checks)} of {len(m.report.checks)} checks "
          f"failed, published version {_md(m.report.published_version)}") for m in data.marts],
        "", "Full report with samples of changed rows, chart and marts: report.html", "",
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
