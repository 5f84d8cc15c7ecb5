"""Pure partition math: grains, half-open ranges, partition keys and the predicates that select them.

Users write ranges inclusively (``2013-01-01`` to ``2013-03-31`` means both days); inside, every range is
half-open ``[start, end)``. Partition keys are the strings Delta stores as partition values:

- ``day``: a ``DATE`` column, key ``YYYY-MM-DD``.
- ``month``: a ``DATE`` column holding the first day of the month, key ``YYYY-MM-01``.
- ``hour``: a ``TIMESTAMP`` column holding the start of the hour, key ``YYYY-MM-DDTHH:00:00+HH:MM`` in the
  request's time zone. An hour partition holds the instants Spark's ``date_trunc('HOUR', ts)`` maps to one value
  in that zone (:func:`hour_start`), so a local day has 23 or 25 of them across a one-hour daylight-saving change,
  and one of them is half or one and a half hours long where the offset moves by 30 minutes
  (``Australia/Lord_Howe``) or starts off the UTC hour (``Asia/Kathmandu`` on 1986-01-01).
- ``hour`` on a ``TIMESTAMP_NTZ`` column (``wall_clock``): the column holds wall-clock readings of the request's
  time zone, no instant. Each partition is one wall-clock hour that exists in that zone (:func:`wall_hours`),
  keyed as a ``TIMESTAMP`` hour is (the start of its first occurrence with the zone's offset), so every stage keys
  it alike. An hour a daylight-saving spring-forward skips (``2024-03-10 02:00`` in ``America/New_York``) is no
  partition, as for ``TIMESTAMP`` hours: a value there is no planned partition's (a stray row), and no predicate
  covers it. The hour a fall-back repeats (``2024-11-03 01:00``) is one wall-clock value holding both real hours,
  so it is one partition, two hours long, keyed by its first occurrence (``2024-11-03T01:00:00-04:00``): the day
  has 24 partitions where a ``TIMESTAMP`` column has 25. Predicates compare ``TIMESTAMP_NTZ`` literals
  (:func:`wall_hours_predicate`), whatever the session's zone.
- any grain on a ``STRING`` column with a ``partition_format`` (:mod:`backfill_lib.core.partition_format`): the
  key is the partition's start rendered in that pattern (``20240310``), the string Delta stores; predicates
  compare those strings (an ``IN`` list), never parse the column.

Nothing here touches Spark.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.zones import zone


class Grain(str, enum.Enum):
    """How wide one partition is."""

    DAY = "day"
    HOUR = "hour"
    MONTH = "month"

    @property
    def spark_type(self) -> str:
        """The Spark SQL type a partition column of this grain must have."""
        return "timestamp" if self is Grain.HOUR else "date"


@dataclass(frozen=True, order=True)
class Partition:
    """One partition: its half-open bounds and the key Delta stores for it.

    ``start`` and ``end`` are ``date`` for day and month grains and UTC ``datetime`` for hours (UTC, because
    aware datetimes sharing a local zone compare as wall clocks, and the repeated fall-back hour would tie).
    """

    start: date | datetime
    end: date | datetime
    key: str


def _first_of_next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def half_open(first: date, last: date, grain: Grain, time_zone: str) -> tuple[date | datetime, date | datetime]:
    """Turn an inclusive user range of days into the half-open bounds of the grain.

    Parameters
    ----------
    first, last:
        Inclusive local dates as the user wrote them. For ``month``, ``first`` must be the first day of a month;
        ``last`` may be any day of the last month included (``2024-01-01`` and ``2024-01-31`` both end the range
        with January).
    grain, time_zone:
        For ``hour``, the bounds are midnights in ``time_zone``, returned as UTC datetimes.

    Raises
    ------
    PartitionError
        When ``last`` is before ``first``, or a month range's ``first`` is not a first day.
    """
    if last < first:
        raise PartitionError(f"range end {last.isoformat()} is before its start {first.isoformat()}")
    if grain is Grain.DAY:
        return first, last + timedelta(days=1)
    if grain is Grain.MONTH:
        if first.day != 1:
            raise PartitionError(f"range start {first.isoformat()} is not the first day of a month (grain month)")
        return first, _first_of_next_month(last)  # any day of the last month names it whole
    tz = zone(time_zone)
    start = datetime.combine(first, datetime.min.time(), tzinfo=tz)
    end = datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=tz)
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


def partition_key(value: date | datetime, grain: Grain, fmt: str | None = None, time_zone: str = "UTC") -> str:
    """The Delta partition-value string of a partition starting at ``value``: ``fmt`` (a ``partition_format``)
    rendered in ``time_zone`` when given."""
    if fmt is not None:
        return PartitionFormat.of(fmt).render(value, grain.value, time_zone)
    if grain is Grain.HOUR:
        return value.isoformat(timespec="seconds")
    return value.isoformat()


def enumerate_partitions(start: date | datetime, end: date | datetime, grain: Grain, time_zone: str,
                         fmt: str | None = None, *, wall_clock: bool = False) -> list[Partition]:
    """All partitions in ``[start, end)``, in order, keyed in ``fmt`` when given (:func:`partition_key`).
    ``wall_clock``: the hours of a ``TIMESTAMP_NTZ`` column (:func:`wall_hours`).

    For ``hour`` each partition runs from one value of Spark's hour truncation in ``time_zone`` to the next
    (:func:`next_hour_start`), stepped on UTC instants and shown in ``time_zone``, so no hour is skipped or doubled
    at daylight-saving changes (a ``fmt`` without offset renders the repeated hour of a fall-back twice alike: see
    :func:`repeated_keys`). ``start`` must be such a value (a local midnight is).

    Raises
    ------
    PartitionError
        When the range holds more than :data:`MAX_PARTITIONS` partitions; for ``hour``, when an hour of it falls
        where ``time_zone``'s offset has seconds (local mean time, before a zone took standard time:
        ``America/New_York`` until 1883), which no partition value's offset can show, or next to an offset change
        no partition can hold (:func:`_check_odd_hour`).
    """
    out: list[Partition] = []
    many = count_partitions(start, end, grain)
    if many > MAX_PARTITIONS:
        raise PartitionError(f"range [{start.isoformat()}, {end.isoformat()}) holds about {many:,} {grain.value} "
                             f"partitions, more than the {MAX_PARTITIONS:,} one plan may list: split the request")
    if grain is Grain.HOUR and wall_clock:
        return wall_hours(start, end, time_zone)
    if grain is Grain.HOUR:
        tz = zone(time_zone)
        cur = start.astimezone(timezone.utc)
        stop = end.astimezone(timezone.utc)
        local = cur.astimezone(tz)
        while cur < stop:
            offset = local.utcoffset()
            if offset.seconds % 60:
                raise PartitionError(f"time zone '{time_zone}' has the offset {local.strftime('%z')} (local mean "
                                     f"time) at {local.isoformat()}: hour partitions cannot be keyed there")
            nxt = cur + _HOUR  # most hours: a whole local hour, and the offset holds to its end
            after = nxt.astimezone(tz)
            odd = local.minute or local.second or after.utcoffset() != offset
            if odd:
                nxt = next_hour_start(cur, tz)
                after = nxt.astimezone(tz)
            part = Partition(cur, nxt, partition_key(local, grain, fmt, time_zone))
            if odd:
                _check_odd_hour(part, tz, time_zone, fmt)
            out.append(part)
            cur, local = nxt, after
        return out
    cur = start
    while cur < end:
        nxt = cur + timedelta(days=1) if grain is Grain.DAY else _first_of_next_month(cur)
        out.append(Partition(cur, nxt, partition_key(cur, grain, fmt, time_zone)))
        cur = nxt
    return out


_HOUR = timedelta(hours=1)


def _offset_of(instant: datetime, tz: ZoneInfo) -> timedelta:
    return instant.astimezone(tz).utcoffset()


def hour_start(instant: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant Spark's ``date_trunc('HOUR', ts)`` gives for ``instant`` (aware) in ``tz``.

    As Java's ``ZonedDateTime.truncatedTo(HOURS)``: the local time is cut to its hour and placed back on the
    time line with the offset it had when that local time occurs twice, or shifted forward by the gap when it
    does not occur (then it is the instant of the zone's change, as Python's ``fold=0`` gives)."""
    local = instant.astimezone(tz)
    cut = local.replace(minute=0, second=0, microsecond=0, fold=0)
    later = cut.replace(fold=1)
    if later.utcoffset() != cut.utcoffset() and later.utcoffset() == local.utcoffset() \
            and _occurs(cut) and _occurs(later):
        cut = later
    return cut.astimezone(timezone.utc)


def _occurs(local: datetime) -> bool:
    """Whether the local time ``local`` (aware, with its fold) exists: it survives a trip through UTC."""
    back = local.astimezone(timezone.utc).astimezone(local.tzinfo)
    return back.replace(tzinfo=None, fold=0) == local.replace(tzinfo=None, fold=0)


def next_hour_start(instant: datetime, tz: ZoneInfo) -> datetime:
    """The first UTC instant after ``instant`` whose :func:`hour_start` in ``tz`` differs from ``instant``'s: the
    exclusive end of its hour partition. An hour is an hour long unless the zone's offset changes inside it."""
    key = hour_start(instant, tz)
    t = instant.astimezone(timezone.utc)
    while True:
        local = t.astimezone(tz)
        offset = local.utcoffset()
        wall = local.replace(minute=0, second=0, microsecond=0, tzinfo=None) + _HOUR
        candidate = (wall - offset).replace(tzinfo=timezone.utc)  # the next local hour, if the offset holds
        if candidate.astimezone(tz).utcoffset() != offset:
            # the offset changes before that hour: truncation may move there, or stay until the next local hour
            candidate = _offset_change(t, candidate, tz)
        if hour_start(candidate, tz) != key:  # (after a change off the whole hour, truncation moves forward)
            return candidate
        t = candidate


def _check_odd_hour(part: Partition, tz: ZoneInfo, time_zone: str, fmt: str | None) -> None:
    """Refuse an hour next to an offset change that no partition value can name: where the zone changes its
    offset off the whole local hour (``Pacific/Chatham`` at 02:45, ``America/St_Johns`` at 00:01 until 2011),
    Spark's truncation of the instants after the change is a later instant, or an hour before the change, so the
    hour is no half-open span starting at its value; and a ``fmt`` value names whole local hours only
    (:mod:`~backfill_lib.core.partition_format`), not one starting at 02:30 after a 30-minute change."""
    local = part.start.astimezone(tz)
    if hour_start(part.start, tz) != part.start:
        raise PartitionError(f"time zone '{time_zone}' changes its offset at {local.isoformat()}, inside a local "
                             "hour: Spark's hour truncation there is no span of time a partition can hold; plan "
                             "hours of that day in UTC (time_zone: UTC)")
    if fmt is not None and (local.minute or local.second):
        raise PartitionError(f"partition_format {fmt}: the hour after the offset change in '{time_zone}' starts at "
                             f"{local.isoformat()}, off the whole local hour, which a partition value of the "
                             "pattern does not name; plan these hours in UTC (time_zone: UTC)")


def _offset_change(low: datetime, high: datetime, tz: ZoneInfo) -> datetime:
    """The first whole second in ``(low, high]`` with another offset than ``low``'s (one exists at ``high``);
    offsets change on whole seconds."""
    offset = _offset_of(low, tz)
    lo, hi = low.replace(microsecond=0), high
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=((hi - lo) // 2).total_seconds() // 1)
        if _offset_of(mid, tz) == offset:
            lo = mid
        else:
            hi = mid
    return hi


def wall_hour(wall: datetime, time_zone: str) -> Partition | None:
    """The partition of the wall-clock hour starting at naive ``wall`` (on the hour) in ``time_zone``: from its
    first occurrence to the first occurrence of the next wall-clock hour, as UTC instants, keyed as a ``TIMESTAMP``
    hour starting there is; ``None`` when a daylight-saving spring-forward skips the whole hour.

    Examples
    --------
    >>> from datetime import datetime
    >>> wall_hour(datetime(2024, 11, 3, 1), "America/New_York").key  # both 01:00 of the fall-back, two hours
    '2024-11-03T01:00:00-04:00'
    >>> wall_hour(datetime(2024, 3, 10, 2), "America/New_York") is None  # skipped by the spring-forward
    True
    """
    tz = zone(time_zone)
    first = _first_instant(wall, tz)
    if first is None:
        return None
    nxt = wall + _HOUR
    end = _first_instant(nxt, tz)
    while end is None:  # the next wall hour is skipped: this one lasts until the one after it occurs
        nxt += _HOUR
        end = _first_instant(nxt, tz)
    local = first.astimezone(tz)
    if local.utcoffset().seconds % 60:
        raise PartitionError(f"time zone '{time_zone}' has the offset {local.strftime('%z')} (local mean "
                             f"time) at {local.isoformat()}: hour partitions cannot be keyed there")
    return Partition(first, end, partition_key(local, Grain.HOUR))


def _first_instant(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """The first UTC instant whose wall clock in ``tz`` lies in the hour starting at naive ``wall``; ``None``
    when no instant does (the zone skips the whole hour)."""
    local = wall.replace(tzinfo=tz, fold=0)
    if _occurs(local):
        return local.astimezone(timezone.utc)
    # ``wall`` itself is skipped: the hour may still occur after a change off the whole hour (02:30 after a
    # 30-minute spring-forward at 02:00)
    after = local.astimezone(timezone.utc)  # fold 0 of a skipped time: the instant of the change
    shown = after.astimezone(tz).replace(tzinfo=None)
    return after if wall <= shown < wall + _HOUR else None


def wall_hours(start: datetime, end: datetime, time_zone: str) -> list[Partition]:
    """The wall-clock hours of ``time_zone`` from the wall clock of instant ``start`` to that of ``end`` (local
    midnights: the request's range) that occur in the zone, each a partition (:func:`wall_hour`), in order.

    Raises
    ------
    PartitionError
        When the range holds more than :data:`MAX_PARTITIONS` hours, or an hour falls where the zone's offset has
        seconds (local mean time).
    """
    many = count_partitions(start, end, Grain.HOUR)
    if many > MAX_PARTITIONS:
        raise PartitionError(f"range [{start.isoformat()}, {end.isoformat()}) holds about {many:,} hour "
                             f"partitions, more than the {MAX_PARTITIONS:,} one plan may list: split the request")
    tz = zone(time_zone)
    wall = start.astimezone(tz).replace(tzinfo=None, minute=0, second=0, microsecond=0)
    stop = end.astimezone(tz).replace(tzinfo=None)
    out = []
    while wall < stop:
        part = wall_hour(wall, time_zone)
        if part is not None:
            out.append(part)
        wall += _HOUR
    return out


def wall_value_key(value: str, time_zone: str) -> str | None:
    """The plan key of a ``TIMESTAMP_NTZ`` hour value (``2024-03-10 03:00:00``, as Delta writes a partition
    value, or ``2024-03-10T03:00:00`` as Spark renders one): the key of its wall-clock hour in ``time_zone``;
    ``None`` when it is no wall-clock hour of the zone (not on the hour, skipped by a spring-forward, or no
    timestamp), which no planned partition has."""
    try:
        wall = datetime.fromisoformat(value.strip().replace(" ", "T"))
    except ValueError:
        return None
    if wall.tzinfo is not None or wall.minute or wall.second or wall.microsecond:
        return None
    found = wall_hour(wall, time_zone)
    return None if found is None else found.key


def _utc_instant(value: str) -> datetime:
    """An ISO 8601 timestamp (``T`` or a space between date and time) as an aware UTC datetime; a value without
    offset is UTC (how Delta writes timestamp partition values). Raises ``ValueError``."""
    start = datetime.fromisoformat(value.replace(" ", "T"))
    return start.replace(tzinfo=timezone.utc) if start.tzinfo is None else start.astimezone(timezone.utc)


def hour_value_start(value: str) -> datetime:
    """The UTC start of the hour a Delta timestamp partition value names.

    Raises
    ------
    PartitionError
        When ``value`` is not a timestamp, naming it.
    """
    try:
        return _utc_instant(value)
    except ValueError as exc:
        raise PartitionError(f"partition value '{value}' is not a hour partition") from exc


def partition_of_key(key: str, grain: Grain, time_zone: str, fmt: str | None = None, *,
                     wall_clock: bool = False) -> Partition:
    """The partition a Delta partition-value string names (``2013-01-01``; hours as ISO 8601 timestamps, a
    value without offset read as UTC; with ``fmt``, exactly a value of that pattern). ``wall_clock``: an hour of
    a ``TIMESTAMP_NTZ`` column, named by a plan key (the wall-clock hour of the instant it names,
    :func:`wall_hour`).

    Raises
    ------
    PartitionError
        When ``key`` is not a value of the grain (or of ``fmt``), naming it.
    """
    if fmt is not None:
        start = PartitionFormat.of(fmt).parse(key, grain.value, time_zone)
        if grain is Grain.HOUR:
            return Partition(start, next_hour_start(start, zone(time_zone)), key)
        return Partition(start, _first_of_next_month(start) if grain is Grain.MONTH else start + timedelta(days=1), key)
    try:
        if grain is Grain.HOUR and wall_clock:
            tz = zone(time_zone)
            found = wall_hour(_utc_instant(key).astimezone(tz).replace(tzinfo=None), time_zone)
            if found is None:
                raise ValueError(key)
            return found
        if grain is Grain.HOUR:
            start, tz = _utc_instant(key), zone(time_zone)
            return Partition(start, next_hour_start(start, tz), partition_key(start.astimezone(tz), grain))
        day = date.fromisoformat(key)
    except ValueError as exc:
        raise PartitionError(f"partition value '{key}' is not a {grain.value} partition") from exc
    if grain is Grain.MONTH:
        return Partition(day, _first_of_next_month(day), key)
    return Partition(day, day + timedelta(days=1), key)


#: The most partitions one plan lists (22 years of hours, 547 of days): a larger range is refused before it is
#: listed (a plan holds about 0.4 KB per partition, and the ledger a row each).
MAX_PARTITIONS = 200_000


def count_partitions(start: date | datetime, end: date | datetime, grain: Grain) -> int:
    """How many partitions ``[start, end)`` holds, without listing them; for ``hour``, the whole UTC hours in it
    (exact unless the zone's offset moves by less than an hour inside the range)."""
    if grain is Grain.DAY:
        return (end - start).days
    if grain is Grain.MONTH:
        return (end.year - start.year) * 12 + end.month - start.month
    # Aware datetimes sharing a tzinfo subtract as wall clocks; in UTC the daylight-saving hour counts.
    return int((end.astimezone(timezone.utc) - start.astimezone(timezone.utc)).total_seconds() // 3600)


def sql_literal(value: date | datetime) -> str:
    """A Spark SQL literal for a bound: ``DATE'2013-01-01'`` or ``TIMESTAMP'2013-01-01 05:00:00+00:00'`` (UTC)."""
    if isinstance(value, datetime):
        utc = value.astimezone(timezone.utc)
        return f"TIMESTAMP'{utc.strftime('%Y-%m-%d %H:%M:%S')}+00:00'"
    return f"DATE'{value.isoformat()}'"


def string_literal(value: str) -> str:
    """A Spark SQL string literal of ``value`` (backslash and quote escaped, as Spark's default parser reads
    them)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def key_order(key: str | None) -> tuple[bool, str]:
    """A sort key for partition keys that may hold ``None`` (rows whose partition value is NULL): NULL last."""
    return key is None, key or ""


def quote_ident(name: str) -> str:
    """Back-quote a column name for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def contiguous_runs(partitions: list[Partition]) -> list[tuple[date | datetime, date | datetime]]:
    """Merge sorted partitions into the fewest half-open ranges that cover exactly them."""
    runs: list[tuple[date | datetime, date | datetime]] = []
    for p in sorted(partitions):
        if runs and runs[-1][1] == p.start:
            runs[-1] = (runs[-1][0], p.end)
        else:
            runs.append((p.start, p.end))
    return runs


def ntz_literal(wall: datetime) -> str:
    """A Spark SQL ``TIMESTAMP_NTZ`` literal of naive wall-clock ``wall``: ``TIMESTAMP_NTZ'2024-03-10 03:00:00'``."""
    return f"TIMESTAMP_NTZ'{wall.strftime('%Y-%m-%d %H:%M:%S')}'"


def wall_runs(partitions: list[Partition], time_zone: str) -> list[tuple[datetime, datetime]]:
    """The fewest half-open wall-clock ranges (naive) that cover exactly the wall-clock hours of ``partitions``
    (:func:`wall_hours`) in ``time_zone``: an hour a spring-forward skips splits them, so no range covers it."""
    tz = zone(time_zone)
    runs: list[tuple[datetime, datetime]] = []
    for p in sorted(partitions):
        wall = p.start.astimezone(tz).replace(tzinfo=None, minute=0, second=0, microsecond=0)
        if runs and runs[-1][1] == wall:
            runs[-1] = (runs[-1][0], wall + _HOUR)
        else:
            runs.append((wall, wall + _HOUR))
    return runs


def wall_hours_predicate(column: str, partitions: list[Partition], time_zone: str, qualifier: str = "") -> str:
    """The SQL predicate selecting exactly the wall-clock hours ``partitions`` of ``TIMESTAMP_NTZ`` ``column``:
    an OR of ``col >= TIMESTAMP_NTZ'...' AND col < TIMESTAMP_NTZ'...'`` ranges (:func:`wall_runs`), read the same
    in every session time zone."""
    col = (f"{qualifier}." if qualifier else "") + quote_ident(column)
    parts = [f"({col} >= {ntz_literal(s)} AND {col} < {ntz_literal(e)})" for s, e in wall_runs(partitions, time_zone)]
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def range_predicate(column: str, start: date | datetime, end: date | datetime, qualifier: str = "") -> str:
    """``col >= start AND col < end``: the SQL predicate of one half-open range (``qualifier``: a table alias)."""
    col = (f"{qualifier}." if qualifier else "") + quote_ident(column)
    return f"{col} >= {sql_literal(start)} AND {col} < {sql_literal(end)}"


def keys_predicate(column: str, keys: list[str], qualifier: str = "", shown: int | None = None) -> str:
    """``(col = 'k')`` or ``(col IN ('k1', 'k2', ...))``: the SQL predicate of the string partitions ``keys``.
    ``shown`` (for people, never run) keeps that many values from each end of a longer list."""
    col = (f"{qualifier}." if qualifier else "") + quote_ident(column)
    if len(keys) == 1:
        return f"({col} = {string_literal(keys[0])})"
    literals = [string_literal(k) for k in keys]
    if shown is not None and len(literals) > 2 * shown:
        literals = [*literals[:shown], f"... {len(literals) - 2 * shown:,} more ...", *literals[-shown:]]
    return f"({col} IN ({', '.join(literals)}))"


def repeated_keys(partitions: list[Partition]) -> list[tuple[str, list[Partition]]]:
    """The keys more than one of ``partitions`` renders to (an hour pattern without offset at a daylight-saving
    fall-back), each with those partitions, in order."""
    by_key: dict[str, list[Partition]] = {}
    for p in partitions:
        by_key.setdefault(p.key, []).append(p)
    return [(k, ps) for k, ps in by_key.items() if len(ps) > 1]


@dataclass(frozen=True)
class RowFilter:
    """A request's ``target.where`` as Spark analysed it at intake
    (:func:`backfill_lib.intake.where_check.check_where`): a deterministic predicate on partition columns of the
    target other than the range's.

    ``sql`` is Spark's rendering of the analysed expression with unqualified columns (no comments, every name
    quoted where needed), ``target_sql`` the same with the columns qualified by ``t`` (the target's alias in a
    MERGE, where the staged rows ``s`` have the same columns); ``columns`` are the columns it reads."""

    text: str
    sql: str
    target_sql: str
    columns: tuple[str, ...] = ()

    def on(self, qualifier: str = "") -> str:
        """The predicate with columns unqualified (``""``) or qualified by ``t``."""
        if qualifier not in ("", "t"):
            raise PartitionError(f"target.where is rendered for the alias t only, not {qualifier}")
        return self.target_sql if qualifier else self.sql
