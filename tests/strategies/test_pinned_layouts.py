"""Pinned publishing as the rows lie (or repartitioned) on layouts test_pinned.py does not cover: a target
partitioned by two columns (the range's ``dt`` and ``region``), with ``target.where``, and several batches (a helper's inputs)."""

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import DateType, IntegerType, StringType, StructField, StructType

from backfill_lib.run import staging
from backfill_lib.run.staging import Layout, pinned_layout
from backfill_lib.runner import prepare
from backfill_lib.strategies import recompute
from tests.conftest import quiet_runner
from tests.fixtures import D8, D9, D10, events_request

SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("dt", DateType(), True),
                     StructField("region", StringType(), True), StructField("v", IntegerType(), True)])
TARGET = [(1, D8, "EU", 1), (2, D8, "US", 2), (3, D9, "EU", 3), (4, D9, "US", 4), (5, D9, "EU", 5),
          (6, D10, "EU", 6), (7, D10, "US", 7), (8, D10, "APAC", 8)]
SOURCE = [(1, D8, "EU", 10), (2, D8, "US", 20), (3, D9, "EU", 30), (4, D9, "US", 40), (5, D9, "EU", 50),
          (10, D9, "APAC", 100), (6, D10, "EU", 60), (7, D10, "US", 70), (9, D10, "US", 90)]


def _make(spark, db):
    for name, rows in (("events", TARGET), ("events_src", SOURCE)):
        spark.createDataFrame(rows, SCHEMA).write.format("delta").partitionBy("dt", "region").saveAsTable(f"{db}.{name}")


def _run(spark, settings, db, tmp_path, monkeypatch, hint, start, end, where=None, **extra):
    seen = []
    monkeypatch.setattr(staging, "SMALL_PIN_ROWS", 0)  # as many rows as a large run's: none gathered
    monkeypatch.setattr(recompute, "pinned_layout", lambda name: seen.append(pinned_layout(name)) or seen[-1])
    filt = f" AND ({where})" if where else ""
    sql = (f"SELECT /*+ {hint} */ id, dt, region, v * 10 AS v FROM {db}.events_src "
           f"WHERE dt >= :range_start AND dt < :range_end{filt}")
    target = {"table": f"{db}.events", "partition_column": "dt", "grain": "day"}
    if where:
        target["where"] = where
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=start, end=end, sql=sql,
                                                          staging="pinned", target=target, **extra))
    result = quiet_runner(spark, settings).run(plan, state)
    assert result.status == "published"
    return seen


def _check(spark, db, expected, files):
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    history = spark.sql(f"DESCRIBE HISTORY {db}.events LIMIT 1").first()
    assert history["operationMetrics"]["numFiles"] == str(files)


@pytest.mark.parametrize("hint, layout", [
    ("REPARTITION_BY_RANGE(2, dt)", Layout(True, 2, 2, 7)),  # each day in its own Spark partition: as they lie
    ("REPARTITION(1)", Layout(True, 1, 2, 7)),  # both days in one Spark partition: too few tasks, repartitioned
])
def test_two_partition_columns_publish_one_file_per_dt_region_pair(spark, settings, db, tmp_path, monkeypatch,
                                                                   hint, layout):
    _make(spark, db)
    seen = _run(spark, settings, db, tmp_path, monkeypatch, hint, D9, D10)
    assert seen == [layout]
    expected = [r for r in TARGET if r[1] == D8] + [(i, d, g, v * 10) for i, d, g, v in SOURCE if d != D8]
    _check(spark, db, expected, 5)  # D9: EU, US, APAC; D10: EU, US


def test_two_partition_columns_with_where_replace_only_the_where_pairs(spark, settings, db, tmp_path, monkeypatch):
    _make(spark, db)
    seen = _run(spark, settings, db, tmp_path, monkeypatch, "REPARTITION_BY_RANGE(2, dt)", D9, D10,
                where="region = 'EU'")
    assert seen == [Layout(True, 2, 2, 3)]
    expected = ([r for r in TARGET if r[1] == D8 or r[2] != "EU"]
                + [(3, D9, "EU", 300), (5, D9, "EU", 500), (6, D10, "EU", 600)])
    _check(spark, db, expected, 2)  # D9/EU, D10/EU


def test_two_partition_columns_in_batches_with_where(spark, settings, db, tmp_path, monkeypatch):
    _make(spark, db)
    seen = _run(spark, settings, db, tmp_path, monkeypatch, "REPARTITION_BY_RANGE(2, dt)", D8, D10,
                where="region <> 'EU'", batch_size=1)
    assert seen == [Layout(True, 3, 3, 5)]
    expected = ([r for r in TARGET if r[2] == "EU"]
                + [(2, D8, "US", 200), (4, D9, "US", 400), (10, D9, "APAC", 1000), (7, D10, "US", 700),
                   (9, D10, "US", 900)])
    _check(spark, db, expected, 4)  # D8/US, D9/US, D9/APAC, D10/US
