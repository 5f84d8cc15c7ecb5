"""Targets with Delta auto compaction (``delta.autoOptimize.autoCompact``): the OPTIMIZE Delta commits right after
the run's publish changes no rows, so it does not block ``backfill rollback``; a commit that changed data still
does (``test_release.py``). A publish by SQL or MERGE (patch, rebuild, changes_only) runs with auto compaction off, so
no OPTIMIZE takes its session's commit metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import yaml
from chispa import assert_df_equality

from tests.conftest import ROOT, quiet_runner
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, events_request

MIN_FILES = "spark.databricks.delta.autoCompact.minNumFiles"
MAX_RECORDS = "spark.sql.files.maxRecordsPerFile"


@dataclass
class OwnLedger:
    """The settings of a test whose runs record in a ledger of their own, and how the CLI gets them."""

    settings: object
    #: ``--settings FILE`` for :func:`backfill_lib.cli.main`: the settings file with that ledger
    cli: list[str]

    def runner(self, spark):
        return quiet_runner(spark, self.settings)


@pytest.fixture
def own_ledger(spark, settings, db, tmp_path):
    """A ledger schema of this test's own (``<db>_ledger``), dropped after it.

    The tests here set :data:`MIN_FILES` and :data:`MAX_RECORDS` on the session, and every ledger table compacts
    itself (``LEDGER_PROPERTIES``). On the worker's shared ledger, each ledger commit of the run then made Delta
    rewrite the table's every row (the events of all the worker's earlier tests) into a file of its own, again at
    each later commit, and the worker's later tests read those files: on the worker's shared ledger these tests
    took nearly twice as long as on ledgers of their own and left thousands of small files behind. The target's
    compaction, which the tests check, does not depend on where the ledger is."""
    schema = f"{db}_ledger"
    data = yaml.safe_load((ROOT / "conf" / "settings.yml").read_text())
    path = tmp_path / "own_ledger_settings.yml"
    path.write_text(yaml.safe_dump({**data, "ledger_schema": schema}))
    yield OwnLedger(settings.model_copy(update={"ledger_schema": schema}), ["--settings", str(path)])
    spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def optimize(*actions: dict, **info) -> list[dict]:
    return [{"commitInfo": {"operation": "OPTIMIZE", "operationParameters": {"auto": "true"}, **info}}, *actions]


ADD = {"add": {"path": "part-1.parquet", "dataChange": False}}
REMOVE = {"remove": {"path": "part-0.parquet", "dataChange": False}}


def test_only_delta_s_own_optimize_without_data_change_or_user_metadata_is_data_neutral():
    from backfill_lib.publish.commit import data_neutral

    assert data_neutral(optimize(ADD, REMOVE))
    assert not data_neutral(optimize({"add": {**ADD["add"], "dataChange": True}}, REMOVE))
    assert not data_neutral(optimize(ADD, {"remove": {"path": "p", "dataChange": None}}))  # not said: a change
    assert not data_neutral(optimize(ADD, REMOVE, userMetadata='{"run_id": "r"}'))  # someone's named commit
    assert not data_neutral([{"commitInfo": {"operation": "WRITE"}}, ADD])
    assert not data_neutral(optimize(ADD, {"metaData": {"id": "x"}}))  # a schema or property change
    assert not data_neutral(None) and not data_neutral([ADD])  # log gone; no commitInfo


def history(spark, table):
    rows = spark.sql(f"DESCRIBE HISTORY {table}").orderBy("version").collect()
    return [(r["operation"], (json.loads(r["userMetadata"]) if r["userMetadata"] else {}).get("action"))
            for r in rows]


ROWS = [(1, D8, 1), (2, D8, 2), (3, D9, 3), (4, D9, 4), (5, D9, 5), (6, D10, 6)]


def make_compacting(spark, db) -> list[tuple]:
    """``db.events`` by ``dt`` (ROWS, one file per day; version 2 turns auto compaction on) and ``db.events_src``
    (2024-03-09 recomputed, with a new id 7); returns ROWS."""
    spark.sql(f"CREATE TABLE {db}.events (id INT, dt DATE, v INT) USING delta PARTITIONED BY (dt)")
    spark.createDataFrame(ROWS, EVENTS_SCHEMA).write.format("delta").mode("append").saveAsTable(f"{db}.events")
    spark.sql(f"ALTER TABLE {db}.events SET TBLPROPERTIES ('delta.autoOptimize.autoCompact' = 'true')")
    spark.createDataFrame([(3, D9, 30), (4, D9, 40), (5, D9, 50), (7, D9, 70)], EVENTS_SCHEMA) \
        .write.format("delta").saveAsTable(f"{db}.events_src")
    return ROWS


def test_rollback_through_the_cli_is_not_blocked_by_the_auto_compaction_after_the_publish(spark, db, tmp_path,
                                                                                         own_ledger):
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare

    rows = make_compacting(spark, db)
    # 4 files of one row in 2024-03-09 after the publish, and compaction from 3 small files (Delta's default: 50)
    spark.conf.set(MIN_FILES, "3")
    spark.conf.set(MAX_RECORDS, "1")
    try:
        plan, state = prepare(spark, own_ledger.settings, events_request(tmp_path, db, sql=(
            f"SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")))
        result = own_ledger.runner(spark).run(plan, state)
        assert (result.status, result.published_version) == ("published", 3)
        assert [c.success for c in result.checks if c.kind in ("post_publish", "monitor")] == [True, True, True]
        assert history(spark, f"{db}.events")[3:] == [("WRITE", "publish"), ("OPTIMIZE", None)]

        assert main([*own_ledger.cli, "rollback", plan.run_id, "--by", "ana", "--reason", "TEST-17 probe"]) == 0
    finally:
        spark.conf.unset(MIN_FILES)
        spark.conf.unset(MAX_RECORDS)
    assert history(spark, f"{db}.events")[3:] == [("WRITE", "publish"), ("OPTIMIZE", None), ("RESTORE", "rollback")]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(rows, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


def test_a_patch_publish_to_a_compacting_target_records_its_merge_and_no_optimize_follows(spark, db, tmp_path,
                                                                                          own_ledger):
    from backfill_lib.runner import prepare

    make_compacting(spark, db)
    spark.conf.set(MIN_FILES, "3")
    spark.conf.set(MAX_RECORDS, "1")
    try:
        plan, state = prepare(spark, own_ledger.settings, events_request(tmp_path, db, strategy="patch", sql=(
            f"SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")))
        result = own_ledger.runner(spark).run(plan, state)
    finally:
        spark.conf.unset(MIN_FILES)
        spark.conf.unset(MAX_RECORDS)
    # Before the fix the OPTIMIZE (version 4) came next, carrying the run's userMetadata from the session conf, and
    # was recorded as the run's version: a rollback restored to the MERGE's own result.
    assert history(spark, f"{db}.events")[3:] == [("MERGE", "publish")]
    assert result.published_version == 3
