"""The same run ID run twice at once, past the ledger's own check: the process that finds the run's staging table
created by the other after it looked (in the catalog, or its files still being written) is refused (exit 2,
LeaseError) and writes nothing; files in the location that never become a table are refused by name."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import pytest
from chispa import assert_df_equality
from py4j.protocol import Py4JJavaError
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import LeaseError, StagingLocationError, error_condition
from backfill_lib.run import staging
from backfill_lib.run.staging import BATCH_COLUMN, StagingTable
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner, write_request

SCHEMA = f"k INT, v STRING, {BATCH_COLUMN} INT"


def test_a_staging_table_created_by_another_process_after_the_check_refuses_this_one(spark, db):
    name = f"{db}.stg__events__twin"
    theirs = spark.createDataFrame([(1, "theirs", 0)], SCHEMA)
    # the other process's first batch created the table after this process found it missing
    theirs.writeTo(name).using("delta").partitionedBy(BATCH_COLUMN).create()
    table = StagingTable(SimpleNamespace(staging_table=name, run_id="twin"), exists=False)

    with pytest.raises(LeaseError) as refused:
        table.write(spark.createDataFrame([(1, "mine", 0)], SCHEMA), f"{BATCH_COLUMN} = 0")

    assert str(refused.value) == (
        f"run ID twin was started by another process at the same moment, and it created the run's staging table "
        f"{name} first: that process runs it (`backfill status twin`); this one wrote nothing")
    assert_df_equality(spark.table(name), theirs)


def _location(spark, db: str, table: str) -> Path:
    rows = spark.sql(f"DESCRIBE SCHEMA EXTENDED {db}").collect()
    found = next(r[1] for r in rows if r[0].lower() == "location")
    return Path(found.removeprefix("file:")) / table


def test_a_create_that_meets_the_other_process_files_waits_for_its_table_and_is_refused(spark, db, monkeypatch):
    name = f"{db}.stg__events__twin"
    folder = _location(spark, db, "stg__events__twin")
    folder.mkdir(parents=True)
    (folder / "part-00000-theirs.parquet").write_bytes(b"not yet committed")  # the other's create, half way
    theirs = spark.createDataFrame([(1, "theirs", 0)], SCHEMA)
    started = []
    waiting = StagingTable._appears

    def other_process_commits(self, rows, wait):
        def commit():
            time.sleep(1.0)
            (folder / "part-00000-theirs.parquet").unlink()
            theirs.writeTo(name).using("delta").partitionedBy(BATCH_COLUMN).create()

        started.append(threading.Thread(target=commit))
        started[-1].start()
        return waiting(self, rows, wait)

    monkeypatch.setattr(StagingTable, "_appears", other_process_commits)
    table = StagingTable(SimpleNamespace(staging_table=name, run_id="twin"), exists=False)

    with pytest.raises(LeaseError, match="^run ID twin was started by another process at the same moment"):
        table.write(spark.createDataFrame([(1, "mine", 0)], SCHEMA), f"{BATCH_COLUMN} = 0")

    started[0].join()
    assert_df_equality(spark.table(name), theirs)


def test_stray_files_where_the_staging_table_goes_are_refused_by_name_and_nothing_is_created(spark, db, monkeypatch):
    monkeypatch.setattr(staging, "CREATE_WAIT_SECONDS", 1.0)
    name = f"{db}.stg__events__killed"
    folder = _location(spark, db, "stg__events__killed")
    folder.mkdir(parents=True)
    (folder / "part-00000-left.parquet").write_bytes(b"left by a killed create")
    table = StagingTable(SimpleNamespace(staging_table=name, run_id="killed"), exists=False)

    with pytest.raises(StagingLocationError) as refused:
        table.write(spark.createDataFrame([(1, "mine", 0)], SCHEMA), f"{BATCH_COLUMN} = 0")

    assert str(refused.value) == (
        f"staging table {name}: file:{folder} holds files but no Delta table (a process killed while creating it "
        f"left them, or another process running run ID killed is still writing them): once no process runs killed, "
        f"remove that folder and run again; nothing was written")
    assert refused.value.exit_code == 2
    assert not spark.catalog.tableExists(name)
    assert sorted(p.name for p in folder.iterdir()) == ["part-00000-left.parquet"]


def test_a_delta_commit_conflict_at_the_create_counts_as_raced_converted_by_pyspark_or_not(spark):
    # Delta's commit conflicts reach Python converted (Delta's Python classes, which carry no condition) or as a
    # raw Py4JJavaError around the Java exception: either way the staging table's create waits for the other
    # process's table
    from delta.exceptions import ProtocolChangedException

    jvm = spark._jvm
    conflict = jvm.io.delta.exceptions.ProtocolChangedException("the protocol changed")
    with pytest.raises(Exception) as thrown:  # noqa: PT011 - converted or not depends on the process's history
        jvm.scala.util.Failure(conflict).get()
    raw = Py4JJavaError("An error occurred while calling o1.get.\n", conflict)
    converted = ProtocolChangedException("the protocol changed", "", None)
    plain = Py4JJavaError("An error occurred while calling o1.get.\n", jvm.java.lang.IllegalStateException("no"))

    assert [staging.raced_create(e) for e in (thrown.value, raw, converted, plain)] == [True, True, True, False]
    assert (error_condition(raw), error_condition(plain)) == ("DELTA_PROTOCOL_CHANGED", "")


ORDER_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("dt", StringType(), True),
                           StructField("amount", IntegerType(), True)])


def test_a_killed_create_of_a_quoted_string_partitioned_targets_staging_is_refused_then_resumes_exactly(
        spark, settings, db, tmp_path, monkeypatch):
    # A fresh helper's input: a target named by a reserved word in mixed case, partitioned by a yyyyMMdd string,
    # in New York time, staged durably; the staging table's folder holds a killed create's file
    monkeypatch.setattr(staging, "CREATE_WAIT_SECONDS", 1.0)
    target = f"{db}.`Order`"
    rows = [(1, "20240308", 1), (2, "20240309", 2), (3, "20240310", 3), (5, "20240311", 5)]
    spark.createDataFrame(rows, ORDER_SCHEMA).write.format("delta").partitionBy("dt").saveAsTable(target)
    source = [(1, date(2024, 3, 8), 1), (2, date(2024, 3, 9), 2), (6, date(2024, 3, 9), 6), (3, date(2024, 3, 10), 3)]
    spark.createDataFrame(source, "id INT, event_date DATE, amount INT").write.format("delta").saveAsTable(f"{db}.src")
    sql = tmp_path / "order.sql"
    sql.write_text(f"SELECT id, date_format(event_date, 'yyyyMMdd') AS dt, amount * 10 AS amount FROM {db}.src\n"
                   "WHERE event_date >= :range_start AND event_date < :range_end\n")
    request = write_request(
        tmp_path / "order.yml", owner="ana@example.com", reason="TEST-1: a killed create's files",
        target={"table": target, "partition_column": "dt", "grain": "day", "partition_format": "yyyyMMdd"},
        range={"start": "2024-03-09", "end": "2024-03-10"}, time_zone="America/New_York", strategy="recompute",
        staging="durable", source={"sql": str(sql)}, keys=["id"])
    plan, state = prepare(spark, settings, request)
    schema, name = plan.staging_table.split(".")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    folder = _location(spark, schema, name)
    folder.mkdir(parents=True)
    (folder / "part-00000-x.parquet").write_bytes(b"left by a killed create")
    before = current_version(spark, target)

    with pytest.raises(StagingLocationError, match=rf"^staging table {plan.staging_table}: file:{folder} holds files "):
        quiet_runner(spark, settings).run(plan, state)
    assert current_version(spark, target) == before
    assert not spark.catalog.tableExists(plan.staging_table)

    shutil.rmtree(folder)
    result = quiet_runner(spark, settings).resume(plan.run_id)

    assert (result.status, result.published_version) == ("published", before + 1)
    expected = [(1, "20240308", 1), (2, "20240309", 20), (6, "20240309", 60), (3, "20240310", 30),
                (5, "20240311", 5)]
    assert_df_equality(spark.table(target), spark.createDataFrame(expected, ORDER_SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)
