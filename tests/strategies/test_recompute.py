import json

import pytest
from chispa import assert_df_equality
from pyspark.errors import AnalysisException

from backfill_lib.adapters.delta_log import current_version, partition_stats
from backfill_lib.cli import main
from backfill_lib.core.errors import GateFailedError, IntakeError, StrayRowsError
from backfill_lib.report.run_report import write_run_report
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner
from tests.fixtures import D8, D9, D10, D11, EVENTS_SCHEMA, events_request, make_events

SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50), (10, D9, 100), (6, D10, 600)]


def run(spark, settings, request):
    plan, state = prepare(spark, settings, request)
    return quiet_runner(spark, settings).run(plan, state)


def test_recompute_replaces_exactly_the_range_in_one_commit(spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    before = current_version(spark, f"{db}.events")
    result = run(spark, settings, events_request(tmp_path, db, reconcile=True))

    assert result.status == "published"
    expected_range = spark.createDataFrame([(3, D9, 300), (4, D9, 400), (5, D9, 500), (10, D9, 1000)], EVENTS_SCHEMA)
    assert_df_equality(spark.table(f"{db}.events").where("dt = DATE'2024-03-09'"), expected_range,
                       ignore_row_order=True, ignore_nullable=True)
    outside = spark.table(f"{db}.events").where("dt <> DATE'2024-03-09'")
    expected_outside = spark.createDataFrame(
        [(1, D8, 1), (2, D8, 2), (6, D10, 6), (7, D10, 7), (8, D10, 8), (9, D10, 9)], EVENTS_SCHEMA)
    assert_df_equality(outside, expected_outside, ignore_row_order=True, ignore_nullable=True)

    after = current_version(spark, f"{db}.events")
    assert after == before + 1 == result.published_version
    meta = json.loads(spark.sql(f"DESCRIBE HISTORY {db}.events").where(f"version = {after}").first()["userMetadata"])
    assert meta["run_id"] == result.plan.run_id
    assert (meta["owner"], meta["reason"], meta["strategy"]) == ("ana@example.com", "TEST-1: recompute v", "recompute")

    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(result.plan.run_id)["status"] == "published"
    assert [(p["partition"], p["status"], p["rows"]) for p in ledger.partitions(result.plan.run_id)] == [
        ("2024-03-09", "published", 4)
    ]
    recon = [c for c in result.checks if c.kind == "reconciliation"]
    assert [(c.partition, c.observed, c.expected, c.success) for c in recon] == [("2024-03-09", "4", "4", True)]

    # the run wrote its report from memory; read back from the ledger (`backfill report`) it is the same
    folder = settings.runs_dir / result.plan.run_id
    at_run_end = {name: (folder / name).read_text() for name in ("report.md", "report.html")}
    assert "| 2024-03-09 | 3 | 4 |" in at_run_end["report.md"] and "published" in at_run_end["report.md"]
    write_run_report(spark, settings, result.plan.run_id)
    assert {name: (folder / name).read_text() for name in at_run_end} == at_run_end


def test_each_published_partition_is_one_file_however_staging_split_the_rows(spark, settings, db, tmp_path):
    # The source shuffles by id into 2 tasks, so both staging files hold rows of both days; read as they are,
    # each publishing task would write its own file into every day.
    # ids from 3: the target holds ids 1 and 2 on 2024-03-08, outside the range (a refusal, test_keys_outside_range)
    wide = [(i, D9, i) for i in range(3, 11)] + [(i, D10, i) for i in range(11, 19)]
    make_events(spark, db, wide)
    sql = (f"SELECT /*+ REPARTITION(2, id) */ id, dt, v * 10 AS v FROM {db}.events_src "
           "WHERE dt >= :range_start AND dt < :range_end")
    result = run(spark, settings, events_request(tmp_path, db, start=D9, end=D10, sql=sql, batch_size=2))

    assert result.status == "published"
    stats = partition_stats(spark, f"{db}.events", "dt")
    assert {k: stats[k].files for k in ("2024-03-09", "2024-03-10")} == {"2024-03-09": 1, "2024-03-10": 1}
    expected = spark.createDataFrame([(i, d, v * 10) for i, d, v in wide], EVENTS_SCHEMA)
    assert_df_equality(spark.table(f"{db}.events").where("dt >= DATE'2024-03-09'"), expected,
                       ignore_row_order=True, ignore_nullable=True)


def test_running_twice_leaves_identical_contents(spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    request = events_request(tmp_path, db, start=D8, end=D10, gates={"allow_row_loss": True})
    run(spark, settings, request)
    first = spark.read.option("versionAsOf", current_version(spark, f"{db}.events")).table(f"{db}.events")
    first_rows = sorted(first.collect())
    version = current_version(spark, f"{db}.events")
    second = run(spark, settings, request)
    assert sorted(spark.table(f"{db}.events").collect()) == first_rows
    assert len(first_rows) == 5  # 2024-03-08 had no source rows: recompute emptied it
    assert second.status == "unchanged"  # identical rows: no empty commit
    assert current_version(spark, f"{db}.events") == version

    # the daily job "ran twice": 2024-03-09 holds every row twice. Staged rows equal each copy, yet the run must
    # publish, and leave each key once
    spark.sql(f"INSERT INTO {db}.events SELECT * FROM {db}.events WHERE dt = DATE'2024-03-09'")
    third = run(spark, settings, request)
    assert third.status == "published" and third.published_version == version + 2
    assert sorted(spark.table(f"{db}.events").collect()) == first_rows
    (dup,) = [c for c in third.checks if c.kind == "target_keys"]
    assert (dup.partition, dup.success, dup.observed) == ("2024-03-09", True, "4 extra rows")


def test_duplicate_key_fails_validation_and_changes_nothing(spark, settings, db, tmp_path, capsys):
    make_events(spark, db, [(3, D9, 30), (3, D9, 31), (4, D9, 40)])
    before = current_version(spark, f"{db}.events")
    code = main(["run", str(events_request(tmp_path, db))])
    assert code == 3
    assert current_version(spark, f"{db}.events") == before
    err = capsys.readouterr().err
    assert "expect_compound_columns_to_be_unique(dt,id) failed on partition 2024-03-09: 2 unexpected rows" in err
    run_id = spark.table(f"{settings.ledger_schema}.runs").where(f"target_table = '{db}.events'").first()["run_id"]
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(run_id)["status"] == "failed"
    [partition] = ledger.partitions(run_id)
    assert partition["status"] == "failed"
    assert "expect_compound_columns_to_be_unique(dt,id)" in partition["message"]


def test_reconciliation_mismatch_names_partition_and_values(spark, settings, db, tmp_path):
    make_events(spark, db, [(3, D9, 30), (4, D9, 40)])
    sql = f"SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end AND id <> 4"
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, events_request(tmp_path, db, sql=sql, reconcile=True, gates={"allow_row_loss": True}))
    assert ("reconciliation rows_equal_source failed on partition 2024-03-09: staged count(*) = 1, "
            f"source {db}.events_src count(*) = 2") in str(err.value)
    assert current_version(spark, f"{db}.events") == 0


def test_stray_row_fails_naming_partition_and_writes_nothing(spark, settings, db, tmp_path):
    make_events(spark, db, [(3, D9, 30), (99, D11, 1)])
    sql = f"SELECT id, dt, v FROM {db}.events_src"  # ignores the range: yields a 2024-03-11 row
    with pytest.raises(StrayRowsError, match=r"partition 2024-03-11 \(1 row\); nothing written"):
        run(spark, settings, events_request(tmp_path, db, sql=sql))
    assert current_version(spark, f"{db}.events") == 0


def test_missing_target_table_is_an_intake_error(spark, settings, db, tmp_path, capsys):
    request = events_request(tmp_path, db)
    with pytest.raises(IntakeError, match=f"table {db}.events does not exist"):
        prepare(spark, settings, request)
    assert main(["run", str(request)]) == 2
    assert capsys.readouterr().err.strip() == f"error: table {db}.events does not exist"


def test_a_table_without_a_delta_log_has_no_version(spark, db):
    spark.createDataFrame([(1,)], "id INT").write.format("parquet").saveAsTable(f"{db}.plain")
    with pytest.raises(AnalysisException, match="not a Delta table"):
        current_version(spark, f"{db}.plain")


def test_plan_writes_nothing_and_status_reads_the_ledger(spark, settings, db, tmp_path, capsys):
    make_events(spark, db, SOURCE)
    request = events_request(tmp_path, db, start=D8, end=D10, gates={"allow_row_loss": True})
    assert main(["plan", str(request)]) == 0
    out = capsys.readouterr().out
    assert "3 x day on dt" in out and "9 rows (from the Delta log)" in out
    assert current_version(spark, f"{db}.events") == 0
    result = run(spark, settings, request)
    assert main(["status", result.plan.run_id]) == 0
    out = capsys.readouterr().out
    assert f"run {result.plan.run_id}: published" in out
    assert "2024-03-10" in out and "published" in out
    assert main(["status", "bf_missing"]) == 2


def test_source_row_counts_come_from_the_delta_log_and_subtract_deletion_vectors(spark, db):
    from backfill_lib.adapters.delta_log import add_files, latest_snapshot
    from backfill_lib.validate.reconcile import logged_row_counts, metric_per_partition

    spark.sql(f"CREATE TABLE {db}.src (id INT, dt DATE, v INT) USING delta PARTITIONED BY (dt) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.createDataFrame([(1, D8, 1), (2, D9, 2), (3, D9, 3), (4, D9, 4), (5, D10, 5)], EVENTS_SCHEMA).coalesce(
        1).writeTo(f"{db}.src").append()
    spark.sql(f"DELETE FROM {db}.src WHERE id = 3")  # marks the row in a deletion vector; the file stays
    files = add_files(spark, latest_snapshot(spark, f"{db}.src"))
    assert files.where("deletionVector IS NOT NULL").count() == 1

    logged = logged_row_counts(spark, f"{db}.src", "dt", D8, D10)
    assert logged == {"2024-03-08": 1, "2024-03-09": 2}
    scanned = metric_per_partition(spark.table(f"{db}.src").where("dt >= DATE'2024-03-08' AND dt < DATE'2024-03-10'"),
                                   "dt", "count(*)")
    assert scanned == logged
    assert logged_row_counts(spark, f"{db}.src", "id", D8, D10) is None  # not a DATE partition column: scanned


def test_column_mapped_tables_are_read_from_the_log_by_their_partition_columns_physical_name(spark, settings, db,
                                                                                             tmp_path):
    # Under column mapping Delta keys partitionValues by the column's physical name, not "dt".
    from backfill_lib.validate.reconcile import logged_row_counts

    for name, rows in (("events", [(1, D8, 1), (2, D9, 2)]), ("events_src", [(3, D9, 3), (4, D9, 4), (5, D10, 5)])):
        spark.sql(f"CREATE TABLE {db}.{name} (id INT, dt DATE, v INT) USING delta PARTITIONED BY (dt) "
                  "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
        spark.createDataFrame(rows, EVENTS_SCHEMA).writeTo(f"{db}.{name}").append()
    assert logged_row_counts(spark, f"{db}.events_src", "dt", D8, D11) == {"2024-03-09": 2, "2024-03-10": 1}
    assert {k: s.rows for k, s in partition_stats(spark, f"{db}.events", "dt").items()} == {
        "2024-03-08": 1, "2024-03-09": 1}

    result = run(spark, settings, events_request(tmp_path, db, reconcile=True, gates={"allow_row_growth": True}))
    assert result.status == "published"
    assert {(c.kind, c.partition, c.success) for c in result.checks if c.kind == "reconciliation"} == {
        ("reconciliation", "2024-03-09", True)}
    assert {c.name for c in result.checks if c.kind == "post_publish"} == {
        "written_rows_and_checksum_equal_staging", "rows_equal_staging_and_files_replaced"}
    assert sorted(r.id for r in spark.table(f"{db}.events").where("dt = DATE'2024-03-09'").collect()) == [3, 4]
