"""Issue 19, item 3: an order-dependent table (``depends_on_past``), recomputed for real on tiny Delta tables.

``totals(day, key, total)`` is a running total of ``events(day, key, amount)``: each day's total is its amount plus
the previous day's total *of the target itself*. The events were corrected from day 1 on; day 0 (outside the range)
holds the right base. One Spark test: the run without the flag stages wrong totals (each day reads the old previous
day), the run with it equals an independent window sum, also after a failure halfway through and a resume."""

from __future__ import annotations

from datetime import date

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegerType, LongType, StringType, StructField, StructType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import ConflictError, IntakeError
from backfill_lib.plan.explain import past_line
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import write_request

D0, D1, D2, D3 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 11)
EVENTS = StructType([StructField("day", DateType(), False), StructField("key", StringType(), False),
                     StructField("amount", IntegerType(), False)])
TOTALS = StructType([StructField("day", DateType(), True), StructField("key", StringType(), True),
                     StructField("total", LongType(), True)])
#: corrected events; the right totals: a 5, 7, 11, 12 and b 1, 4, 14, 21
CORRECTED = [(D0, "a", 5), (D0, "b", 1), (D1, "a", 2), (D1, "b", 3), (D2, "a", 4), (D2, "b", 10),
             (D3, "a", 1), (D3, "b", 7)]
#: day 0 right, days 1..3 wrong
OLD_TOTALS = [(D0, "a", 5), (D0, "b", 1), (D1, "a", 100), (D1, "b", 100), (D2, "a", 200), (D2, "b", 200),
              (D3, "a", 300), (D3, "b", 300)]


def totals_request(tmp_path, db: str, name: str, **extra):
    sql = tmp_path / "totals.sql"
    sql.write_text(
        f"SELECT e.day, e.key, CAST(e.amount + coalesce(p.total, 0) AS BIGINT) AS total\n"
        f"FROM {db}.events e LEFT JOIN {db}.totals p ON p.key = e.key AND p.day = date_sub(e.day, 1)\n"
        "WHERE e.day >= :range_start AND e.day < :range_end")
    return write_request(
        tmp_path / f"{name}.yml", owner="ana@example.com", reason="TEST-19: running totals",
        target={"table": f"{db}.totals", "partition_column": "day"},
        range={"start": D1.isoformat(), "end": D3.isoformat()}, time_zone="UTC", strategy="recompute",
        source={"sql": str(sql)}, keys=["day", "key"], **extra)


def test_a_running_total_recomputed_in_order_equals_a_window_sum_and_resumes_from_the_staged_day(
        spark, settings, db, tmp_path, make_runner, monkeypatch):
    from chispa import assert_df_equality

    from backfill_lib.core import faults

    spark.createDataFrame(CORRECTED, EVENTS).write.format("delta").saveAsTable(f"{db}.events")
    spark.createDataFrame(OLD_TOTALS, TOTALS).write.format("delta").partitionBy("day").saveAsTable(f"{db}.totals")
    by_key = Window.partitionBy("key").orderBy("day").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    expected = spark.table(f"{db}.events").select("day", "key", F.sum("amount").over(by_key).cast("bigint").alias("total"))
    assert sorted(r["total"] for r in expected.collect()) == [1, 4, 5, 7, 11, 12, 14, 21]

    # a source SQL that does not name the target (here: reads it through a view) cannot be redirected: exit 2
    spark.sql(f"CREATE VIEW {db}.totals_view AS SELECT * FROM {db}.totals")
    hidden = totals_request(tmp_path, db, "hidden", depends_on_past=True)
    (tmp_path / "totals.sql").write_text((tmp_path / "totals.sql").read_text().replace(f"{db}.totals ", f"{db}.totals_view "))
    with pytest.raises(IntakeError, match=rf"hidden.yml: field 'depends_on_past': .*totals.sql does not name the "
                                          rf"target {db}.totals directly"):
        prepare(spark, settings, hidden)

    # without the flag (the rule as it was: the source reads the target as the plan saw it), day N reads the old
    # day N-1: day 1 is right (day 0 is), days 2 and 3 are not; the plan says the source reads the target itself
    plain, state = prepare(spark, settings, totals_request(tmp_path, db, "plain"))
    assert [b.keys for b in plain.batches] == [("2024-03-09", "2024-03-10", "2024-03-11")]
    assert past_line(plain).startswith(f"the source SQL reads {db}.totals itself, at version {plain.target_version} ")
    result = make_runner().run(plain, state, until="validate")
    assert result.status == "validated"
    staged = {(r["day"], r["key"]): r["total"] for r in spark.table(plain.staging_table).collect()}
    assert (staged[(D1, "a")], staged[(D2, "a")], staged[(D3, "b")]) == (7, 104, 207)
    make_runner().leases.abandon(plain.run_id, "TEST-19: wrong totals, not published")  # releases its lease on the range

    # with it: one batch per day, in order; day 3's batch fails (a commit conflict that never clears) after days 1
    # and 2 are staged, and the resume reads the staged day 2 from the staging table, not the target's old one
    before = current_version(spark, f"{db}.totals")
    faults.reset()
    monkeypatch.setenv(faults.CONFLICT_ENV, "2024-03-11:always")
    plan, state = prepare(spark, settings, totals_request(tmp_path, db, "past", depends_on_past=True))
    assert [b.keys for b in plan.batches] == [("2024-03-09",), ("2024-03-10",), ("2024-03-11",)]
    with pytest.raises(ConflictError, match=r"staging batch 2 \[2024-03-11 \.\. 2024-03-11\]"):
        make_runner(conflict_attempts=2, retry_base_seconds=0.01).run(plan, state)
    statuses = {p["partition"]: p["status"] for p in Ledger(spark, settings.ledger_schema).partitions(plan.run_id)}
    assert statuses == {"2024-03-09": "staged", "2024-03-10": "staged", "2024-03-11": "failed"}
    assert current_version(spark, f"{db}.totals") == before  # nothing published
    monkeypatch.delenv(faults.CONFLICT_ENV)
    faults.reset()

    result = make_runner().resume(plan.run_id)

    assert result.status == "published"
    assert_df_equality(spark.table(f"{db}.totals"), expected, ignore_row_order=True, ignore_nullable=True,
                       ignore_column_order=True)
