"""The run engine in one process: same run ID twice, conflict retries, a concurrent appender, cancel and resume."""

import json
import threading
import time
from datetime import date

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import ConflictError
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.fixtures import (
    D8,
    D9,
    D10,
    D11,
    EVENTS_SCHEMA,
    FULL_EXPECTED,
    FULL_SOURCE,
    TARGET_ROWS,
    events_request,
    make_events,
)

SOURCE, EXPECTED = FULL_SOURCE, FULL_EXPECTED


def test_same_request_and_run_id_twice_writes_once(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, [(3, D9, 1), (4, D9, 2), (5, D9, 3)])
    path = events_request(tmp_path, db)
    plan, state = prepare(spark, settings, path, run_id="same_id_1")
    first = make_runner().run(plan, state)
    version = current_version(spark, f"{db}.events")
    assert (first.status, first.published_version, version) == ("published", 1, 1)

    plan2, state2 = prepare(spark, settings, path, run_id="same_id_1")
    second = make_runner().run(plan2, state2)
    assert (second.status, second.published_version) == ("published", 1)
    assert current_version(spark, f"{db}.events") == 1  # no new version
    assert spark.table(f"{db}.events").where("dt = DATE'2024-03-09'").count() == 3  # not 6


def test_a_resume_that_lost_the_publishing_event_finds_its_commit_instead_of_committing_again(spark, settings, db,
                                                                                               tmp_path, make_runner):
    # The publishing event is written behind the commit, so a crash can leave the ledger at "validated" with the
    # commit made: the resumed run must find that commit, neither refusing at the fence nor committing twice.
    from backfill_lib.publish.commit import publish_commit
    from backfill_lib.run.source_check import check_source_schema
    from backfill_lib.strategies import implementation

    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D8, end=D10), run_id="lost_event_1")
    assert make_runner().run(plan, state, until="validate").status == "validated"
    publish_commit(spark, plan, check_source_schema(spark, plan, implementation), implementation(plan).write)  # committed, not recorded
    assert current_version(spark, f"{db}.events") == 1

    resumed = make_runner().resume("lost_event_1")
    assert (resumed.status, resumed.pre_publish_version, resumed.published_version) == ("published", 0, 1)
    assert current_version(spark, f"{db}.events") == 1
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


def test_run_id_of_another_request_is_refused(spark, settings, db, tmp_path, make_runner):
    from backfill_lib.core.errors import RequestError

    make_events(spark, db, [(3, D9, 1), (4, D9, 2), (5, D9, 3)])
    plan, state = prepare(spark, settings, events_request(tmp_path, db), run_id="taken_1")
    make_runner().run(plan, state)
    other = events_request(tmp_path, db, start=D10, end=D10)
    plan2, state2 = prepare(spark, settings, other, run_id="taken_1")
    with pytest.raises(RequestError, match="run ID taken_1 already belongs to another request"):
        make_runner().run(plan2, state2)


def test_injected_conflict_is_retried_and_succeeds(spark, settings, db, tmp_path, monkeypatch, make_runner):
    from backfill_lib.core import faults

    faults.reset()
    monkeypatch.setenv(faults.CONFLICT_ENV, "2024-03-09:2")
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D8, end=D10, batch_size=1))
    result = make_runner(retry_base_seconds=0.01).run(plan, state)

    assert result.status == "published"
    parts = {p["partition"]: p for p in Ledger(spark, settings.ledger_schema).partitions(plan.run_id)}
    assert parts["2024-03-09"]["attempt"] == 3 and parts["2024-03-08"]["attempt"] == 1
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


def test_conflict_that_never_clears_fails_naming_the_partition(spark, settings, db, tmp_path, monkeypatch, make_runner):
    from backfill_lib.core import faults

    faults.reset()
    monkeypatch.setenv(faults.CONFLICT_ENV, "2024-03-10:always")
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D8, end=D10, batch_size=1))
    with pytest.raises(ConflictError, match=r"staging batch 2 \[2024-03-10 \.\. 2024-03-10\] of t_\w+\.events: "
                                            r"Delta commit conflict did not clear after 3 attempts"):
        make_runner(conflict_attempts=3, retry_base_seconds=0.01).run(plan, state)
    assert current_version(spark, f"{db}.events") == 0
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(plan.run_id)["status"] == "failed"
    assert {p["partition"]: p["status"] for p in ledger.partitions(plan.run_id)}["2024-03-10"] == "failed"


def test_concurrent_appender_outside_the_range_loses_nothing(spark, settings, db, tmp_path, runner):
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, batch_size=1))
    done = threading.Event()
    appended = []

    def append():
        i = 100
        while not done.is_set() or not appended:  # at least one append, however fast the run is
            rows = [(i, D11, i), (i + 1, date(2024, 3, 7), i + 1)]
            spark.createDataFrame(rows, EVENTS_SCHEMA).write.format("delta").mode("append").saveAsTable(f"{db}.events")
            appended.extend(rows)
            i += 2
            time.sleep(0.2)

    thread = threading.Thread(target=append)
    thread.start()
    try:
        result = runner.run(plan, state)
    finally:
        done.set()
        thread.join()

    assert result.status == "published"
    in_range = [(i, d, v * 10) for i, d, v in SOURCE if d in (D9, D10)]
    outside = [r for r in TARGET_ROWS if r[1] == D8]
    expected = spark.createDataFrame(in_range + outside + appended, EVENTS_SCHEMA)
    assert_df_equality(spark.table(f"{db}.events"), expected, ignore_row_order=True, ignore_nullable=True)
    assert len(appended) >= 2


def test_sigterm_cancels_between_batches_and_resume_finishes(spark, settings, db, tmp_path, monkeypatch, capsys):
    from backfill_lib.cli import main
    from backfill_lib.core import faults

    make_events(spark, db, SOURCE)
    request = events_request(tmp_path, db, start=D8, end=D10, batch_size=1, concurrency=1)
    monkeypatch.setenv(faults.SIGNAL_ENV, "after_stage:0")
    assert main(["run", str(request), "--run-id", "cancel_me_1"]) == 130
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run("cancel_me_1")["status"] == "cancelled"
    statuses = {p["partition"]: p["status"] for p in ledger.partitions("cancel_me_1")}
    assert statuses == {"2024-03-08": "staged"}  # batch 0 ended; batches 1 and 2 never started
    assert current_version(spark, f"{db}.events") == 0
    assert "backfill resume cancel_me_1" in capsys.readouterr().err

    monkeypatch.delenv(faults.SIGNAL_ENV)
    assert main(["resume", "cancel_me_1"]) == 0
    assert ledger.run("cancel_me_1")["status"] == "published"
    assert current_version(spark, f"{db}.events") == 1
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert main(["resume", "cancel_me_1"]) == 0  # finished: nothing more to write
    assert current_version(spark, f"{db}.events") == 1


def test_concurrent_batches_stage_into_their_own_batch_partitions(spark, settings, db, tmp_path, runner):
    from backfill_lib.run.staging import BATCH_COLUMN, staged_rows

    make_events(spark, db, SOURCE)
    request = events_request(tmp_path, db, start=D8, end=D10, batch_size=1, concurrency=3)
    plan, state = prepare(spark, settings, request)
    result = runner.run(plan, state, until="validate")

    assert result.status == "validated"
    detail = spark.sql(f"DESCRIBE DETAIL {plan.staging_table}").first()
    assert detail["partitionColumns"] == [BATCH_COLUMN]
    # Statistics of the partition column only (and row counts): nothing reads the other columns' statistics.
    assert detail["properties"]["delta.dataSkippingStatsColumns"] == "dt"
    stats = [json.loads(r["stats"]) for r in spark.read.json(f"{detail['location']}/_delta_log/*.json")
             .where("add IS NOT NULL").select("add.stats").collect()]
    assert sorted(stats[0]["minValues"]) == ["dt"] and sum(s["numRecords"] for s in stats) == 9
    per_batch = {r[BATCH_COLUMN]: r["n"] for r in
                 spark.table(plan.staging_table).groupBy(BATCH_COLUMN).agg({"*": "count"})
                 .withColumnRenamed("count(1)", "n").collect()}
    assert per_batch == {0: 2, 1: 3, 2: 4}  # 2024-03-08, -09 and -10 of SOURCE
    # The first batch to write created the table with its rows (no empty CREATE TABLE commit); the others waited
    # for it, then replaced their own batch.
    history = spark.sql(f"DESCRIBE HISTORY {plan.staging_table}").orderBy("version").collect()
    assert [r["operation"] for r in history] == ["CREATE TABLE AS SELECT", "WRITE", "WRITE"]
    # Each batch's replaceWhere reads only its own batch partition, so three at once never conflict.
    attempts = {p["partition"]: p["attempt"] for p in Ledger(spark, settings.ledger_schema).partitions(plan.run_id)}
    assert attempts == {"2024-03-08": 1, "2024-03-09": 1, "2024-03-10": 1}
    in_range = [(i, d, v * 10) for i, d, v in SOURCE if d in (D8, D9, D10)]
    assert_df_equality(staged_rows(spark, plan.staging_table), spark.createDataFrame(in_range, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("side", ["target", "source SQL"])
def test_a_column_named_like_the_staging_batch_column_is_refused_naming_where(spark, settings, db, tmp_path, side,
                                                                             runner):
    from pyspark.sql.types import IntegerType, StructField, StructType

    from backfill_lib.core.errors import SchemaMismatchError

    if side == "target":  # both tables carry the column, so only the reserved name is wrong
        schema = StructType(EVENTS_SCHEMA.fields + [StructField("_backfill_batch", IntegerType())])
        for name in ("events", "events_src"):
            spark.createDataFrame([(3, D9, 1, 0)], schema).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.{name}")
        column, where = "_backfill_batch", rf"^{db}\.events"
    else:
        make_events(spark, db, SOURCE)
        column, where = "7 AS _backfill_batch", r"events\.sql"
    sql = f"SELECT id, dt, v, {column} FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end"
    plan, state = prepare(spark, settings, events_request(tmp_path, db, sql=sql))
    with pytest.raises(SchemaMismatchError, match=rf"{where}: column _backfill_batch is reserved.*rename it in the {side}$"):
        runner.run(plan, state)
    assert current_version(spark, f"{db}.events") == 0
    assert not spark.catalog.tableExists(plan.staging_table)


def test_a_staging_table_left_by_an_earlier_layout_is_refused_before_any_write(spark, settings, db, tmp_path, runner):
    from backfill_lib.core.errors import SchemaMismatchError

    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, staging="durable"))
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {plan.staging_table.rsplit('.', 1)[0]}")
    spark.table(f"{db}.events").limit(0).write.format("delta").partitionBy("dt").saveAsTable(plan.staging_table)
    with pytest.raises(SchemaMismatchError, match=rf"^staging table {plan.staging_table} has no _backfill_batch column"):
        runner.run(plan, state)
    assert current_version(spark, plan.staging_table) == 0
    assert current_version(spark, f"{db}.events") == 0
