"""Issue 43 item 12: a patch's report counts rows before and after over the same rows (every row of each
partition), and its metric too, and prints numbers as a person reads them."""

from decimal import Decimal

from backfill_lib.report.render import readable
from tests.strategies.test_strategies import D9, ID_DT_AMT, request, run, table


def test_a_patch_reports_the_whole_partition_before_and_after(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 10), (2, D9, 20), (3, D9, 30)])
    table(spark, f"{db}.s", ID_DT_AMT, [(1, D9, 11), (4, D9, 40)])  # one key corrected, one new
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end", "patch",
                   report_metric="sum(amt)")

    result = run(spark, settings, path)

    assert result.status == "published"
    report = (settings.runs_dir / result.plan.run_id / "report.md").read_text()
    # before: the partition's 3 rows (sum 60); after: the same partition as the MERGE left it, 4 rows (11+20+30+40),
    # not the 2 staged rows
    assert "| 2024-03-09 | 3 | 4 | 1 | 1 | 0 | 1 | 0 | 60 | 101 | passed |" in report
    assert "rows before and after: every row of each partition, in the target as the plan read it" in report
    assert spark.table(f"{db}.t").count() == 4


def test_numbers_read_as_a_person_reads_them():
    assert [readable(v) for v in (8293, 16.666666666666668, Decimal("46981.1188311688315"), 75.5, Decimal("1.50"),
                                  Decimal("0.000123"), -300, 2.0, "x", None)] == [
        "8,293", "16.67", "46,981.12", "75.5", "1.5", "0.000123", "-300", "2", "x", ""]
