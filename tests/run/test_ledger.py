"""The ledger writes events behind the run: one INSERT per table per burst, visible after ``flush``."""

import json
import time
from datetime import datetime, timezone

import pytest
from pyspark.errors import AnalysisException

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import BackfillError
from backfill_lib.core.checks import Check
from backfill_lib.ledger import Ledger


def test_events_are_written_behind_and_the_plan_json_only_once(spark, db):
    ledger = Ledger(spark, db)
    ledger.ensure()
    plan_json = json.dumps({"run_id": "r1", "batches": [["2024-03-08"]]})
    record = ledger.record_run({"run_id": "r1", "target_table": "x.events", "plan_json": plan_json}, "planned")
    record = ledger.record_run(record, "staging")
    ledger.record_partitions("r1", [{"partition": f"2024-03-0{d}", "status": "staged", "rows": d} for d in (8, 9)])
    ledger.record_run(record, "staged", message="two partitions")
    ledger.flush()

    raw = spark.table(f"{db}.runs").orderBy("seq").collect()
    assert [r["status"] for r in raw] == ["planned", "staging", "staged"]
    assert [r["plan_json"] is not None for r in raw] == [True, False, False]  # megabytes stored once
    seqs = [r["seq"] for r in raw]
    assert seqs == sorted(set(seqs))  # strictly increasing in the order recorded
    found = ledger.find_run("r1")
    assert (found["status"], found["message"], found["plan_json"]) == ("staged", "two partitions", plan_json)
    assert found["target_table"] == "x.events"
    assert ledger.staged_rows("r1") == {"2024-03-08": 8, "2024-03-09": 9}
    assert spark.table(f"{db}.partitions").select("seq").distinct().count() == 2


@pytest.mark.parametrize("through_files", [False, True], ids=["spark", "files"])
def test_a_failed_ledger_write_is_raised_by_the_next_flush_once(spark, db, through_files):
    ledger = Ledger(spark, db, through_files=through_files)
    ledger.ensure()
    assert ("checks" in ledger._by_path) is through_files  # the embedded default's tables are local
    spark.sql(f"DROP TABLE {db}.checks")
    ledger.record_partitions("r2", [{"partition": "2024-03-08", "status": "staged", "rows": 1}])
    ledger._append("checks", [{"run_id": "r2", "kind": "gate", "name": "rows", "success": True}])
    with pytest.raises(BackfillError if through_files else AnalysisException, match="checks"):
        ledger.flush()
    ledger.flush()  # raised once; later events are written again
    assert [p["status"] for p in ledger.partitions("r2")] == ["staged"]


def test_wait_committed_returns_once_events_up_to_the_mark_are_committed_and_raises_their_loss(spark, db):
    ledger = Ledger(spark, db, through_files=False)
    ledger.ensure()
    record = ledger.record_run({"run_id": "r4"}, "planned")  # the writer wakes here and lingers (30 s)
    mark = ledger.recorded()
    started = time.monotonic()
    ledger.wait_committed(mark)  # stops the linger
    assert time.monotonic() - started < 20
    assert ledger.find_run("r4")["status"] == "planned"
    ledger.wait_committed(mark)  # already committed: returns at once

    spark.sql(f"DROP TABLE {db}.checks")
    ledger.record_run(record, "staging")
    ledger._append("checks", [{"run_id": "r4", "kind": "gate", "name": "rows", "success": True}])
    with pytest.raises(AnalysisException, match="checks"):
        ledger.wait_committed(ledger.recorded())
    with pytest.raises(AnalysisException, match="checks"):
        ledger.flush()  # the error stays for the run's flush


def test_events_recorded_close_together_share_one_commit_per_table(spark, db):
    ledger = Ledger(spark, db)
    ledger.ensure()
    before = {t: current_version(spark, f"{db}.{t}") for t in ("runs", "checks")}
    record = ledger.record_run({"run_id": "r3"}, "validated")  # the writer wakes here and lingers
    time.sleep(0.05)
    ledger.record_checks("r3", [Check("gate", "rows", True, "2024-03-08")])
    ledger.record_run(record, "publishing")
    ledger.flush()  # ends the linger: everything queued goes now
    assert {t: current_version(spark, f"{db}.{t}") - v for t, v in before.items()} == {"runs": 1, "checks": 1}
    assert [r["status"] for r in spark.table(f"{db}.runs").orderBy("seq").collect()] == ["validated", "publishing"]


def test_a_ledger_insert_is_one_spark_job_in_a_non_utc_session(spark, db):
    # Delta verifies the file list it keeps in checksum files with a full log replay on every commit when the
    # session time zone is not UTC (two more jobs per commit); get_spark turns that list off.
    from backfill_lib.adapters.session import ALL_FILES_IN_CRC

    assert spark.conf.get("spark.sql.session.timeZone") != "UTC"
    assert spark.conf.get(ALL_FILES_IN_CRC) == "false"
    ledger = Ledger(spark, db, through_files=False)
    ledger.ensure()
    # the table's first commit in a process also loads its file list, which auto compaction checks after it
    ledger._insert("runs", [{"run_id": "r", "seq": 0, "status": "planned"}])
    tracker, jobs = spark.sparkContext.statusTracker(), []
    for i in range(3):
        group = f"{db}-insert-{i}"
        spark.sparkContext.setJobGroup(group, "one ledger insert")
        ledger._insert("runs", [{"run_id": f"r{i}", "seq": i, "status": "planned"}])
        jobs.append(len(tracker.getJobIdsForGroup(group)))
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert jobs == [1, 1, 1]


def test_a_ledger_insert_through_the_files_is_no_spark_job_and_spark_reads_it_with_its_tag(spark, db):
    from backfill_lib.ledger.writer import tagged_runs

    ledger = Ledger(spark, db)
    ledger.ensure()
    assert sorted(ledger._by_path) == ["checks", "diffs", "partitions", "runs"]
    tracker, group = spark.sparkContext.statusTracker(), f"{db}-files"
    spark.sparkContext.setJobGroup(group, "ledger inserts through the files")
    for i in range(3):
        ledger._insert("runs", [{"run_id": f"r{i}", "seq": i, "status": "planned"}])
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert len(tracker.getJobIdsForGroup(group)) == 0
    assert [(r["run_id"], r["status"]) for r in spark.table(f"{db}.runs").orderBy("seq").collect()] == [
        ("r0", "planned"), ("r1", "planned"), ("r2", "planned")]
    history = spark.sql(f"DESCRIBE HISTORY {db}.runs").orderBy("version").collect()
    assert [tagged_runs(h["userMetadata"], "planned_runs") for h in history[-3:]] == [["r0"], ["r1"], ["r2"]]


@pytest.mark.parametrize("through_files", [False, True], ids=["spark", "files"])
def test_ledger_values_are_stored_exactly(spark, db, through_files):
    # Rows travel as one JSON literal (Spark) or an arrow table (delta-rs): text with quotes, backslashes,
    # newlines and non-ASCII letters, a UTC timestamp to the microsecond in a non-UTC session, 64-bit counts and
    # NULLs all read back unchanged; a value of the wrong type fails the write rather than turning into NULL.
    ledger = Ledger(spark, db, through_files=through_files)
    ledger.ensure()
    text = 'it\'s "q" \\ ü 日本\nline two'
    started = datetime(2024, 3, 10, 7, 30, 1, 123456, tzinfo=timezone.utc)
    ledger.record_partitions("r5", [{"partition": "2024-03-10", "status": "staged", "rows": 2**40, "batch": None,
                                     "started_at": started, "message": text}])
    ledger.flush()
    row = spark.sql(f"SELECT message, rows, batch, unix_micros(started_at) AS micros FROM {db}.partitions").first()
    assert (row["message"], row["rows"], row["batch"], row["micros"]) == (text, 1099511627776, None, 1710055801123456)

    ledger.record_partitions("r6", [{"partition": "2024-03-10", "status": "staged", "rows": "five"}])
    with pytest.raises(Exception, match="(?i)malformed|could not convert 'five'"):
        ledger.flush()  # a value of the wrong type fails the write instead of being stored as NULL
    assert spark.table(f"{db}.partitions").where("run_id = 'r6'").count() == 0


def _properties(spark, table: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def test_ledger_tables_compact_their_small_files(spark, db):
    # Every commit of events adds one small file; Delta's auto compaction (a table property) keeps their number
    # bounded. The threshold is lowered from 50 to 3 for this test only.
    ledger = Ledger(spark, db, through_files=False)
    ledger.ensure()
    assert {t: _properties(spark, f"{db}.{t}").get("delta.autoOptimize.autoCompact")
            for t in ("runs", "partitions", "checks", "diffs")} == dict.fromkeys(
        ("runs", "partitions", "checks", "diffs"), "true")
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "3")
    try:
        for i in range(3):
            ledger.record_run({"run_id": f"r{i}"}, "planned")
            ledger.flush()
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
    detail = spark.sql(f"DESCRIBE DETAIL {db}.runs").first()
    history = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {db}.runs").orderBy("version").collect()]
    assert (detail["numFiles"], history[-1]) == (1, "OPTIMIZE")
    assert sorted(r["run_id"] for r in spark.table(f"{db}.runs").collect()) == ["r0", "r1", "r2"]


def test_ledger_tables_written_through_their_files_compact_their_small_files(spark, db, monkeypatch):
    from backfill_lib.ledger import by_path

    monkeypatch.setattr(by_path, "COMPACT_EVERY", 4)  # versions 0 (creation) to 3: the fourth commit compacts
    ledger = Ledger(spark, db)
    ledger.ensure()
    for i in range(4):
        ledger.record_run({"run_id": f"r{i}"}, "planned")
        ledger.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # in the background, off the run's path
        history = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {db}.runs").orderBy("version").collect()]
        if history[-1] == "OPTIMIZE":
            break
        time.sleep(0.5)
    assert (spark.sql(f"DESCRIBE DETAIL {db}.runs").first()["numFiles"], history[-1]) == (1, "OPTIMIZE")
    assert sorted(r["run_id"] for r in spark.table(f"{db}.runs").collect()) == ["r0", "r1", "r2", "r3"]


def test_an_older_ledger_gets_the_compaction_property_unless_its_owner_set_one(spark, db):
    # Ledgers made by earlier versions have no such property (and here no rollback_plan column either); a value the
    # owner set, even "false", is left alone.
    from backfill_lib.ledger.schema import SCHEMAS

    for name, schema in SCHEMAS.items():
        fields = [f for f in schema.fields if f.name != "rollback_plan"]
        spark.createDataFrame([], type(schema)(fields)).write.format("delta").saveAsTable(f"{db}.{name}")
    spark.sql(f"ALTER TABLE {db}.checks SET TBLPROPERTIES ('delta.autoOptimize.autoCompact' = 'false')")
    Ledger(spark, db).ensure()
    assert {t: _properties(spark, f"{db}.{t}").get("delta.autoOptimize.autoCompact")
            for t in ("runs", "partitions", "checks", "diffs")} == {
        "runs": "true", "partitions": "true", "checks": "false", "diffs": "true"}
    assert "rollback_plan" in spark.table(f"{db}.runs").columns


def test_two_processes_creating_a_new_ledger_at_once_both_go_on(spark, db):
    # two runs that are the first ever on a home race to create the ledger's tables: the loser of Delta's commit
    # on the empty directory (ProtocolChangedException) or of the catalog's create takes the winner's table
    import threading

    schema = f"{db}_ledger"
    ledgers, errors, barrier = [Ledger(spark, schema), Ledger(spark, schema)], [], threading.Barrier(2)

    def ensure(ledger):
        barrier.wait()
        try:
            ledger.ensure()
        except Exception as exc:  # noqa: BLE001 - the defect: reported below
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(ledger,)) for ledger in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    try:
        assert errors == []
        # (SHOW TABLES also lists the session's temporary views, which other tests of this worker may leave;
        # spark.catalog.listTables cannot decode its rows under the tests' conftest.INTERPRETED confs)
        tables = sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {schema}").collect() if not r["isTemporary"])
        assert tables == ["checks", "diffs", "partitions", "runs"]
        assert [current_version(spark, f"{schema}.{t}") for t in ("checks", "diffs", "partitions", "runs")] == [0] * 4
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_events_recorded_while_a_publish_sets_its_commit_confs_commit_after_it_without_them(spark, db):
    # The ledger's writer thread shares the session whose confs a publish sets for its commit. Two bursts in
    # that window once both took the publish's txnAppId and version: the first committed with the publish's
    # userMetadata, and Delta skipped the second as a repeat of it (its event lost, the writer none the wiser).
    from backfill_lib.publish.commit import TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF, session_confs
    from backfill_lib.ledger.writer import tagged_runs

    ledger = Ledger(spark, db, through_files=False)  # through the files, no session conf reaches a commit
    ledger.ensure()
    before = current_version(spark, f"{db}.runs")
    confs = {USER_METADATA_CONF: '{"run_id": "pub"}', TXN_APP_ID_CONF: "delta-backfill:pub", TXN_VERSION_CONF: "1"}
    with session_confs(spark, confs):
        for status in ("planned", "staging"):
            ledger.record_run({"run_id": "r_confs", "target_table": "x.events"}, status)
            ledger.write_now()
            time.sleep(2)  # long enough for the writer to commit, were it allowed to
        assert current_version(spark, f"{db}.runs") == before  # nothing committed in the window
    ledger.flush()
    assert [r["status"] for r in spark.table(f"{db}.runs").orderBy("seq").collect()] == ["planned", "staging"]
    history = spark.sql(f"DESCRIBE HISTORY {db}.runs").where(f"version > {before}").collect()
    assert [tagged_runs(h["userMetadata"]) for h in history] == [["r_confs"]] * len(history)  # its own tags
    assert len(history) >= 1


def test_the_abandon_check_finds_an_abandon_committed_by_another_writer_after_the_mark(spark, db):
    ledger, elsewhere = Ledger(spark, db), Ledger(spark, db)
    ledger.ensure()
    ledger.flush()
    mark = ledger.commit_mark("runs")
    ledger.watch_from("r9", mark)
    record = ledger.record_run({"run_id": "r9", "target_table": "x.events", "plan_json": "{}"}, "planned")
    ledger.record_run(record, "validated")
    ledger.flush()
    assert ledger.abandoned_event("r9") is None  # only this writer's commits of r9 since the mark: nothing to read
    with elsewhere.durable():
        elsewhere.record_run(record, "abandoned", message="abandoned: superseded")
    found = ledger.abandoned_event("r9")
    assert found["message"] == "abandoned: superseded"
    # a commit of another run by this writer also means a read: that run's events share the table
    ledger.record_run({"run_id": "r10", "target_table": "x.events"}, "planned")
    ledger.flush()
    assert not ledger.only_commits_of("runs", mark, "r9")
    assert ledger.abandoned_event("r9")["message"] == "abandoned: superseded"
