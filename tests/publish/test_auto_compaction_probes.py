"""Targets with Delta auto compaction, beyond recompute and patch on unique keys: a rebuild (its CREATE OR
REPLACE is the published version, a rollback through the CLI restores the old rows) and a patch whose source
repeats a key (the gate fails before anything is committed, so no OPTIMIZE either)."""

from __future__ import annotations

import json
from contextlib import contextmanager
import re
from datetime import datetime, timezone

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import GateFailedError
from tests.conftest import write_request
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, events_request
from tests.publish.test_auto_compaction import MAX_RECORDS, MIN_FILES, history, make_compacting
from tests.publish.test_auto_compaction import own_ledger  # noqa: F401  (the fixture)


@contextmanager
def compacting_confs(spark):
    """One row per data file, and auto compaction from 3 small files (Delta's default: 50); both unset after."""
    spark.conf.set(MIN_FILES, "3")
    spark.conf.set(MAX_RECORDS, "1")
    try:
        yield
    finally:
        spark.conf.unset(MIN_FILES)
        spark.conf.unset(MAX_RECORDS)


def rebuild_request(tmp_path, db):
    """A whole-table rebuild of ``db.events`` from ``db.events_all`` (v times 10), checked for non-null ids."""
    sql = tmp_path / "rebuild.sql"
    sql.write_text(f"SELECT id, dt, v * 10 AS v FROM {db}.events_all")
    suite = tmp_path / "rebuild_suite.json"
    suite.write_text(json.dumps({"name": "rebuild", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}]}))
    return write_request(tmp_path / "rebuild.yml", owner="ana@example.com", reason="TEST-17 rebuild probe",
                         target={"table": f"{db}.events", "partition_column": "dt", "grain": "day"},
                         time_zone="UTC", strategy="rebuild", source={"sql": str(sql)}, keys=["id"],
                         expectations=str(suite))


def test_a_rebuild_of_a_compacting_target_publishes_its_own_commit_and_rolls_back_through_the_cli(
        spark, db, tmp_path, own_ledger):
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare

    rows = make_compacting(spark, db)
    # every day kept (no row-loss gate), 2024-03-09 as in events_src
    rebuilt = [(1, D8, 1), (2, D8, 2), (3, D9, 3), (4, D9, 4), (5, D9, 5), (7, D9, 7), (6, D10, 6)]
    spark.createDataFrame(rebuilt, EVENTS_SCHEMA).write.format("delta").saveAsTable(f"{db}.events_all")
    with compacting_confs(spark):  # the rebuild writes 4 one-row files in 2024-03-09: enough to compact
        plan, state = prepare(spark, own_ledger.settings, rebuild_request(tmp_path, db))
        result = own_ledger.runner(spark).run(plan, state)
        assert (result.status, result.published_version) == ("published", 3)
        assert history(spark, f"{db}.events")[3:] == [("CREATE OR REPLACE TABLE AS SELECT", "publish")]
        assert_df_equality(spark.table(f"{db}.events"),
                           spark.createDataFrame([(i, d, v * 10) for i, d, v in rebuilt], EVENTS_SCHEMA),
                           ignore_row_order=True, ignore_nullable=True)
        # the table keeps its auto compaction: the rebuild copied the property
        props = spark.sql(f"DESCRIBE DETAIL {db}.events").first()["properties"]
        assert props.get("delta.autoOptimize.autoCompact") == "true"

        assert main([*own_ledger.cli, "rollback", plan.run_id, "--by", "ana", "--reason", "TEST-17 probe"]) == 0
    assert history(spark, f"{db}.events")[3:] == [("CREATE OR REPLACE TABLE AS SELECT", "publish"),
                                                  ("RESTORE", "rollback")]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(rows, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


def test_a_patch_repeating_a_source_key_on_a_compacting_target_fails_the_gate_and_writes_no_version(
        spark, db, tmp_path, own_ledger):
    from backfill_lib.runner import prepare

    rows = make_compacting(spark, db)
    spark.createDataFrame([(3, D9, 31)], EVENTS_SCHEMA).write.format("delta").mode("append") \
        .saveAsTable(f"{db}.events_src")  # id 3 twice in 2024-03-09
    before = current_version(spark, f"{db}.events")
    with compacting_confs(spark):
        plan, state = prepare(spark, own_ledger.settings, events_request(tmp_path, db, strategy="patch", sql=(
            f"SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")))
        with pytest.raises(GateFailedError, match=r"validation gate failed for .*\.events, nothing published") as failed:
            own_ledger.runner(spark).run(plan, state)
    assert any(re.search(r"keys_unique\(id\) failed on the range: duplicate keys \(id\) in .*: \(3\) 2 times$",
                         c.describe()) for c in failed.value.failures)
    assert before == 2
    assert current_version(spark, f"{db}.events") == 2
    assert history(spark, f"{db}.events")[2:] == [("SET TBLPROPERTIES", None)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(rows, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


HITS = StructType([StructField("id", IntegerType(), False), StructField("h", TimestampType(), True),
                   StructField("v", IntegerType(), True)])


def utc(day: int, hour: int) -> datetime:
    return datetime(2024, 3, day, hour, tzinfo=timezone.utc)


# New York (the settings' zone) springs forward at 07:00Z on 2024-03-10; the request's day is UTC's.
HITS_ROWS = [(1, utc(10, 6), 1), (2, utc(10, 7), 2), (3, utc(10, 7), 3), (4, utc(10, 7), 4), (5, utc(10, 8), 5),
             (6, utc(11, 0), 6)]


def test_an_hourly_recompute_in_utc_on_a_compacting_target_over_the_dst_night_rolls_back_exactly(
        spark, db, tmp_path, own_ledger):
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare

    spark.sql(f"CREATE TABLE {db}.hits (id INT, h TIMESTAMP, v INT) USING delta PARTITIONED BY (h)")
    spark.createDataFrame(HITS_ROWS, HITS).write.format("delta").mode("append").saveAsTable(f"{db}.hits")
    spark.sql(f"ALTER TABLE {db}.hits SET TBLPROPERTIES ('delta.autoOptimize.autoCompact' = 'true')")
    spark.createDataFrame(HITS_ROWS[:5] + [(7, utc(10, 7), 7)], HITS).write.format("delta") \
        .saveAsTable(f"{db}.hits_src")
    sql = tmp_path / "hits.sql"
    sql.write_text(f"SELECT id, h, v * 10 AS v FROM {db}.hits_src WHERE h >= :range_start AND h < :range_end")
    suite = tmp_path / "hits.json"
    suite.write_text('{"name": "hits", "expectations": [{"type": "expect_column_values_to_be_unique", '
                     '"kwargs": {"column": "id"}}]}')
    path = write_request(tmp_path / "hits.yml", owner="ana@example.com", reason="TEST-17 hourly probe",
                         target={"table": f"{db}.hits", "partition_column": "h", "grain": "hour"},
                         range={"start": "2024-03-10", "end": "2024-03-10"}, time_zone="UTC",
                         strategy="recompute", source={"sql": str(sql)}, keys=["id"], expectations=str(suite))
    with compacting_confs(spark):  # 4 one-row files in 07:00Z after the publish: compacted
        plan, state = prepare(spark, own_ledger.settings, path)
        assert len(plan.partitions) == 24 and plan.partitions[7].key == "2024-03-10T07:00:00+00:00"
        result = own_ledger.runner(spark).run(plan, state)
        assert (result.status, result.published_version) == ("published", 3)
        assert history(spark, f"{db}.hits")[3:] == [("WRITE", "publish"), ("OPTIMIZE", None)]
        assert_df_equality(spark.table(f"{db}.hits"), spark.createDataFrame(
            [(i, h, v * 10) for i, h, v in HITS_ROWS[:5]] + [(7, utc(10, 7), 70), HITS_ROWS[5]], HITS),
            ignore_row_order=True, ignore_nullable=True)

        assert main([*own_ledger.cli, "rollback", plan.run_id, "--by", "ana", "--reason", "TEST-17 probe"]) == 0
    assert history(spark, f"{db}.hits")[3:] == [("WRITE", "publish"), ("OPTIMIZE", None), ("RESTORE", "rollback")]
    assert_df_equality(spark.table(f"{db}.hits"), spark.createDataFrame(HITS_ROWS, HITS),
                       ignore_row_order=True, ignore_nullable=True)
