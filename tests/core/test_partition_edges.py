"""Hours next to offset changes off the whole local hour (found by the s22 re-check; pure, no Spark).

Spark's ``date_trunc('HOUR', ts)`` is Java's ``ZonedDateTime.truncatedTo(HOURS)``: the local time cut to its hour,
placed back with the offset it had where that local time repeats, else its one offset; a cut inside a gap is
moved forward by the gap's length. The expected values below were worked out by hand from those rules (and by an
independent implementation of them, run every 5 minutes of the days): where a zone's offset changes off the whole
local hour (Chatham every year at 02:45/03:45, St. John's 1987-2011 at 00:01), the value of the instants right
after a spring-forward is *later* than the change, and a fall-back's repeated minutes can go back to an hour
before the change."""

import re
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partitions import (
    Grain,
    enumerate_partitions,
    half_open,
    hour_start,
    next_hour_start,
    partition_of_key,
)

UTC = timezone.utc


def _day(day: date, tz: str, fmt: str | None = None):
    start, end = half_open(day, day, Grain.HOUR, tz)
    return enumerate_partitions(start, end, Grain.HOUR, tz, fmt)


@pytest.mark.parametrize("tz, day, instant, key, start, end", [
    # Chatham springs 02:45 +12:45 -> 03:45 +13:45 (14:00Z). 14:05Z is 03:50 +13:45: cut to 03:00, inside the gap,
    # moved forward an hour: 04:00 +13:45 = 14:15Z. Every instant of [14:00Z, 15:15Z) truncates to 14:15Z.
    ("Pacific/Chatham", date(2024, 9, 29), datetime(2024, 9, 28, 14, 5, tzinfo=UTC), "2024-09-29T04:00:00+13:45",
     datetime(2024, 9, 28, 14, 0, tzinfo=UTC), datetime(2024, 9, 28, 15, 15, tzinfo=UTC)),
    # St. John's sprang 00:01 -03:30 -> 01:01 -02:30 (03:31Z). 03:45Z is 01:15 -02:30: cut to 01:00, inside the
    # gap, moved forward an hour: 02:00 -02:30 = 04:30Z. Every instant of [03:31Z, 05:30Z) truncates to 04:30Z.
    ("America/St_Johns", date(2000, 4, 2), datetime(2000, 4, 2, 3, 45, tzinfo=UTC), "2000-04-02T02:00:00-02:30",
     datetime(2000, 4, 2, 3, 31, tzinfo=UTC), datetime(2000, 4, 2, 5, 30, tzinfo=UTC)),
])
def test_a_day_whose_spring_forward_is_off_the_whole_hour_is_refused_for_hours(
        tz, day, instant, key, start, end):
    # the old plan keyed [14:00Z, 14:15Z) / [03:31Z, 04:30Z) by the change's own local time (03:45 +13:45, 01:01
    # -02:30), a value date_trunc never gives: Spark writes those rows under the next key, whose hour begins
    # before its value. Refused, naming the change; the truncation itself is still computed exactly.
    with pytest.raises(PartitionError, match=rf"time zone '{tz}' changes its offset at .*, inside a local hour: "
                                             r"Spark's hour truncation there is no span of time a partition can hold"):
        _day(day, tz)
    zone = ZoneInfo(tz)
    assert (hour_start(instant, zone), next_hour_start(start, zone)) == (datetime.fromisoformat(key), end)


@pytest.mark.parametrize("tz, day, instant, key", [
    # Chatham falls back 03:45 +13:45 -> 02:45 +12:45 (14:00Z). 14:05Z is 02:50 +12:45: cut to 02:00, which occurs
    # only at +13:45 (12:15Z). Spark's hour 02:00 +13:45 is [12:15Z, 13:15Z) and [14:00Z, 14:15Z): not one span.
    ("Pacific/Chatham", date(2024, 4, 7), datetime(2024, 4, 6, 14, 5, tzinfo=UTC), "2024-04-07T02:00:00+13:45"),
    # St. John's fell back 00:01 -02:30 -> 23:01 -03:30 (02:31Z), after the day's midnight (02:30Z). 02:45Z is
    # 23:14 -03:30 of the day before: cut to 23:00, which occurs only at -02:30 (01:30Z, before the range).
    ("America/St_Johns", date(2000, 10, 29), datetime(2000, 10, 29, 2, 45, tzinfo=UTC), "2000-10-28T23:00:00-02:30"),
])
def test_a_day_whose_fall_back_is_off_the_whole_hour_is_refused_for_hours(
        tz, day, instant, key):
    # the old plan keyed them 2024-04-07T02:45:00+12:45 and 2000-10-28T23:01:00-03:30, values date_trunc never gives
    with pytest.raises(PartitionError, match=rf"time zone '{tz}' changes its offset at .*, inside a local hour"):
        _day(day, tz)
    assert hour_start(instant, ZoneInfo(tz)) == datetime.fromisoformat(key)


def test_next_hour_start_ends_where_date_trunc_changes_after_a_spring_forward_off_the_hour():
    # 14:00Z (03:45 +13:45) and 14:15Z (04:00 +13:45) both truncate to 14:15Z; the value changes at 15:15Z (05:00)
    chatham = ZoneInfo("Pacific/Chatham")
    after = next_hour_start(datetime(2024, 9, 28, 14, 0, tzinfo=UTC), chatham)
    assert after == datetime(2024, 9, 28, 15, 15, tzinfo=UTC)


@pytest.mark.parametrize("tz, day, fmt", [
    ("Australia/Lord_Howe", date(2024, 10, 6), "yyyy-MM-dd'T'HH:mmXXX"),  # the pattern intake's refusal recommends
    ("Australia/Lord_Howe", date(2024, 10, 6), "yyyy-MM-dd HHxx"),
    ("Asia/Kathmandu", date(1986, 1, 1), "yyyy-MM-dd'T'HH:mmXXX"),
    ("Asia/Kathmandu", date(1986, 1, 1), "yyyy-MM-dd HHxx"),
])
def test_a_formatted_hour_starting_off_the_whole_hour_is_refused_when_planned(tz, day, fmt):
    # the partitions starting off the hour (02:30 +11:00 on Lord Howe, 00:15 +05:45 in Kathmandu) render keys
    # ('2024-10-06T02:30+11:00', '2024-10-06 02+1100') that no value of the pattern reads back (a stored plan could
    # not be rebuilt); the plan refuses them, naming the pattern, the hour and the way out
    with pytest.raises(PartitionError, match=rf"partition_format {re.escape(fmt)}: the hour after the offset change "
                                             rf"in '{tz}' starts at .*, off the whole local hour, .* plan these hours "
                                             r"in UTC \(time_zone: UTC\)"):
        _day(day, tz, fmt)
    # the hours are planned as a TIMESTAMP column's, whose values are instants
    parts = _day(day, tz)
    assert all(partition_of_key(p.key, Grain.HOUR, tz) == p for p in parts)
