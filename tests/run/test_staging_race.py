"""The same run ID run twice at once, past the ledger's own check: the process that finds the run's staging table
created by the other after it looked (in the catalog, or its files still being written) is refused (exit 2,
LeaseError) and writes nothing; files in the location that never become a table are refused by name."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from chispa import assert_df_equality
from py4j.protocol import Py4JJavaError

from backfill_lib.core.errors import LeaseError, StagingLocationError, error_condition
from backfill_lib.run import staging
from backfill_lib.run.staging import BATCH_COLUMN, StagingTable

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
