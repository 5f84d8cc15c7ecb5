"""A reconciliation rule whose source is keyed by a TIMESTAMP data column (an unpartitioned raw table)."""

from datetime import datetime, timezone

from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.runner import prepare
from tests.fixtures import D8, D10, FULL_SOURCE, events_request, make_events

RAW = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), False)])


def test_a_rule_keyed_by_a_timestamp_data_column_counts_each_day_of_the_request_zone(spark, settings, db, tmp_path,
                                                                                   runner):
    # Berlin is UTC+1 in March: 00:30 Berlin on the 8th is 23:30 UTC on the 7th, 23:30 Berlin on the 10th is 22:30
    # UTC on the 10th. Keyed by the UTC day, the 8th would count 1 row short and the 7th (outside) 1 extra.
    make_events(spark, db, FULL_SOURCE)
    utc = timezone.utc
    raw = [(1, datetime(2024, 3, 7, 23, 30, tzinfo=utc)), (2, datetime(2024, 3, 8, 12, 0, tzinfo=utc)),
           (3, datetime(2024, 3, 9, 1, 0, tzinfo=utc)), (4, datetime(2024, 3, 9, 9, 0, tzinfo=utc)),
           (5, datetime(2024, 3, 9, 22, 59, tzinfo=utc))]
    raw += [(i, datetime(2024, 3, 10, 22, 30, tzinfo=utc)) for i in range(6, 10)]
    raw += [(10, datetime(2024, 3, 10, 23, 30, tzinfo=utc))]  # the 11th in Berlin: outside the range
    spark.createDataFrame(raw, RAW).write.format("delta").saveAsTable(f"{db}.raw_ts")
    rule = {"name": "rows_equal_raw", "metric": "count(*)",
            "source": {"table": f"{db}.raw_ts", "partition_column": "ts", "metric": "count(*)"}}
    path = events_request(tmp_path, db, start=D8, end=D10, time_zone="Europe/Berlin", reconciliation=[rule])
    plan, state = prepare(spark, settings, path)
    result = runner.run(plan, state)
    assert result.status == "published"
    assert current_version(spark, f"{db}.events") == 1
    checks = {(c.partition, c.observed, c.expected) for c in result.checks
              if c.kind == "reconciliation" and c.name == "rows_equal_raw"}
    assert checks == {("2024-03-08", "2", "2"), ("2024-03-09", "3", "3"), ("2024-03-10", "4", "4")}
