"""The ledger read from its files with delta-rs (``backfill status`` on the embedded default) folds the events as the
Spark reader does, and is chosen only where the files are where it looks."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from backfill_lib.core.errors import RunNotFoundError
from backfill_lib.core.settings import Settings
from backfill_lib.ledger import Ledger
from backfill_lib.ledger.files import LedgerFiles, LedgerFilesUnreadable, ledger_files


def test_runs_partitions_and_staging_read_from_the_files_equal_the_spark_reads(spark, settings, db):
    ledger = Ledger(spark, db)
    ledger.ensure()
    plan = json.dumps({"run_id": "r1"})
    r1 = ledger.record_run({"run_id": "r1", "target_table": "s.events", "plan_json": plan,
                            "staging_table": f"{db}.events__r1", "owner": "ana"}, "planned")
    r2 = ledger.record_run({"run_id": "r2", "target_table": "s.other", "staging_table": f"{db}.gone__r2"}, "planned")
    ledger.record_partitions("r1", [
        {"partition": "2024-03-09", "status": "staging", "batch": 1, "attempt": 1,
         "started_at": datetime(2024, 3, 10, 1, 0, 5)},
        {"partition": "2024-03-08", "status": "staging", "batch": 0, "attempt": 1,
         "started_at": datetime(2024, 3, 10, 1, 0, 0)}])
    ledger.record_partitions("r1", [  # later events without batch or attempt keep the earlier ones
        {"partition": "2024-03-08", "status": "staged", "rows": 3, "ended_at": datetime(2024, 3, 10, 1, 0, 9)},
        {"partition": "2024-03-09", "status": "failed", "message": "boom"}])
    ledger.record_run(r1, "staged", message="one of two")
    ledger.record_run(r2, "failed", message="refused")
    ledger.flush()
    spark.sql(f"CREATE TABLE {db}.events__r1 (id INT) USING delta")

    files = LedgerFiles(settings.warehouse_dir, db)
    assert [r["run_id"] for r in files.latest_runs(20)] == ["r2", "r1"]
    assert [r["run_id"] for r in files.latest_runs(1)] == ["r2"]
    spark_latest = [r.asDict() for r in ledger.latest_runs(20)]
    assert files.latest_runs(20) == [{k: v for k, v in r.items() if k != "plan_json"} for r in spark_latest]
    assert files.run("r1") == ledger.run("r1")
    assert (files.run("r1")["status"], files.run("r1")["plan_json"], files.run("r1")["owner"]) == (
        "staged", plan, "ana")  # the latest event's columns, the plan of the first
    assert files.partitions("r1") == ledger.partitions("r1")
    assert [(p["partition"], p["status"], p["batch"], p["attempt"], p["rows"], p["message"])
            for p in files.partitions("r1")] == [("2024-03-08", "staged", 0, 1, 3, None),
                                                  ("2024-03-09", "failed", 1, 1, None, "boom")]
    assert files.partitions("r1")[0]["started_at"] == datetime(2024, 3, 10, 1, 0, 0)  # naive local, as pyspark
    assert files.staging_kept([f"{db}.events__r1", f"{db}.gone__r2", None]) == {f"{db}.events__r1"}
    with pytest.raises(RunNotFoundError, match=rf"^run r9 not found in ledger {db}.runs$"):
        files.run("r9")


def test_a_ledger_not_yet_created_reads_as_empty(tmp_path):
    files = LedgerFiles(tmp_path / "warehouse", "backfill_ledger")
    assert (files.latest_runs(), files.partitions("r1"), files.staging_kept(["a.b"])) == ([], [], set())
    with pytest.raises(RunNotFoundError, match="^run r1 not found in ledger backfill_ledger.runs$"):
        files.run("r1")


@pytest.mark.parametrize("options, env, ledger_schema, by_path", [
    ({}, {}, "backfill_ledger", True),
    ({"spark.sql.warehouse.dir": "s3://bucket/w"}, {}, "backfill_ledger", False),
    ({"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:postgresql://db/hive"}, {}, "backfill_ledger", False),
    ({"spark.sql.catalog.spark_catalog": "x"}, {}, "backfill_ledger", False),
    ({}, {"PYSPARK_GATEWAY_PORT": "4040"}, "backfill_ledger", False),  # under spark-submit
    ({}, {"SPARK_REMOTE": "sc://host"}, "backfill_ledger", False),
    ({}, {}, "main.backfill_ledger", False),  # a catalog part: Unity Catalog's
])
def test_the_files_are_read_only_where_the_embedded_default_keeps_them(tmp_path, monkeypatch, options, env,
                                                                       ledger_schema, by_path):
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(home=tmp_path, ledger_schema=ledger_schema, spark={"options": options})
    found = ledger_files(settings)
    assert (found is not None) == by_path
    if by_path:
        assert found.folder == tmp_path.resolve() / "warehouse" / "backfill_ledger.db"


def test_a_ledger_delta_rs_cannot_read_is_read_through_spark(spark, settings, db):
    from backfill_lib.api import status

    ledger = Ledger(spark, db)
    ledger.ensure()
    ledger.record_run({"run_id": "r1", "target_table": "s.events"}, "planned")
    ledger.flush()
    # a checkpoint hint without its checkpoint: delta-rs refuses the table, Spark's Delta lists the log instead
    hint = settings.warehouse_dir / f"{db}.db" / "runs" / "_delta_log" / "_last_checkpoint"
    hint.write_text('{"version": 1, "size": 2}\n')
    with pytest.raises(LedgerFilesUnreadable, match="runs: .*checkpoint"):
        LedgerFiles(settings.warehouse_dir, db).latest_runs()
    shown = status(settings=settings.model_copy(update={"ledger_schema": db}), spark=None)
    assert [(r["run_id"], r["status"]) for r in shown.runs] == [("r1", "planned")]


def test_processes_that_read_a_ledger_table_by_its_files_exit_cleanly(tmp_path):
    # delta-rs's own arrow dataset left a native thread running at interpreter exit, and about two processes in
    # three aborted after their work ("terminate called without an active exception", exit 134): `backfill
    # status` failed that way in CI. The files are read by pyarrow; eight processes in a row all exit 0.
    import subprocess
    import sys

    import pyarrow as pa
    from deltalake import write_deltalake

    from backfill_lib.ledger.by_path import table_rows

    path = str(tmp_path / "runs")
    write_deltalake(path, pa.table({"run_id": ["r1", "r2"], "seq": pa.array([1, 2], pa.int64())}))
    write_deltalake(path, pa.table({"run_id": ["r3"], "seq": pa.array([3], pa.int64())}), mode="append")
    assert sorted(r["run_id"] for r in table_rows(path)) == ["r1", "r2", "r3"]
    child = ("import sys; from backfill_lib.ledger.by_path import table_rows; "
             "print(len(table_rows(sys.argv[1])))")
    runs = [subprocess.run([sys.executable, "-c", child, path], capture_output=True, text=True, timeout=120)
            for _ in range(8)]
    assert [(r.returncode, r.stdout.strip(), r.stderr.strip()) for r in runs] == [(0, "3", "")] * 8
