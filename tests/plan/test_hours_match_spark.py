"""The plan's hour partitions are the hours Spark's ``date_trunc('HOUR', ts)`` makes in the request's zone, also
where the zone's offset moves by 30 minutes (Lord Howe), 15 minutes at midnight (Kathmandu, 1986), two hours
(Troll) or one hour (New York): the staged rows' partition values must be the plan's keys, exactly."""

from datetime import date, timedelta, timezone

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.partitions import Grain, enumerate_partitions, half_open


@pytest.mark.parametrize("day, tz", [
    (date(2024, 4, 7), "Australia/Lord_Howe"), (date(2024, 10, 6), "Australia/Lord_Howe"),
    (date(1986, 1, 1), "Asia/Kathmandu"), (date(2024, 3, 31), "Antarctica/Troll"),
    (date(2024, 11, 3), "America/New_York"),
])
def test_every_five_minutes_of_a_day_truncate_to_the_start_of_the_plan_partition_that_holds_them(spark, day, tz):
    start, end = half_open(day, day, Grain.HOUR, tz)
    parts = enumerate_partitions(start, end, Grain.HOUR, tz)
    instants = [start + timedelta(minutes=m) for m in range(0, int((end - start).total_seconds() // 60), 5)]
    expected = [(int(t.timestamp()), int(next(p for p in parts if p.start <= t < p.end).start.timestamp()))
                for t in instants]
    with session_time_zone(spark, tz, "test"):
        truncated = spark.createDataFrame([(e,) for e, _ in expected], "e long").selectExpr(
            "e", "CAST(unix_timestamp(date_trunc('HOUR', timestamp_seconds(e))) AS BIGINT) AS h").collect()
    assert_df_equality(spark.createDataFrame(truncated, "e long, h long"),
                       spark.createDataFrame(expected, "e long, h long"), ignore_row_order=True)
    assert {p.start.astimezone(timezone.utc) for p in parts} == {
        start + timedelta(seconds=h - int(start.timestamp())) for _, h in expected}
