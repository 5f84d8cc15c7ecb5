"""Probe: a string-partitioned (yyyyMMdd) target, request time_zone America/New_York while the settings say UTC,
recompute of 2 days, and a source that yields the same (ds, id) twice on one New York day.

Expected: the run refuses naming the duplicate key, and nothing is published to the target."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from tests.conftest import quiet_runner, write_request

UTC = timezone.utc
TARGET_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("ds", StringType(), True),
                            StructField("v", IntegerType(), True)])
SRC_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), True),
                         StructField("v", IntegerType(), True)])


def test_string_target_in_new_york_with_a_key_twice_on_one_local_day_is_refused(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import GateFailedError
    from backfill_lib.runner import prepare

    in_utc = settings.model_copy(update={"time_zone": "UTC"})
    target_rows = [(1, "20240308", 1), (7, "20240309", 7), (8, "20240309", 8), (9, "20240310", 9)]
    spark.createDataFrame(target_rows, TARGET_SCHEMA).coalesce(1).write.format("delta").partitionBy("ds") \
        .saveAsTable(f"{db}.events")
    # New York is UTC-5 on 2024-03-08/09 (DST starts 2024-03-10 02:00 local).
    source_rows = [
        (1, datetime(2024, 3, 8, 15, 0, tzinfo=UTC), 10),   # NY 2024-03-08 10:00
        (7, datetime(2024, 3, 9, 15, 0, tzinfo=UTC), 70),   # NY 2024-03-09 10:00
        (7, datetime(2024, 3, 10, 3, 0, tzinfo=UTC), 71),   # NY 2024-03-09 22:00 (UTC date 2024-03-10): same key
        (8, datetime(2024, 3, 9, 16, 0, tzinfo=UTC), 80),   # NY 2024-03-09 11:00
    ]
    spark.createDataFrame(source_rows, SRC_SCHEMA).write.format("delta").saveAsTable(f"{db}.src")

    sql = tmp_path / "probe.sql"
    sql.write_text(f"SELECT id, date_format(ts, 'yyyyMMdd') AS ds, v FROM {db}.src "
                   "WHERE to_date(ts) >= :range_start AND to_date(ts) < :range_end")
    request = write_request(
        tmp_path / "probe.yml", owner="ana@example.com", reason="PROBE: string ds in New York, duplicate key",
        target={"table": f"{db}.events", "partition_column": "ds", "grain": "day", "partition_format": "yyyyMMdd"},
        range={"start": "2024-03-08", "end": "2024-03-09"}, time_zone="America/New_York", strategy="recompute",
        source={"sql": str(sql)}, keys=["ds", "id"])

    before = current_version(spark, f"{db}.events")
    plan, state = prepare(spark, in_utc, request)
    assert [p.key for p in plan.partitions] == ["20240308", "20240309"]
    assert plan.session_time_zone == "America/New_York"

    with pytest.raises(GateFailedError) as err:
        quiet_runner(spark, in_utc).run(plan, state)

    [check] = [c for c in err.value.failures if c.kind == "key"]
    assert check.name == "keys_unique(ds, id)"
    assert check.observed == "1 key more than once"
    assert check.message.endswith(": ('20240309', 7) 2 times"), check.message
    assert "keys_unique(ds, id)" in str(err.value) and "('20240309', 7) 2 times" in str(err.value), str(err.value)

    assert current_version(spark, f"{db}.events") == before
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(target_rows, TARGET_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
