"""Issue 17 item 10: a recompute on a target with the Change Data Feed on.

The default publish (one replaceWhere commit) records a delete and an insert for every row of the partitions it
replaces; the plan, the console and the report say how many. ``publish_mode: changes_only`` publishes by one
MERGE that records only the rows that differ and leaves the same rows as the replaceWhere.
"""

import json
import logging

import pytest
from chispa import assert_df_equality
from rich.console import Console

from backfill_lib.adapters.delta_log import current_version, read_table_state
from backfill_lib.core.errors import GateFailedError
from backfill_lib.plan.explain import explain
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from backfill_lib.strategies import strategy_for
from backfill_lib.plan.change_feed import ChangeRows
from tests.fixtures import D9, EVENTS_SCHEMA, TARGET_ROWS, events_request, make_events

#: 2024-03-09 of TARGET_ROWS is (3, 3), (4, 4), (5, 5): key 4 changes, key 5 disappears, key 10 appears
CHANGED_SOURCE = [(3, D9, 3), (4, D9, 40), (10, D9, 100)]
#: the target once 2024-03-09 is recomputed from CHANGED_SOURCE
EXPECTED = [r for r in TARGET_ROWS if r[1] != D9] + CHANGED_SOURCE
AS_IS_SQL = "SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end"


def cdf_events(spark, db, source_rows) -> None:
    make_events(spark, db, source_rows)
    spark.sql(f"ALTER TABLE {db}.events SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")


def dry_run(plan) -> str:
    console = Console(record=True, width=400)
    console.print(explain(plan))
    return console.export_text()


def changes(spark, table: str, version: int) -> list[tuple]:
    """The Change Data Feed of ``version``: (change type, id, dt, v), sorted."""
    rows = spark.sql(f"SELECT _change_type, id, dt, v FROM table_changes('{table}', {version}, {version})").collect()
    return sorted(tuple(r) for r in rows)


def test_default_publish_emits_a_delete_and_an_insert_for_every_row_and_says_so(spark, settings, db, tmp_path, caplog,
                                                                                 runner):
    cdf_events(spark, db, [(3, D9, 3), (4, D9, 4), (5, D9, 50)])  # one row of three changes
    request = events_request(tmp_path, db, sql=AS_IS_SQL.format(db=db))
    plan, state = prepare(spark, settings, request)

    assert state.change_data_feed is True and plan.target_change_data_feed is True
    assert strategy_for(plan.strategy, plan.request.publish_mode).change_rows(plan) == ChangeRows(False, 3, None)
    text = dry_run(plan)
    assert ("on (delta.enableChangeDataFeed): one replaceWhere commit emits 3 delete (the target's rows in range, "
            "from the Delta log) + insert (one per staged row, known after staging)") in text

    before = current_version(spark, f"{db}.events")
    with caplog.at_level(logging.INFO, logger="backfill.run"):
        result = runner.run(plan, state)

    assert result.status == "published" and result.published_version == before + 1
    assert ("change data feed: on (delta.enableChangeDataFeed): one replaceWhere commit emits 6 change rows: 3 delete"
            in caplog.text)
    version = result.published_version
    assert changes(spark, f"{db}.events", version) == sorted(
        [("delete", i, D9, i) for i in (3, 4, 5)] + [("insert", 3, D9, 3), ("insert", 4, D9, 4), ("insert", 5, D9, 50)])
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert ("change data feed: on (delta.enableChangeDataFeed): one replaceWhere commit emits 6 change rows: "
            "3 delete (the target's rows in range, from the Delta log) + 3 insert (the staged rows)") in report


def test_changes_only_merges_only_the_rows_that_differ_into_the_same_table(spark, settings, db, tmp_path, runner):
    cdf_events(spark, db, CHANGED_SOURCE)
    request = events_request(tmp_path, db, sql=AS_IS_SQL.format(db=db), publish_mode="changes_only")
    plan, state = prepare(spark, settings, request)
    strategy = strategy_for(plan.strategy, plan.request.publish_mode)
    assert strategy.name == "recompute, publish_mode changes_only"
    text = dry_run(plan)
    assert "recompute (publish_mode changes_only): every row of the 1 partitions below" in text
    assert ("on (delta.enableChangeDataFeed): one MERGE (publish_mode changes_only) emits only the rows that differ: "
            "an update_preimage and an update_postimage per changed row, an insert per new key, a delete per key no "
            "longer staged (known after staging, from the diff)") in text

    before = current_version(spark, f"{db}.events")
    result = runner.run(plan, state)

    assert result.status == "published"
    assert current_version(spark, f"{db}.events") == before + 1 == result.published_version
    version = result.published_version
    assert changes(spark, f"{db}.events", version) == [
        ("delete", 5, D9, 5), ("insert", 10, D9, 100), ("update_postimage", 4, D9, 40), ("update_preimage", 4, D9, 4)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    history = spark.sql(f"DESCRIBE HISTORY {db}.events").where(f"version = {version}").first()
    assert history["operation"] == "MERGE"
    assert json.loads(history["userMetadata"])["run_id"] == plan.run_id
    # the post-publish check read the range back and compared it with staging
    post = [(c.name, c.partition, c.success) for c in result.checks if c.kind == "post_publish"]
    assert post == [("rows_and_checksum_equal_staging", "2024-03-09", True)]
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert ("change data feed: on (delta.enableChangeDataFeed): one MERGE (publish_mode changes_only) emits 4 change "
            "rows, only the rows that differ: 1 update_preimage + 1 update_postimage + 1 insert + 1 delete "
            "(from the diff)") in report

    # the same recompute published by replaceWhere, into a twin of the target, leaves the very same rows
    twin = f"{db}_twin"
    spark.sql(f"CREATE SCHEMA {twin}")
    try:
        cdf_events(spark, twin, CHANGED_SOURCE)
        (tmp_path / "twin").mkdir()
        replaced = runner.run(*prepare(spark, settings, events_request(tmp_path / "twin", twin,
                                                                       sql=AS_IS_SQL.format(db=twin))))
        assert replaced.status == "published"
        assert_df_equality(spark.table(f"{db}.events"), spark.table(f"{twin}.events"), ignore_row_order=True)
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS {twin} CASCADE")

    message = runner.rollback(plan.run_id, "ana", "TEST-1: undo")
    assert f"restored {db}.events to version {before}" in message
    assert current_version(spark, f"{db}.events") == version + 1
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(TARGET_ROWS, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert Ledger(spark, settings.ledger_schema).run(plan.run_id)["status"] == "rolled_back"


def test_changes_only_refuses_a_target_with_duplicate_keys_in_range(spark, settings, db, tmp_path, runner):
    # Without the Change Data Feed: the plan says it is off; the MERGE would set both copies of key 3.
    make_events(spark, db, CHANGED_SOURCE)
    spark.createDataFrame([(3, D9, 3)], EVENTS_SCHEMA).write.format("delta").mode("append").saveAsTable(f"{db}.events")
    request = events_request(tmp_path, db, sql=AS_IS_SQL.format(db=db), publish_mode="changes_only",
                             gates={"allow_row_loss": True})
    plan, state = prepare(spark, settings, request)
    assert read_table_state(spark, f"{db}.events").change_data_feed is False
    assert ("off (delta.enableChangeDataFeed is not true on the target): publishing records no change rows"
            in dry_run(plan))
    before = current_version(spark, f"{db}.events")

    # refused at validation (the diff sees key 3 twice on the target's side), before the MERGE's own refusal
    with pytest.raises(GateFailedError) as err:
        runner.run(plan, state)

    assert str(err.value) == (
        f"validation gate failed for {db}.events, nothing published: 1 failed checks on 1 partitions; first: "
        "target_keys target keys unique failed on partition 2024-03-09: the target holds 1 more rows than keys in "
        "partition 2024-03-09 (duplicate keys); publish_mode changes_only would keep them: publish with "
        "publish_mode: replace")
    assert err.value.exit_code == 3
    assert current_version(spark, f"{db}.events") == before
    assert Ledger(spark, settings.ledger_schema).run(plan.run_id)["status"] == "failed"


def test_a_float_that_only_changes_the_sign_of_zero_differs(spark):
    from backfill_lib.strategies.changes_only import differs

    row = spark.sql(f"SELECT {differs('x', 'double', False)} AS d, NOT (t.x <=> s.x) AS eq_differs FROM "
                    "(SELECT 0.0D AS x) t CROSS JOIN (SELECT -0.0D AS x) s").first()
    assert (row["d"], row["eq_differs"]) == (True, False)
    nan = spark.sql(f"SELECT {differs('x', 'double', False)} AS d FROM "
                    "(SELECT double('NaN') AS x) t CROSS JOIN (SELECT double('NaN') AS x) s").first()
    assert nan["d"] is False
