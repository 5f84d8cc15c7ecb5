"""Pinned staging, gathered (few rows): inputs the other pinned tests do not cover."""

from datetime import date

import pytest

from chispa import assert_df_equality
from pyspark.sql.types import DateType, IntegerType, StringType, StructField, StructType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import GateFailedError
from backfill_lib.run.staging import Layout, pinned_layout
from backfill_lib.runner import prepare
from backfill_lib.strategies import recompute
from tests.conftest import quiet_runner, write_request

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
STRING_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("dt", StringType(), True),
                            StructField("v", IntegerType(), True)])
DATED_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("d", DateType(), True),
                           StructField("v", IntegerType(), True)])


def _request(tmp_path, db, sql, **extra):
    sql_file = tmp_path / "s.sql"
    sql_file.write_text(sql)
    fields = {"owner": "ana@example.com", "reason": "TEST-1: pinned string", "time_zone": "UTC",
              "target": {"table": f"{db}.events", "partition_column": "dt", "partition_format": "yyyy-MM-dd"},
              "range": {"start": D9.isoformat(), "end": D10.isoformat()}, "strategy": "recompute",
              "source": {"sql": str(sql_file)}, "keys": ["id"], "staging": "pinned", "batch_size": 1, **extra}
    return write_request(tmp_path / "r.yml", **fields)


def _tables(spark, db, source):
    target = [(1, "2024-03-08", 1), (2, "2024-03-09", 2), (3, "2024-03-09", 3), (4, "2024-03-10", 4)]
    spark.createDataFrame(target, STRING_SCHEMA).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.events")
    spark.createDataFrame(source, DATED_SCHEMA).write.format("delta").saveAsTable(f"{db}.src")
    return target


SQL = ("SELECT /*+ REPARTITION(3) */ id, date_format(d, 'yyyy-MM-dd') AS dt, v * 10 AS v FROM {db}.src "
       "WHERE d >= :range_start AND d < :range_end")


def test_a_pinned_recompute_of_a_string_partitioned_target_gathers_its_few_rows_and_publishes_them(
        spark, settings, db, tmp_path, monkeypatch):
    source = [(1, D8, 1), (2, D9, 2), (5, D9, 5), (6, D9, 6), (4, D10, 4), (7, D10, 7), (8, D10, 8)]
    _tables(spark, db, source)
    seen = []
    monkeypatch.setattr(recompute, "pinned_layout", lambda name: seen.append(pinned_layout(name)) or seen[-1])
    before = current_version(spark, f"{db}.events")
    plan, state = prepare(spark, settings, _request(tmp_path, db, SQL.format(db=db)))
    assert plan.staging_mode == "pinned"
    result = quiet_runner(spark, settings).run(plan, state)

    assert (result.status, result.published_version) == ("published", before + 1)
    assert seen == [Layout(True, 1, 2, 6)]
    expected = [(1, "2024-03-08", 1), (2, "2024-03-09", 20), (5, "2024-03-09", 50), (6, "2024-03-09", 60),
                (4, "2024-03-10", 40), (7, "2024-03-10", 70), (8, "2024-03-10", 80)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, STRING_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert not spark.catalog.tableExists(plan.staging_table)
    assert [(c.partition, c.success) for c in result.checks if c.kind == "post_publish"] == [
        (None, True), ("2024-03-09", True), ("2024-03-10", True)]


def test_a_pinned_recompute_whose_source_repeats_a_key_is_refused_with_nothing_published(
        spark, settings, db, tmp_path):
    source = [(2, D9, 2), (5, D9, 5), (5, D9, 6), (4, D10, 4)]
    target = _tables(spark, db, source)
    before = current_version(spark, f"{db}.events")
    plan, state = prepare(spark, settings, _request(tmp_path, db, SQL.format(db=db)))
    with pytest.raises(GateFailedError, match=r"nothing published: 1 failed checks on 1 partitions; first: key "
                                              r"keys_unique\(id\) failed on the range: duplicate keys \(id\) .*: \(5\) 2 times"):
        quiet_runner(spark, settings).run(plan, state)

    assert current_version(spark, f"{db}.events") == before
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(target, STRING_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
