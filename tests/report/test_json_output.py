"""``--json``: one document on stdout per command, valid against the shipped JSON Schema, the rest on stderr; and
``runs/RUN_ID/summary.json`` equal to the run's document."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from backfill_lib.core.checks import Check
from backfill_lib.report.documents import (
    SCHEMA_FILE, SCHEMA_VERSION, json_schema, plan_document, run_document, schema_text, to_json,
)

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def valid(document: dict, kind: str) -> dict:
    """``document`` after checking it against the committed schema and its version and kind."""
    VALIDATOR.validate(document)
    assert (document["schema_version"], document["kind"]) == (SCHEMA_VERSION, kind)
    return document


def one_document(out: str) -> dict:
    """The only JSON document of ``out`` (``json.loads`` refuses anything before or after it)."""
    assert out.endswith("}\n")
    return json.loads(out)


def test_the_committed_schema_is_the_one_the_models_generate():
    # regenerate: python -m backfill_lib.report.documents > backfill_lib/schemas/backfill-output-v1.schema.json
    assert SCHEMA_FILE.read_text() == schema_text()
    jsonschema.Draft202012Validator.check_schema(json_schema())
    assert sorted(json_schema()["discriminator"]["mapping"]) == ["error", "history", "plan", "report", "run", "status"]


def test_the_schema_ships_in_the_wheel_as_package_data():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    # beside the Java sources of the local file systems (backfill_lib/adapters/local_fs.py)
    assert project["tool"]["setuptools"]["package-data"]["backfill_lib"] == ["schemas/*.json", "adapters/java/*.java"]
    assert SCHEMA_FILE.parent.name == "schemas" and SCHEMA_FILE.parent.parent.name == "backfill_lib"


def test_a_plan_built_without_spark_gives_its_range_partitions_batches_and_statement():
    from tests.plan.test_plan import plan_for, state

    doc = valid(json.loads(to_json(plan_document(plan_for(state())))), "plan")
    assert (doc["plan_id"], doc["request"], doc["strategy"]) == ("bf_test", "fix_daily_route_delays", "recompute")
    assert doc["range"] == {"start": "2013-01-01", "end_inclusive": "2013-03-31", "start_bound": "2013-01-01",
                            "end_exclusive": "2013-04-01", "time_zone": "America/New_York", "grain": "day",
                            "session_time_zone": "America/New_York", "write_time_zone": "America/New_York"}
    assert len(doc["partitions"]) == 90 and [len(b["partitions"]) for b in doc["batches"]] == [31, 31, 28]
    assert doc["partitions"][0] == {"key": "2013-01-01", "batch": 0, "files": 2, "bytes": 1000, "rows": 265}
    assert doc["partitions"][1]["rows"] == 0 and doc["partitions"][-1]["batch"] == 2
    assert doc["totals"] == {"files": 3, "bytes": 1500, "rows": 551}
    assert doc["target"]["version"] == 7 and doc["staging_table"] == "stg.demo__daily_route_delays__<run ID>"
    assert doc["publish_statement"] == ("replaceWhere on demo.daily_route_delays: (`flight_date` >= DATE'2013-01-01' "
                                        "AND `flight_date` < DATE'2013-04-01')")
    assert doc["source_versions"] is None  # pinned when a run starts


def test_a_run_document_lists_failed_checks_first_and_unknown_totals_as_null(tmp_path):
    from tests.plan.test_plan import plan_for, state

    plan = plan_for(state())
    record = {"run_id": "bf_test", "status": "failed", "request_name": "fix_daily_route_delays", "owner": "o",
              "reason": "r", "strategy": "recompute", "target_table": "demo.daily_route_delays",
              "staging_table": plan.staging_table, "target_version_seen": 7, "pre_publish_version": None,
              "published_version": None, "rollback_until": None, "approved_by": None, "message": "gate failed",
              "plan_json": json.dumps(plan.summary())}
    checks = (Check("row_count", "rows", True, "2013-01-01"), Check("gx", "not_null", False, "2013-01-02", 0, "1", "0"))
    doc = valid(json.loads(to_json(run_document(record, {"2013-01-01": 260, "2013-01-02": None}, checks, {},
                                                tmp_path))), "run")
    assert [c["name"] for c in doc["checks"]["items"]] == ["not_null", "rows"]
    assert (doc["checks"]["passed"], doc["checks"]["failed"]) == (1, 1)
    by_key = {p["partition"]: p for p in doc["partitions"]}
    assert (by_key["2013-01-01"]["rows_before"], by_key["2013-01-01"]["rows_after"]) == (265, 260)
    assert by_key["2013-01-02"]["gate"] == "failed" and by_key["2013-01-01"]["gate"] == "passed"
    assert doc["totals"] == {"partitions": 90, "rows_before": 551, "rows_after": None}
    assert doc["report"]["summary"] == str(tmp_path / "summary.json")
    assert (doc["staging"], doc["staging_table"]) == ("durable", plan.staging_table)


def test_errors_before_spark_print_an_error_document_with_the_exit_code(tmp_path, capsys):
    from backfill_lib.cli import main

    assert main(["plan", str(tmp_path / "missing.yml"), "--json"]) == 2
    out, err = capsys.readouterr()
    doc = valid(one_document(out), "error")
    assert (doc["error_class"], doc["exit_code"], doc["run_id"]) == ("RequestError", 2, None)
    assert "missing.yml" in doc["message"] and err.startswith("error: ") and doc["message"] in err

    assert main(["status", "--json", "--no-such-option"]) == 2  # click's usage error, before any command runs
    out, err = capsys.readouterr()
    doc = valid(one_document(out), "error")
    assert (doc["error_class"], doc["exit_code"]) == ("NoSuchOption", 2)
    assert "--no-such-option" in doc["message"] and "--no-such-option" in err


def test_under_json_print_descriptor_1_and_child_processes_write_to_stderr():
    import subprocess
    import sys

    code = ("import os, subprocess, sys\n"
            "from backfill_lib.cli import console, stdout_to_stderr\n"
            "with stdout_to_stderr():\n"
            "    print('print'); console.print('console'); sys.stdout.flush(); os.write(1, b'descriptor\\n')\n"
            "    subprocess.run(['echo', 'child'], check=True)  # as the JVM, started inside, inherits it\n"
            "print('the document')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "the document\n"
    assert done.stderr.split() == ["print", "console", "descriptor", "child"]


def test_plan_run_status_history_report_through_the_cli(spark, settings, db, tmp_path, capsys):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.cli import main
    from tests.fixtures import D8, D10, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    request = str(events_request(tmp_path, db, start=D8, end=D10))
    before = current_version(spark, f"{db}.events")

    assert main(["plan", request, "--json"]) == 0
    out, err = capsys.readouterr()
    plan = valid(one_document(out), "plan")
    assert [(p["key"], p["rows"]) for p in plan["partitions"]] == [("2024-03-08", 2), ("2024-03-09", 3),
                                                                    ("2024-03-10", 4)]
    assert (plan["range"]["end_inclusive"], plan["range"]["end_exclusive"]) == ("2024-03-10", "2024-03-11")
    assert plan["source_versions"] == [{"table": f"{db}.events_src", "version": 0}]

    assert main(["run", request, "--run-id", "json_run_1", "--json"]) == 0
    out, err = capsys.readouterr()
    run = valid(one_document(out), "run")
    assert "run ID: json_run_1" in err  # progress on stderr
    assert (run["run_id"], run["status"]) == ("json_run_1", "published")
    assert run["versions"] == {"target_seen": before, "pre_publish": before, "published": before + 1}
    assert run["totals"] == {"partitions": 3, "rows_before": 9, "rows_after": 9}
    assert run["checks"]["failed"] == 0 and run["checks"]["total"] > 0 and run["rollback_until"].endswith("+00:00")
    summary = settings.runs_dir / "json_run_1" / "summary.json"
    assert run["report"]["summary"] == str(summary) and json.loads(summary.read_text()) == run

    assert main(["status", "json_run_1", "--json"]) == 0
    status = valid(one_document(capsys.readouterr().out), "status")
    assert status["runs"] is None and (status["run"]["run_id"], status["run"]["status"]) == ("json_run_1", "published")
    assert [(p["partition"], p["rows"]) for p in status["run"]["partitions"]] == [
        ("2024-03-08", 2), ("2024-03-09", 3), ("2024-03-10", 4)]

    assert main(["history", f"{db}.events", "--json"]) == 0
    history = valid(one_document(capsys.readouterr().out), "history")
    assert [(v["version"], v["action"], v["run_id"], v["run_status"]) for v in history["versions"]] == [
        (before + 1, "publish", "json_run_1", "published")]

    assert main(["report", "json_run_1", "--json"]) == 0
    report = valid(one_document(capsys.readouterr().out), "report")
    assert (report["report"], report["totals"]) == (run["report"], run["totals"])
    assert Path(report["report"]["html"]).exists() and json.loads(summary.read_text()) == run

    assert main(["history", f"{db}.nope", "--json"]) == 2
    out, err = capsys.readouterr()
    error = valid(one_document(out), "error")
    assert (error["error_class"], error["exit_code"]) == ("IntakeError", 2) and f"{db}.nope" in error["message"]


def test_every_time_in_a_document_is_iso_8601_utc_to_the_second():
    from datetime import datetime, timedelta, timezone
    from zoneinfo import ZoneInfo

    from backfill_lib.report.documents import utc_text

    new_york = datetime(2026, 12, 4, 14, 1, 44, 123456, tzinfo=ZoneInfo("America/New_York"))
    assert utc_text(new_york) == "2026-12-04T19:01:44+00:00"
    assert utc_text("2026-12-04T14:01:44-05:00") == "2026-12-04T19:01:44+00:00"
    assert utc_text(datetime(2026, 12, 4, 19, 1, 44, tzinfo=timezone(timedelta(0)))) == "2026-12-04T19:01:44+00:00"
    assert utc_text(None) is None


def test_history_json_gives_commit_times_in_utc_whatever_the_session_zone(spark, db, capsys):
    from datetime import datetime, timezone

    from pyspark.sql import functions as F

    from backfill_lib.cli import main

    assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"  # the settings' zone, not UTC
    spark.createDataFrame([(1,)], "id INT").write.format("delta").saveAsTable(f"{db}.t")
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata",
                   json.dumps({"run_id": "bf_utc", "action": "publish", "owner": "ana"}))
    try:
        spark.createDataFrame([(2,)], "id INT").write.format("delta").mode("append").saveAsTable(f"{db}.t")
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    micros = spark.sql(f"DESCRIBE HISTORY {db}.t").where("version = 1").select(F.unix_micros("timestamp")).first()[0]
    expected = datetime.fromtimestamp(micros / 1_000_000, timezone.utc).isoformat(timespec="seconds")

    assert main(["history", f"{db}.t", "--json"]) == 0
    history = valid(one_document(capsys.readouterr().out), "history")
    assert [(v["version"], v["run_id"], v["committed"]) for v in history["versions"]] == [(1, "bf_utc", expected)]
    assert expected.endswith("+00:00")
