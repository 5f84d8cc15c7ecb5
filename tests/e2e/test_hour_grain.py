"""Hour grain end to end: a request in Los Angeles time, a session in New York time, Delta storing UTC.

2024-03-10 is the spring-forward day in both zones, so the Los Angeles day has 23 hours. Every stage keys
partitions the way the plan does (``2024-03-10T03:00:00-07:00``), whatever zone Spark renders in.
"""

from datetime import datetime, timezone

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import StrayRowsError
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import write_request

HITS = StructType([StructField("id", IntegerType(), False), StructField("h", TimestampType(), True),
                   StructField("v", IntegerType(), True)])


def utc(day: int, hour: int) -> datetime:
    return datetime(2024, 3, day, hour, tzinfo=timezone.utc)


# Los Angeles: 2024-03-10 00:00 PST is 08:00Z; 03:00 PDT is 10:00Z; 23:00 PDT is 06:00Z on the 11th.
TARGET = [(8, utc(10, 7), 8), (1, utc(10, 8), 1), (2, utc(10, 10), 2), (3, utc(10, 10), 3), (9, utc(11, 7), 9)]
SOURCE = TARGET + [(4, utc(11, 6), 4)]


def hits_request(tmp_path, db, sql):
    sql_file = tmp_path / "hits.sql"
    sql_file.write_text(sql)
    suite = tmp_path / "hits.json"
    suite.write_text('{"name": "hits", "expectations": [{"type": "expect_column_values_to_be_unique", '
                     '"kwargs": {"column": "id"}}]}')
    src = {"table": f"{db}.hits_src", "partition_column": "h"}
    return write_request(
        tmp_path / "hits.yml", owner="ana@example.com", reason="TEST-3: hourly recompute",
        target={"table": f"{db}.hits", "partition_column": "h", "grain": "hour"},
        range={"start": "2024-03-10", "end": "2024-03-10"}, time_zone="America/Los_Angeles",
        strategy="recompute", source={"sql": str(sql_file)}, keys=["id"], expectations=str(suite),
        reconciliation=[{"name": "rows", "metric": "count(*)", "source": {**src, "metric": "count(*)"}},
                        {"name": "v_times_ten", "metric": "sum(v)", "source": {**src, "metric": "sum(v) * 10"}}],
        metric_rules=[{"name": "ids", "source": src, "metrics": {"min_max": ["id"]}}],
        diff_gate={"max_deleted": 0, "max_inserted": 1, "allowed_changed_columns": ["v"]},
    )


def make_hits(spark, db):
    for name, rows in (("hits", TARGET), ("hits_src", SOURCE)):
        spark.createDataFrame(rows, HITS).write.format("delta").partitionBy("h").saveAsTable(f"{db}.{name}")


def test_hourly_recompute_across_spring_forward_publishes_with_every_check_keyed_by_local_hour(
    spark, settings, db, tmp_path, runner
):
    make_hits(spark, db)
    sql = f"SELECT id, h, v * 10 AS v FROM {db}.hits_src WHERE h >= :range_start AND h < :range_end"
    plan, state = prepare(spark, settings, hits_request(tmp_path, db, sql))
    assert len(plan.partitions) == 23
    assert plan.partitions[0].key == "2024-03-10T00:00:00-08:00"
    assert plan.partitions[2].key == "2024-03-10T03:00:00-07:00"  # 02:00 does not exist that night
    assert (plan.partitions[2].current.rows, plan.total.rows) == (2, 3)

    result = runner.run(plan, state)

    assert result.status == "published"
    failed = [c for c in result.checks if not c.success]
    assert failed == []
    by_kind = {}
    for c in result.checks:
        by_kind.setdefault(c.kind, set()).add(c.partition)
    assert len(by_kind["reconciliation"]) == 23 and by_kind["post_publish"] == {p.key for p in plan.partitions} | {None}
    # checked from the commit's log entry: its hour values (UTC in Delta) keyed as the plan keys them
    assert {c.name for c in result.checks if c.kind == "post_publish"} == {
        "written_rows_and_checksum_equal_staging", "rows_equal_staging_and_files_replaced"}
    recon = {(c.name, c.partition): (c.observed, c.expected) for c in result.checks if c.kind == "reconciliation"}
    assert recon[("rows", "2024-03-10T03:00:00-07:00")] == ("2", "2")
    assert recon[("v_times_ten", "2024-03-10T23:00:00-07:00")] == ("40", "40")
    assert recon[("rows", "2024-03-10T01:00:00-08:00")] == ("None", "None")

    ledger = Ledger(spark, settings.ledger_schema)
    rows = {p["partition"]: p["rows"] for p in ledger.partitions(plan.run_id)}
    assert len(rows) == 23 and sum(rows.values()) == 4
    assert rows["2024-03-10T00:00:00-08:00"] == 1 and rows["2024-03-10T23:00:00-07:00"] == 1
    diffs = {d["partition"]: (d["inserted"], d["updated"]) for d in ledger.diffs(plan.run_id)}
    assert diffs == {"2024-03-10T00:00:00-08:00": (0, 1), "2024-03-10T03:00:00-07:00": (0, 2),
                     "2024-03-10T23:00:00-07:00": (1, 0)}

    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert "2024-03-10T23:00:00-07:00" in report

    expected = spark.createDataFrame(
        [(8, utc(10, 7), 8), (1, utc(10, 8), 10), (2, utc(10, 10), 20), (3, utc(10, 10), 30),
         (4, utc(11, 6), 40), (9, utc(11, 7), 9)], HITS)
    assert_df_equality(spark.table(f"{db}.hits"), expected, ignore_row_order=True, ignore_nullable=True)


def test_hourly_stray_rows_are_named_by_local_hour_and_nothing_is_written(spark, settings, db, tmp_path, runner):
    make_hits(spark, db)
    plan, state = prepare(spark, settings, hits_request(tmp_path, db, f"SELECT * FROM {db}.hits_src"))
    with pytest.raises(StrayRowsError, match=r"partition 2024-03-09T23:00:00-08:00 \(1 row\), "
                                             r"2024-03-11T00:00:00-07:00 \(1 row\); nothing written"):
        runner.run(plan, state)
    assert current_version(spark, f"{db}.hits") == 0
