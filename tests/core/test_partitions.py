from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partitions import (
    Grain,
    count_partitions,
    enumerate_partitions,
    half_open,
    partitions_predicate,
    sql_literal,
)

NY = "America/New_York"


@pytest.mark.parametrize(
    "first, last, grain, expected_count, first_key, last_key",
    [
        (date(2013, 1, 1), date(2013, 3, 31), Grain.DAY, 90, "2013-01-01", "2013-03-31"),
        (date(2012, 2, 28), date(2012, 3, 1), Grain.DAY, 3, "2012-02-28", "2012-03-01"),  # leap day
        (date(2013, 1, 1), date(2013, 12, 1), Grain.MONTH, 12, "2013-01-01", "2013-12-01"),
        (date(2013, 11, 1), date(2014, 2, 1), Grain.MONTH, 4, "2013-11-01", "2014-02-01"),
        (date(2024, 3, 10), date(2024, 3, 10), Grain.HOUR, 23, "2024-03-10T00:00:00-05:00", "2024-03-10T23:00:00-04:00"),
        (date(2024, 11, 3), date(2024, 11, 3), Grain.HOUR, 25, "2024-11-03T00:00:00-04:00", "2024-11-03T23:00:00-05:00"),
    ],
)
def test_partition_counts_and_edges(first, last, grain, expected_count, first_key, last_key):
    start, end = half_open(first, last, grain, NY)
    parts = enumerate_partitions(start, end, grain, NY)
    assert len(parts) == expected_count == count_partitions(start, end, grain)
    assert (parts[0].key, parts[-1].key) == (first_key, last_key)


def test_day_range_is_half_open():
    assert half_open(date(2013, 1, 1), date(2013, 3, 31), Grain.DAY, NY) == (date(2013, 1, 1), date(2013, 4, 1))


def test_end_before_start_is_an_error_naming_both_dates():
    with pytest.raises(PartitionError, match="range end 2013-01-01 is before its start 2013-03-31"):
        half_open(date(2013, 3, 31), date(2013, 1, 1), Grain.DAY, NY)


def test_month_bounds_must_be_first_days():
    with pytest.raises(PartitionError, match="range end 2013-03-31 is not the first day of a month"):
        half_open(date(2013, 1, 1), date(2013, 3, 31), Grain.MONTH, NY)


def test_hours_repeat_no_hour_at_the_fall_back_change():
    start, end = half_open(date(2024, 11, 3), date(2024, 11, 3), Grain.HOUR, NY)
    parts = enumerate_partitions(start, end, Grain.HOUR, NY)
    utc_starts = [p.start.astimezone(timezone.utc) for p in parts]
    assert len(set(utc_starts)) == 25
    assert all(b - a == timedelta(hours=1) for a, b in zip(utc_starts, utc_starts[1:]))
    # 01:00 local happens twice, once in EDT and once in EST
    assert [p.key for p in parts[1:3]] == ["2024-11-03T01:00:00-04:00", "2024-11-03T01:00:00-05:00"]


def test_predicate_merges_contiguous_partitions_and_keeps_gaps():
    start, end = half_open(date(2024, 3, 1), date(2024, 3, 10), Grain.DAY, NY)
    parts = enumerate_partitions(start, end, Grain.DAY, NY)
    chosen = parts[0:3] + parts[5:6]
    assert partitions_predicate("dt", chosen) == (
        "((`dt` >= DATE'2024-03-01' AND `dt` < DATE'2024-03-04') OR "
        "(`dt` >= DATE'2024-03-06' AND `dt` < DATE'2024-03-07'))"
    )


def test_empty_partition_set_has_no_predicate():
    with pytest.raises(PartitionError, match="no partitions"):
        partitions_predicate("dt", [])
    with pytest.raises(PartitionError, match="no partitions"):  # integer date parts: the same one check
        partitions_predicate("y/m/d", [], parts=("y", "m", "d"), grain=Grain.DAY)
    days = enumerate_partitions(*half_open(date(2024, 3, 9), date(2024, 3, 10), Grain.DAY, NY), Grain.DAY, NY)
    assert partitions_predicate("y/m/d", days, "t", parts=("y", "m", "d"), grain=Grain.DAY, time_zone=NY) == (
        "(t.`y` = 2024 AND t.`m` = 3 AND t.`d` BETWEEN 9 AND 10)")


def test_timestamp_literal_is_utc():
    local = datetime(2024, 3, 10, 3, 0, tzinfo=ZoneInfo(NY))
    assert sql_literal(local) == "TIMESTAMP'2024-03-10 07:00:00+00:00'"
