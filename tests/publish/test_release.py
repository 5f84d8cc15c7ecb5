"""Release as one unit: a downstream mart under the same run ID, the monitor's automatic RESTORE, rollback (again,
and of a table already back at its content), history, rollback readiness after VACUUM, retention, and protected
tables."""

import json
from datetime import date, timedelta

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import PublishError, RequestError, RolledBackError
from backfill_lib.core.faults import MONITOR_ENV
from backfill_lib.plan.builder import check_run_id
from backfill_lib.publish.safety import check_protected, parse_interval, retention
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner
from tests.fixtures import D9, EVENTS_SCHEMA, events_request, make_events, make_monthly, with_mart

SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50), (10, D9, 100)]
MARCH = date(2024, 3, 1)


def make_tables(spark, db):
    make_events(spark, db, SOURCE)
    make_monthly(spark, db)


def snapshot(spark, table, version):
    return spark.read.option("versionAsOf", version).table(table)


def test_target_and_mart_publish_as_one_run_and_roll_back_as_one_unit_refused_over_a_later_commit_until_forced(
        spark, settings, db, tmp_path, capsys):
    from backfill_lib.cli import main
    from backfill_lib.core.lineage import lineage_run_id
    from backfill_lib.core.settings import LineageSettings

    make_tables(spark, db)
    plan, state = prepare(spark, settings, with_mart(tmp_path, db))
    events_file = tmp_path / "openlineage.jsonl"  # OpenLineage's file transport: one event per line
    runner = quiet_runner(spark, settings, lineage=LineageSettings(
        transport={"type": "file", "log_file_path": str(events_file), "append": True}))
    result = runner.run(plan, state)

    assert result.status == "published" and [m.status for m in result.marts] == ["published"]
    mart = result.marts[0]
    assert mart.plan.run_id == f"{plan.run_id}__m0" and [p.key for p in mart.plan.partitions] == ["2024-03-01"]
    # 2024-03-09 now holds 300+400+500+1000 (source v times 10); the other six rows keep v 1, 2, 6, 7, 8, 9
    assert [tuple(r) for r in spark.table(f"{db}.events_monthly").collect()] == [(MARCH, 10, 2233)]
    meta = json.loads(spark.sql(f"DESCRIBE HISTORY {db}.events_monthly").orderBy("version", ascending=False)
                      .first()["userMetadata"])
    assert (meta["run_id"], meta["mart_run_id"], meta["action"]) == (plan.run_id, mart.plan.run_id, "publish")
    monitor = [c for c in result.checks if c.kind == "monitor"]
    assert monitor and all(c.success for c in monitor)
    assert {c.name.split(":")[0] for c in monitor} == {f"{db}.events", f"{db}.events_monthly"}
    # the mart's run is a section of the run's own report
    report = (settings.runs_dir / plan.run_id / "report.html").read_text()
    section = report[report.index(f'<section class="mart" id="mart-0" data-table="{db}.events_monthly">'):]
    assert '<span class="status status-published">published</span>' in section
    assert '<td data-total="rows_after" data-value="1">1</td>' in section  # the one monthly row

    # lineage: the run and the mart's child run each START then COMPLETE, with the versions read and written
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    name = plan.request.name
    by_run = {(e["job"]["name"], e["eventType"]): e for e in events}
    assert sorted(by_run) == sorted([(name, "START"), (name, "COMPLETE"), (f"{name}:{db}.events_monthly", "START"),
                                     (f"{name}:{db}.events_monthly", "COMPLETE")]) and len(events) == 4
    assert [e["eventType"] for e in events if e["job"]["name"] == name] == ["START", "COMPLETE"]
    done = by_run[(name, "COMPLETE")]
    assert done["run"]["runId"] == lineage_run_id(plan.run_id)
    assert [(i["name"], i["facets"]["version"]["datasetVersion"]) for i in done["inputs"]] == [
        (s.table, str(s.version)) for s in plan.source_versions]
    (out,) = done["outputs"]
    assert (out["name"], out["facets"]["version"]["datasetVersion"]) == (f"{db}.events", str(result.published_version))
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == sum(result.rows.values())
    mart_done = by_run[(f"{name}:{db}.events_monthly", "COMPLETE")]
    assert mart_done["run"]["facets"]["parent"]["run"]["runId"] == lineage_run_id(plan.run_id)
    assert mart_done["outputs"][0]["facets"]["version"]["datasetVersion"] == str(mart.published_version)

    assert main(["history", f"{db}.events_monthly"]) == 0
    assert plan.run_id in capsys.readouterr().out

    # a later commit to the target: a RESTORE would undo it too, so the rollback is refused until --force
    spark.sql(f"INSERT INTO {db}.events VALUES (99, DATE'2024-03-11', 99)")  # version 2
    rollback = ["rollback", plan.run_id, "--by", "ana@example.com", "--reason", "TEST-6 wrong numbers"]
    capsys.readouterr()
    assert main(rollback) == 4
    assert (f"error: rollback of run {plan.run_id} refused: table {db}.events has versions 2 after this run's "
            "version 1;") in capsys.readouterr().err
    assert current_version(spark, f"{db}.events") == 2 and current_version(spark, f"{db}.events_monthly") == 1
    assert Ledger(spark, settings.ledger_schema).run(plan.run_id)["status"] == "published"
    assert main([*rollback, "--force"]) == 0
    for table, version in ((f"{db}.events", 0), (f"{db}.events_monthly", 0)):
        assert_df_equality(spark.table(table), snapshot(spark, table, version), ignore_row_order=True)
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(plan.run_id)["status"] == "rolled_back"
    assert ledger.run(mart.plan.run_id)["status"] == "rolled_back"
    assert "rolled back by ana@example.com: TEST-6 wrong numbers" in ledger.run(plan.run_id)["message"]
    report = (settings.runs_dir / plan.run_id / "report.html").read_text()
    assert '<span class="status status-rolled_back">rolled_back</span></h2>' in report[report.index('class="mart"'):]
    capsys.readouterr()
    assert main(["history", f"{db}.events"]) == 0
    out = capsys.readouterr().out
    assert "rollback" in out and "publish" in out


def test_monitor_failure_restores_target_and_mart_newest_first_and_a_rollback_after_it_says_so(
        spark, settings, db, tmp_path, monkeypatch, capsys, runner):
    from backfill_lib.cli import main

    make_tables(spark, db)
    monkeypatch.setenv(MONITOR_ENV, f"{db}.events_monthly")
    plan, state = prepare(spark, settings, with_mart(tmp_path, db))
    with pytest.raises(RolledBackError, match=rf"restored {db}.events_monthly to version 0, {db}.events to version 0"):
        runner.run(plan, state)

    for table in (f"{db}.events", f"{db}.events_monthly"):
        assert current_version(spark, table) == 2  # 0 created, 1 published, 2 restored
        assert_df_equality(spark.table(table), snapshot(spark, table, 0), ignore_row_order=True)
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(plan.run_id)["status"] == "rolled_back"
    assert ledger.run(f"{plan.run_id}__m0")["status"] == "rolled_back"
    # the automatic restore made one RESTORE per table, each recorded in the plan the ledger kept
    for table in (f"{db}.events", f"{db}.events_monthly"):
        assert [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {table}").orderBy("version").collect()][1:] == \
            ["WRITE", "RESTORE"]
    assert [(t["table"], t["restore_to"]) for t in json.loads(ledger.run(plan.run_id)["rollback_plan"])["tables"]] == \
        [(f"{db}.events_monthly", 0), (f"{db}.events", 0)]

    monkeypatch.delenv(MONITOR_ENV)
    for force in ([], ["--force"]):  # a rollback of the rolled-back run restores nothing more
        capsys.readouterr()
        assert main(["rollback", plan.run_id, "--by", "ana", "--reason", "again", *force]) == 0
        assert f"run {plan.run_id} was already rolled back; nothing to restore (release failed: " in capsys.readouterr().out
    assert current_version(spark, f"{db}.events") == 2 and current_version(spark, f"{db}.events_monthly") == 2


def test_publish_refused_when_vacuum_removed_files_of_the_validated_version(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db))
    assert make_runner().run(plan, state, until="validate").status == "validated"
    (spark.createDataFrame([(1, date(2024, 3, 8), 5)], EVENTS_SCHEMA).write.format("delta").mode("overwrite")
     .option("replaceWhere", "dt = DATE'2024-03-08'").saveAsTable(f"{db}.events"))  # outside the range: version 1
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM {db}.events RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")

    vacuumed = current_version(spark, f"{db}.events")  # VACUUM logs its own start and end commits
    with pytest.raises(PublishError, match=rf"rollback readiness: table {db}.events version 0 \(the version this run "
                                           r"was validated against\) can no longer be restored: 1 of its data files"):
        make_runner().publish_validated(plan.run_id)
    assert current_version(spark, f"{db}.events") == vacuumed


def test_protected_table_needs_an_approver_recorded_in_ledger_and_commit(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db))
    guarded = make_runner(protected_tables=(f"{db}.events",))
    with pytest.raises(PublishError, match=rf"table {db}.events is protected .* needs --approve NAME"):
        guarded.run(plan, state)
    assert current_version(spark, f"{db}.events") == 0
    assert Ledger(spark, settings.ledger_schema).partitions(plan.run_id) == []  # refused before staging

    plan2, state2 = prepare(spark, settings, events_request(tmp_path, db))
    guarded.approved_by = "lead@example.com"
    assert guarded.run(plan2, state2).status == "published"
    assert Ledger(spark, settings.ledger_schema).run(plan2.run_id)["approved_by"] == "lead@example.com"
    meta = json.loads(spark.sql(f"DESCRIBE HISTORY {db}.events").where("version = 1").first()["userMetadata"])
    assert meta["approved_by"] == "lead@example.com"


def test_commit_metadata_read_from_the_log_equals_describe_history(spark, db, monkeypatch):
    from backfill_lib.adapters import delta_log as tables
    from backfill_lib.publish.commit import user_metadata

    name = f"{db}.meta"
    spark.sql(f"CREATE TABLE {name} (id INT) USING delta")
    for i in range(3):
        with user_metadata(spark, f'{{"n": {i}}}'):
            spark.sql(f"INSERT INTO {name} VALUES ({i})")
    history = [(int(r["version"]), r["userMetadata"]) for r in tables.history_since(spark, name, 1)]
    assert history == [(3, '{"n": 2}'), (2, '{"n": 1}'), (1, '{"n": 0}')]
    # read in the driver from the commits' log files (not through the fallback)
    assert tables._commit_user_metadata(spark, tables.latest_snapshot(spark, name), 1, 3) == history
    assert tables.user_metadata_since(spark, name, 1) == history
    assert tables.user_metadata_since(spark, name, 4) == []
    monkeypatch.setattr(tables, "DRIVER_READ_COMMITS", 2)  # more commits than the driver reads: DESCRIBE HISTORY
    assert tables.user_metadata_since(spark, name, 1) == history


def test_rollback_stays_possible_for_the_shorter_retention_after_the_commit(spark, db):
    from datetime import timedelta

    from delta.tables import DeltaTable

    from backfill_lib.publish.safety import rollback_until

    spark.sql(f"CREATE TABLE {db}.kept (id INT) USING delta TBLPROPERTIES ("
              "'delta.logRetentionDuration' = 'interval 5 days', 'delta.deletedFileRetentionDuration' = 'interval 2 days')")
    spark.sql(f"INSERT INTO {db}.kept VALUES (1)")
    spark.sql(f"INSERT INTO {db}.kept VALUES (2)")  # a later commit: version 1 is not the newest
    committed = {r["version"]: r["timestamp"] for r in DeltaTable.forName(spark, f"{db}.kept").history().collect()}
    until = rollback_until(spark, f"{db}.kept", 1)
    assert until - timedelta(days=2) == committed[1].astimezone(until.tzinfo)
    newest = rollback_until(spark, f"{db}.kept", 2)  # the newest commit's time, from the snapshot: history's
    assert newest - timedelta(days=2) == committed[2].astimezone(newest.tzinfo)


def test_retention_is_the_shorter_of_file_and_log_retention():
    assert parse_interval("interval 1 week") == timedelta(days=7)
    assert parse_interval("interval 36 hours") == timedelta(hours=36)
    assert retention({}) == timedelta(days=7)
    assert retention({"delta.deletedFileRetentionDuration": "interval 60 days",
                      "delta.logRetentionDuration": "interval 30 days"}) == timedelta(days=30)


def test_run_ids_and_protected_tables():
    assert check_run_id("fix_q1_2013") == "fix_q1_2013"
    with pytest.raises(RequestError, match="run ID 'a-b' must be"):
        check_run_id("a-b")
    check_protected(("prod.sales",), ["prod.sales"], "lead")
    with pytest.raises(Exception, match="table prod.sales is protected"):
        check_protected(("PROD.sales",), ["x.y", "prod.sales"], None)


def test_rollback_skips_a_table_already_back_at_its_pre_publish_content(spark, settings, db, tmp_path, runner):
    from backfill_lib.runner import prepare

    make_events(spark, db, SOURCE)
    make_monthly(spark, db)
    plan, state = prepare(spark, settings, with_mart(tmp_path, db))
    assert runner.run(plan, state).status == "published"
    spark.sql(f"RESTORE TABLE {db}.events TO VERSION AS OF 0")  # by hand, not by the run: version 2

    line = runner.rollback(plan.run_id, "ana", "undo")  # no --force: version 2 holds version 0's files
    assert line == (f"run {plan.run_id}: rolled back; rolled back by ana: undo; restored {db}.events_monthly to "
                    f"version 0, {db}.events to version 0 (already at its content)")
    history = {t: [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {db}.{t}").orderBy("version").collect()]
               for t in ("events", "events_monthly")}
    assert history == {"events": ["CREATE TABLE AS SELECT", "WRITE", "RESTORE"],
                       "events_monthly": ["CREATE TABLE AS SELECT", "WRITE", "RESTORE"]}
    for t in ("events", "events_monthly"):
        assert_df_equality(spark.table(f"{db}.{t}"), spark.read.option("versionAsOf", 0).table(f"{db}.{t}"),
                           ignore_row_order=True)
    ledger = Ledger(spark, settings.ledger_schema)  # `backfill status RUN_ID` no longer calls them published
    assert [(p["partition"], p["status"], p["rows"]) for p in ledger.partitions(plan.run_id)] == \
        [("2024-03-09", "rolled_back", 4)]
    assert {p["status"] for p in ledger.partitions(f"{plan.run_id}__m0")} == {"rolled_back"}
