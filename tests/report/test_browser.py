"""The HTML report as a reader sees it: rendered by real headless Chromium (Debian's ``chromium``; .ci/run installs
it), at 1400 x 1000 px, for a short range with a mart and for ten years of daily partitions.

The report has no script; the test renders a copy with a probe script appended, which writes the page's layout
measurements into ``<body data-*>`` attributes that ``--dump-dom`` prints with the DOM."""

import re
import shutil
import subprocess
from datetime import date, timedelta
from decimal import Decimal

import pytest

from backfill_lib.core.checks import Check
from backfill_lib.report.render import (
    ColumnChange,
    MartSection,
    MetricPoint,
    PartitionRow,
    ReportData,
    SampleRow,
    write_report,
)

PROBE = """<script>
(function () {
  var d = document.documentElement, b = document.body, w = window.innerHeight;
  function top(sel) { var e = document.querySelector(sel); return e ? Math.round(e.getBoundingClientRect().top) : -1; }
  var chart = document.querySelector("body > figure.chart svg");
  b.dataset.scrollWidth = d.scrollWidth;
  b.dataset.clientWidth = d.clientWidth;
  b.dataset.innerHeight = w;
  b.dataset.chartWidth = chart ? Math.round(chart.getBoundingClientRect().width) : -1;
  b.dataset.totalsTop = top("#run table.totals");
  b.dataset.samplesTop = top("#run table.samples");
  b.dataset.sampleBefore = document.querySelector("#run table.samples td.before").textContent;
})();
</script>"""


def day(i: int) -> str:
    return (date(2015, 1, 1) + timedelta(days=i)).isoformat()


def report(n: int, **changes) -> ReportData:
    """A run over ``n`` daily partitions: 1,000 rows before each; every 7th gains an inserted row, every 3rd has 5
    updated rows, the rest are unchanged."""
    rows = tuple(PartitionRow(day(i), 1000, 1000 + (i % 7 == 0), int(i % 7 == 0), 0, 5 * (i % 3 == 0),
                              1000 - 5 * (i % 3 == 0), "passed") for i in range(n))
    samples = [SampleRow(day(3), "updated", {"id": "42", "dt": day(3)}, {"amount": "10.50", "note": "same"},
                         {"amount": "12.75", "note": "same"}, h=-900)]
    samples += [SampleRow(day(7 * k), "inserted", {"id": str(10_000 + k), "dt": day(7 * k)}, None,
                          {"amount": f"{k}.00", "note": "x" * 300}, h=-800 + k) for k in range(19)]
    fields = dict(
        run_id="20260101T000000Z-browser-a1b2c3", request_name="fix_amounts", owner="ana@example.com",
        reason="DEMO-21: amounts were rounded", strategy="recompute", target_table="sales.orders",
        target_version_seen=41, pre_publish_version=42, published_version=43, status="published",
        rollback_until="2026-01-08 00:00 UTC (from the table's retention settings)",
        plan_lines=(f"{n} partitions in {max(1, n // 30)} batches",), partitions=rows,
        checks=(Check("diff", "diff.max_deleted", False, day(0), 0, "1", "0", f"{day(0)}: 1 deleted keys, at most 0 allowed"),
                *[Check("expectation", "id not null", True, day(i)) for i in range(n)]),
        metric_name="sum(amount)",
        metric=tuple(MetricPoint(day(i), Decimal(1000 + i % 50), Decimal(1000 + i % 50 + (i % 3 == 0)))
                     for i in range(n)),
        columns=(ColumnChange("amount", sum(r.updated for r in rows), Decimal("2750.25")), ColumnChange("note", 3),
                 ColumnChange("qty", 0, Decimal(0))),
        samples=tuple(samples),
    )
    return ReportData(**{**fields, **changes})


def dump_dom(tmp_path, data: ReportData) -> tuple[str, dict[str, str]]:
    """Chromium's DOM of ``data``'s report (with the probe) after load, and the probe's measurements."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` as root (.ci/run does it)")
    html, _ = write_report(tmp_path / "report", data)
    page = html.read_text()
    assert "<script" not in page  # the report itself runs nothing
    probe = html.with_name("probe.html")
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", done.stdout).group(1)
    return done.stdout, dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body))


def total(dom: str, name: str, scope: str = r'<section id="run">') -> str:
    start = dom.index(scope)
    return re.search(rf'<td data-total="{name}" data-value="[^"]*">([^<]*)</td>', dom[start:]).group(1)


def assert_fits(probe: dict[str, str]) -> None:
    # No sideways scrolling at 1400 px, the chart fills the page's width, and the totals and the samples begin
    # on the first screen.
    assert int(probe["scroll-width"]) <= int(probe["client-width"]), probe
    assert 900 <= int(probe["chart-width"]) <= int(probe["client-width"]), probe
    assert 0 < int(probe["totals-top"]) < int(probe["samples-top"]) < int(probe["inner-height"]), probe


def test_ten_years_of_daily_partitions_fit_the_page_with_the_totals_and_samples_first(tmp_path):
    n = 3650
    dom, probe = dump_dom(tmp_path, report(n))

    assert_fits(probe)
    assert total(dom, "rows_before") == "3,650,000"
    assert total(dom, "inserted") == f"{len(range(0, n, 7)):,}" == "522"
    assert total(dom, "updated") == f"{5 * len(range(0, n, 3)):,}" == "6,085"
    assert total(dom, "unchanged") == f"{1000 * n - 6085:,}"
    # the first sample (smallest key hash) is the update of key 42: only its changed column, before and after
    first = re.search(r'<tbody class="sample"[^>]*data-key="id=42, dt=2015-01-04"[^>]*>(.*?)</tbody>', dom, re.S).group(1)
    assert re.search(r'<td class="column">amount</td><td class="before">10\.50</td><td class="after">12\.75</td>', first)
    assert "note" not in first and probe["sample-before"] == "10.50"
    assert dom.count('<tbody class="sample"') == 20
    # ten years as lines across the page: one point per partition in each series, changed partitions marked
    chart = re.search(r'<svg class="line-chart"[^>]*data-partitions="3650"', dom)
    assert chart
    after = re.search(r'<path class="line after"[^>]*d="([^"]*)"', dom).group(1)
    assert len(re.findall(r"[ML]", after)) == n
    assert '<details class="partitions">' in dom  # the long table is folded
    assert dom.index('class="fail checks-summary">1 of 3,651 checks failed.') < dom.index("<svg")


def test_ten_partitions_and_a_mart_in_one_report(tmp_path):
    monthly = report(1, request_name="fix_amounts mart", target_table="sales.orders_monthly",
                     run_id="20260101T000000Z-browser-a1b2c3__m0", published_version=8, pre_publish_version=7,
                     target_version_seen=7, samples=(), checks=())
    data = report(10, marts=(MartSection("sales.orders_monthly", monthly.run_id, monthly),
                             MartSection("sales.orders_yearly", "20260101T000000Z-browser-a1b2c3__m1")))
    dom, probe = dump_dom(tmp_path, data)

    assert_fits(probe)
    assert total(dom, "rows_after") == "10,002"  # partitions 0 and 7 gained a row
    assert total(dom, "updated") == "20"
    assert re.search(r'<td class="before">10\.50</td><td class="after">12\.75</td>', dom)
    run, mart = dom.split('<section class="mart" id="mart-0"', 1)
    assert len(re.findall(r'<rect class="bar after"', run)) == 10
    assert "seen by the plan 41 · before publish 42 · published 43" in run
    assert total(mart, "rows_before", 'data-table="sales.orders_monthly"') == "1,000"
    assert len(re.findall(r'<rect class="bar after" data-partition="2015-01-01"', mart)) == 1  # the mart's chart
    assert '<span class="status status-published">published</span>' in mart
    assert "Not run (run 20260101T000000Z-browser-a1b2c3__m1)" in dom
