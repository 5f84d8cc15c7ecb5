"""Issue 19, item 2: ``--only missing|changed`` on real Spark, Delta and ledger (the pure selection, batching and
round trip are tested in tests/core/test_selection.py and tests/plan/test_selection_plan.py)."""

from __future__ import annotations

from datetime import date

from rich.console import Console

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.plan.explain import explain
from backfill_lib.plan.selection import prepare_selected
from tests.conftest import write_request
from tests.fixtures import EVENTS_SCHEMA

DAYS = [date(2024, 3, d) for d in range(1, 7)]
KEYS = [d.isoformat() for d in DAYS]


def request(tmp_path, db, start: date, end: date):
    """Request ``fix`` (one file, whose range a person edits between runs) recomputing ``db.events`` from
    ``db.events_src``: v times 10."""
    sql = tmp_path / "fix.sql"
    sql.write_text(f"SELECT id, dt, v * 10 AS v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")
    return write_request(tmp_path / "fix.yml", owner="ana@example.com", reason="TEST-19: only what is missing",
                         target={"table": f"{db}.events", "partition_column": "dt", "grain": "day"},
                         range={"start": start.isoformat(), "end": end.isoformat()}, time_zone="UTC",
                         strategy="recompute", source={"sql": str(sql)}, keys=["id"], batch_size=31)


def files_of(spark, table: str) -> dict[int, str]:
    from pyspark.sql import functions as F

    return {r["id"]: r["f"] for r in spark.table(table).select("id", F.input_file_name().alias("f")).collect()}


def rendered(plan) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(explain(plan))
    return console.export_text()


def test_only_missing_takes_the_other_half_and_only_changed_the_appended_partition(spark, settings, db, tmp_path,
                                                                                    make_runner):
    # two rows a day; target v = 1, source v = id
    rows = [(10 * i + n, d, 1) for i, d in enumerate(DAYS) for n in (1, 2)]
    spark.createDataFrame(rows, EVENTS_SCHEMA).coalesce(1).write.format("delta").partitionBy("dt") \
        .saveAsTable(f"{db}.events")
    spark.createDataFrame([(i, d, i) for i, d, _ in rows], EVENTS_SCHEMA).coalesce(1).write.format("delta") \
        .partitionBy("dt").saveAsTable(f"{db}.events_src")

    # the first run covers the middle half, March 2-4
    path = request(tmp_path, db, DAYS[1], DAYS[3])
    first_plan, state = prepare_selected(spark, settings, path, None)
    first = make_runner().run(first_plan, state)
    assert first.status == "published"
    middle = {i: f for i, f in files_of(spark, f"{db}.events").items() if 10 <= i < 40}

    # the whole range, --only missing: exactly the other half, March 1 and 5-6, with no batch across the gap
    path = request(tmp_path, db, DAYS[0], DAYS[-1])
    plan, state = prepare_selected(spark, settings, path, "missing")
    assert plan.selection.keys == (KEYS[0], KEYS[4], KEYS[5])
    assert [b.keys for b in plan.batches] == [(KEYS[0],), (KEYS[4], KEYS[5])]
    text = rendered(plan)
    assert "selection: --only missing: 3 of 6 partitions" in text
    assert "2024-03-05 .. 2024-03-06 (2): no published run of this request" in text
    second = make_runner().run(plan, state)
    assert second.status == "published"
    assert sorted(second.rows.items()) == [(KEYS[0], 2), (KEYS[4], 2), (KEYS[5], 2)]
    got = sorted((r["id"], r["dt"], r["v"]) for r in spark.table(f"{db}.events").collect())
    assert got == sorted((i, d, i * 10) for i, d, _ in rows)  # every day recomputed once, none twice or lost
    after = files_of(spark, f"{db}.events")
    assert {i: f for i, f in after.items() if 10 <= i < 40} == middle  # the first run's files untouched

    # nothing is missing now: planning says so, running writes no table version and records no run
    version = current_version(spark, f"{db}.events")
    plan, state = prepare_selected(spark, settings, path, "missing")
    assert plan.partitions == () and "--only missing: 0 of 6 partitions: nothing is selected" in rendered(plan)
    assert make_runner().run(plan, state).status == "nothing_selected"
    assert current_version(spark, f"{db}.events") == version

    # a row appended to the source's March 5 after both runs published: --only changed takes March 5 alone
    spark.sql(f"INSERT INTO {db}.events_src VALUES (45, DATE'2024-03-05', 45)")
    plan, _ = prepare_selected(spark, settings, path, "changed")
    assert [(c.key, c.reason) for c in plan.selection.chosen] == [
        (KEYS[4], f"source files changed since run {second.plan.run_id} ({db}.events_src version 0 -> 1)")]
    assert [b.keys for b in plan.batches] == [(KEYS[4],)]
