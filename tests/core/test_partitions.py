from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partitions import (
    Grain,
    count_partitions,
    enumerate_partitions,
    half_open,
    hour_start,
    sql_literal,
)
from backfill_lib.core.predicates import partitions_predicate

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


def test_a_month_range_starts_on_a_first_day_and_ends_on_any_day_of_its_last_month():
    with pytest.raises(PartitionError, match="range start 2013-01-02 is not the first day of a month"):
        half_open(date(2013, 1, 2), date(2013, 3, 31), Grain.MONTH, NY)
    for last in (date(2013, 3, 1), date(2013, 3, 15), date(2013, 3, 31)):
        assert half_open(date(2013, 1, 1), last, Grain.MONTH, NY) == (date(2013, 1, 1), date(2013, 4, 1))
    assert half_open(date(2024, 2, 1), date(2024, 2, 29), Grain.MONTH, NY) == (date(2024, 2, 1), date(2024, 3, 1))
    assert half_open(date(2024, 12, 1), date(2024, 12, 31), Grain.MONTH, NY) == (date(2024, 12, 1), date(2025, 1, 1))


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


def _hours_of(day: date, tz: str) -> tuple[datetime, datetime, list]:
    start, end = half_open(day, day, Grain.HOUR, tz)
    return start, end, enumerate_partitions(start, end, Grain.HOUR, tz)


@pytest.mark.parametrize("day, tz, keys, minutes", [
    # Lord Howe falls back 30 minutes (02:00 +11:00 -> 01:30 +10:30): the hour 01:00 runs 90 minutes
    (date(2024, 4, 7), "Australia/Lord_Howe",
     ["2024-04-07T00:00:00+11:00", "2024-04-07T01:00:00+11:00", "2024-04-07T02:00:00+10:30"], [60, 90, 60]),
    # and springs forward 30 (02:00 +10:30 -> 02:30 +11:00): the hour 02:00 starts at 02:30 and runs 30 minutes
    (date(2024, 10, 6), "Australia/Lord_Howe",
     ["2024-10-06T00:00:00+10:30", "2024-10-06T01:00:00+10:30", "2024-10-06T02:30:00+11:00"], [60, 60, 30]),
    # Kathmandu went from +05:30 to +05:45 at midnight: the day starts at 00:15 and its first hour is 45 minutes
    (date(1986, 1, 1), "Asia/Kathmandu",
     ["1986-01-01T00:15:00+05:45", "1986-01-01T01:00:00+05:45", "1986-01-01T02:00:00+05:45"], [45, 60, 60]),
])
def test_hours_are_the_local_hours_where_the_offset_moves_by_less_than_an_hour(day, tz, keys, minutes):
    start, end, parts = _hours_of(day, tz)
    assert [p.key for p in parts[:3]] == keys
    assert [(p.end - p.start) // timedelta(minutes=1) for p in parts[:3]] == minutes
    assert len(parts) == 24 and parts[0].start == start and parts[-1].end == end
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))


@pytest.mark.parametrize("tz, first", [("Australia/Lord_Howe", datetime(2024, 4, 6, 10, tzinfo=timezone.utc)),
                                       ("America/St_Johns", datetime(2024, 11, 3, 1, tzinfo=timezone.utc)),
                                       ("Antarctica/Troll", datetime(2024, 3, 30, 22, tzinfo=timezone.utc))])
def test_every_minute_falls_in_the_partition_its_hour_start_names(tz, first):
    # hour_start is Spark's date_trunc('HOUR') (tests/plan/test_hours_match_spark.py checks it against Spark)
    first = hour_start(first, ZoneInfo(tz))  # a partition's start, as a range's local midnight is
    parts = enumerate_partitions(first, first + timedelta(hours=12), Grain.HOUR, tz)
    for minute in range(0, 12 * 60, 5):
        t = first + timedelta(minutes=minute)
        owner = next(p for p in parts if p.start <= t < p.end)
        assert owner.start == hour_start(t, ZoneInfo(tz)), t


def test_hours_in_local_mean_time_are_refused():
    # America/New_York was -04:56:02 until 1883: no partition value's offset can show the seconds
    start, end = half_open(date(1800, 1, 1), date(1800, 1, 1), Grain.HOUR, NY)
    with pytest.raises(PartitionError, match=r"time zone 'America/New_York' has the offset -045602 \(local mean time\)"
                                             r" at 1800-01-01T00:00:00-04:56:02: hour partitions cannot be keyed"):
        enumerate_partitions(start, end, Grain.HOUR, NY)


def test_a_range_of_more_partitions_than_a_plan_lists_is_refused_before_listing():
    start, end = half_open(date(2, 1, 1), date(9998, 12, 31), Grain.HOUR, "UTC")
    with pytest.raises(PartitionError, match=r"holds about 87,631,896 hour partitions, more than the 200,000 one "
                                             r"plan may list: split the request"):
        enumerate_partitions(start, end, Grain.HOUR, "UTC")
