"""OpenLineage events from ledger run events: parent runs, run IDs, and the events a file transport writes. No
Spark: the emitter is fed ledger records as the ledger passes them."""

from __future__ import annotations

import json
import uuid

import pytest

from backfill_lib.adapters.lineage import LineageEmitter, make_client
from backfill_lib.core.errors import ConfigError
from backfill_lib.core.lineage import configured_by_environment, external_parent, lineage_run_id, parse_parent
from backfill_lib.core.settings import LineageSettings

AIRFLOW_RUN = "0192f3a4-5b6c-7d8e-9f01-23456789abcd"
PLAN = {"parent_run_id": None, "source_versions": [{"table": "demo.flights", "version": 12},
                                                   {"table": "demo.carriers", "version": 3}]}
RECORD = {"run_id": "r20240309_abc", "request_name": "fix_daily", "target_table": "demo.daily",
          "target_version_seen": 4, "published_version": None, "message": None, "plan_json": json.dumps(PLAN)}


def test_parent_runs_and_run_ids():
    assert parse_parent(f"airflow/dag_x.task/y/{AIRFLOW_RUN}", "X").job == "dag_x.task/y"
    with pytest.raises(ConfigError, match=r"^OPENLINEAGE_PARENT_ID: 'airflow/job/42' is not a parent run"):
        parse_parent("airflow/job/42", "OPENLINEAGE_PARENT_ID")
    env = {"OPENLINEAGE_PARENT_ID": f"airflow/dag.task/{AIRFLOW_RUN}"}
    assert external_parent(f"other/job/{uuid.uuid4()}", env).namespace == "airflow"  # the environment wins
    assert external_parent(None, {}) is None
    assert str(uuid.UUID(lineage_run_id("r1"))) == lineage_run_id("r1") != lineage_run_id("r2")
    assert configured_by_environment({"OPENLINEAGE__TRANSPORT__TYPE": "console"})
    assert not configured_by_environment({"OPENLINEAGE_PARENT_ID": "x"})


def test_no_transport_sends_nothing(monkeypatch):
    for key in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    assert make_client(LineageSettings()) is None


def test_file_transport_gets_start_then_complete_with_versions_rows_and_parent(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"airflow/backfills.run/{AIRFLOW_RUN}")
    out = tmp_path / "ol.jsonl"
    settings = LineageSettings(transport={"type": "file", "log_file_path": str(out), "append": True})
    emitter = LineageEmitter(settings, make_client(settings), lambda run_id: {"2024-03-09": 4, "2024-03-10": 3})
    emitter(RECORD, "planned")
    emitter(RECORD, "staging")  # no event
    emitter({**RECORD, "published_version": 5}, "published")
    mart_plan = {"parent_run_id": RECORD["run_id"], "source_versions": [{"table": "demo.daily", "version": 5}]}
    emitter({**RECORD, "run_id": "r20240309_abc__m0", "request_name": "fix_daily:demo.monthly",
             "target_table": "demo.monthly", "message": "gate failed: sum(x)", "plan_json": json.dumps(mart_plan)},
            "failed")

    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(e["eventType"], e["job"]["name"]) for e in events] == [
        ("START", "fix_daily"), ("COMPLETE", "fix_daily"), ("FAIL", "fix_daily:demo.monthly")]
    start, complete, fail = events
    assert start["run"]["runId"] == complete["run"]["runId"] == lineage_run_id("r20240309_abc")
    assert complete["run"]["facets"]["externalQuery"]["externalQueryId"] == "r20240309_abc"
    assert complete["run"]["facets"]["parent"]["run"]["runId"] == AIRFLOW_RUN
    parent_job = complete["run"]["facets"]["parent"]["job"]
    assert (parent_job["namespace"], parent_job["name"]) == ("airflow", "backfills.run")
    assert [(i["name"], i["facets"]["version"]["datasetVersion"]) for i in complete["inputs"]] == [
        ("demo.flights", "12"), ("demo.carriers", "3")]
    (output,) = complete["outputs"]
    assert (output["name"], output["facets"]["version"]["datasetVersion"]) == ("demo.daily", "5")
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 7
    # the mart's child run names the backfill run as its parent, and says why it failed
    assert fail["run"]["facets"]["parent"]["run"]["runId"] == lineage_run_id("r20240309_abc")
    assert fail["run"]["facets"]["parent"]["job"]["name"] == "fix_daily"
    assert fail["run"]["facets"]["errorMessage"]["message"] == "gate failed: sum(x)"
