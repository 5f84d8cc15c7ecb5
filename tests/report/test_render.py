import re
import xml.etree.ElementTree as ET
from decimal import Decimal

from backfill_lib.core.checks import Check
from backfill_lib.report.render import MetricPoint, PartitionRow, ReportData, write_report

RUN_ID = "20240312T101500Z-fix-a1b2c3"


def data(tmp_path, **changes):
    fields = dict(
        run_id=RUN_ID,
        request_name="fix_daily_route_delays",
        owner="ana@example.com",
        reason='DEMO-1: <script>alert("x")</script> & more',
        strategy="recompute",
        target_table="demo.daily_route_delays",
        target_version_seen=7,
        status="validated",
        plan_lines=("3 partitions in 1 batch", "staging table backfill_staging.run_a1b2c3"),
        partitions=(
            PartitionRow("2013-01-01", 120, 120, 0, 0, 118, 2, "passed"),
            PartitionRow("2013-01-02", 130, 131, 1, 0, 125, 5, "passed"),
            PartitionRow("2013-01-03", 140, 139, 0, 1, 100, 39, "failed: 1 deleted keys, at most 0 allowed"),
        ),
        checks=(
            Check("diff", "diff.max_deleted", False, "2013-01-03", 0, "1", "0", "2013-01-03: 1 deleted keys, at most 0 allowed"),
            Check("reconciliation", "flights.row_count", True, "2013-01-01", 0, "120", "120"),
        ),
        metric_name="sum(arr_delay)",
        metric=(
            MetricPoint("2013-01-01", Decimal("1500"), Decimal("1200")),
            MetricPoint("2013-01-02", Decimal("-300"), Decimal("250")),
            MetricPoint("2013-01-03", 0, Decimal("75.5")),
        ),
        data_docs=tmp_path / "gx" / "index.html",
    )
    return ReportData(**{**fields, **changes})


def test_report_has_run_id_partition_rows_and_embedded_chart(tmp_path):
    html_path, md_path = write_report(tmp_path / "report", data(tmp_path))

    html = html_path.read_text()
    assert html_path == tmp_path / "report" / "report.html" and RUN_ID in html
    assert "<tr><td>2013-01-02</td><td class=\"n\">130</td><td class=\"n\">131</td><td class=\"n\">1</td>" in html
    assert "<td>failed: 1 deleted keys, at most 0 allowed</td>" in html
    svg = ET.fromstring(re.search(r"<svg .*?</svg>", html, re.S).group(0))  # well-formed, inline
    bars = [(r.get("data-partition"), r.get("data-series")) for r in svg.iter("rect") if "bar" in r.get("class")]
    assert sorted(bars) == sorted((p, s) for p in ("2013-01-01", "2013-01-02", "2013-01-03") for s in ("before", "after"))
    titles = {t.text for t in svg.iter("title")}
    assert "2013-01-02 before: -300" in titles and "2013-01-03 after: 75.5" in titles
    assert "http" not in html and "<img" not in html and "<link" not in html  # nothing to fetch
    assert '<a href="../gx/index.html">' in html

    md = md_path.read_text()
    assert RUN_ID in md
    assert "| 2013-01-03 | 140 | 139 | -1 | 0 | 1 | 100 | 39 | 0 | 75.5 | failed: 1 deleted keys, at most 0 allowed |" in md
    assert "- diff diff.max_deleted failed on partition 2013-01-03: 2013-01-03: 1 deleted keys, at most 0 allowed" in md


def test_user_text_is_escaped(tmp_path):
    html_path, md_path = write_report(tmp_path, data(tmp_path, request_name="<script>x</script>"))

    html = html_path.read_text()
    assert "<script" not in html
    assert "DEMO-1: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more" in html
    assert "Backfill &lt;script&gt;x&lt;/script&gt;" in html
    assert "<script" not in md_path.read_text()


def test_a_bar_grows_from_zero_and_missing_values_draw_none(tmp_path):
    points = (MetricPoint("a", 10, None), MetricPoint("b", -10, 5))
    html_path, _ = write_report(tmp_path, data(tmp_path, metric=points, data_docs=None))

    svg = ET.fromstring(re.search(r"<svg .*?</svg>", html_path.read_text(), re.S).group(0))
    bars = {(r.get("data-partition"), r.get("data-series")): r for r in svg.iter("rect") if "bar" in r.get("class")}
    assert set(bars) == {("a", "before"), ("b", "before"), ("b", "after")}
    up, down = bars[("a", "before")], bars[("b", "before")]
    # Values span -10..10 over 180 px: +10 ends at the top (y 24), -10 starts at zero (y 114) and goes down 90.
    assert (float(up.get("y")), float(up.get("height"))) == (24.0, 90.0)
    assert (float(down.get("y")), float(down.get("height"))) == (114.0, 90.0)


def test_column_totals_add_38_digit_sums_exactly_and_a_partition_without_a_sum_makes_the_total_unknown():
    from backfill_lib.report.run_report import column_changes

    nines = "9" * 38
    diffs = {
        "2024-03-10": {"changed_columns": '{"a": 1, "b": 1, "name": 2}', "abs_change": f'{{"a": "3", "b": "{nines}"}}'},
        # a decimal change past 38 digits: the diff left "a" out of this partition's sums
        "2024-03-11": {"changed_columns": '{"a": 2, "b": 1, "name": 0}', "abs_change": f'{{"b": "{nines}"}}'},
        "2024-03-12": {"changed_columns": '{"a": 0, "b": 0, "name": 0}', "abs_change": '{"a": "0", "b": "0"}'},
    }

    changes = {c.column: (c.rows_changed, c.abs_change) for c in column_changes(diffs)}

    assert changes == {"a": (3, None), "b": (2, Decimal("1" + "9" * 37 + "8")), "name": (2, None)}
