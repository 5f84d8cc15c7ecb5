"""Cost and file sets of a range on a data column, from the Delta log's per-file statistics. Pure.

An unpartitioned or liquid-clustered table (or one partitioned by other columns) carries the range in a data
column. The log has no partition value to key its files by, but each ``add`` action's ``stats`` hold the
column's ``minValues`` and ``maxValues`` (Delta protocol, "Per-file Statistics"). A file belongs to every
partition its ``[min, max]`` overlaps; a file without statistics for the column may hold any value, so it
belongs to every partition.
"""

from __future__ import annotations

import bisect
import hashlib
from datetime import date, datetime, time, timedelta, timezone

from backfill_lib.core.partitions import Grain, Partition, hour_start, next_hour_start, zone
from backfill_lib.core.table_state import STATS_TIMESTAMP_PRECISION, FileRange, PartitionStats



def file_set_fingerprint(paths) -> str:
    """A hash of a set of data file paths (as the Delta log writes them), whatever their order."""
    return hashlib.sha256("\n".join(sorted(paths)).encode()).hexdigest()[:16]


def instant_bounds(partition: Partition, grain: Grain, time_zone: str) -> tuple[datetime, datetime]:
    """``partition``'s half-open bounds as UTC instants: a day or month starts at midnight in ``time_zone``
    (how a ``TIMESTAMP`` data column's values fall into days), an hour is already UTC."""
    if grain is Grain.HOUR:
        return partition.start.astimezone(timezone.utc), partition.end.astimezone(timezone.utc)
    tz = zone(time_zone)
    return tuple(datetime.combine(d, time.min, tzinfo=tz).astimezone(timezone.utc)  # type: ignore[return-value]
                 for d in (partition.start, partition.end))


def _bounds(partitions: list[Partition], grain: Grain, time_zone: str, timestamps: bool) -> list[tuple]:
    if timestamps:
        return [instant_bounds(p, grain, time_zone) for p in partitions]
    return [(p.start, p.end) for p in partitions]


def overlapping(partitions: list[Partition], files: tuple[FileRange, ...] | list[FileRange], grain: Grain,
                time_zone: str, timestamps: bool) -> dict[str, list[FileRange]]:
    """Per partition key, the files whose ``[low, high]`` overlaps the partition (every file without
    statistics overlaps every partition). ``partitions`` in order, without gaps or overlaps between them;
    ``timestamps``: the column is a ``TIMESTAMP`` (the files' values are UTC instants)."""
    bounds = _bounds(partitions, grain, time_zone, timestamps)
    ends = [e for _, e in bounds]
    found: dict[str, list[FileRange]] = {p.key: [] for p in partitions}
    for f in files:
        if not f.has_stats:
            for p in partitions:
                found[p.key].append(f)
            continue
        high = f.reach(timestamps)
        i = bisect.bisect_right(ends, f.low)  # the first partition ending after the file's lowest value
        while i < len(partitions) and bounds[i][0] < high:
            found[partitions[i].key].append(f)
            i += 1
    return found


def overlap_stats(partitions: list[Partition], files: tuple[FileRange, ...] | list[FileRange], grain: Grain,
                  time_zone: str, timestamps: bool) -> dict[str, PartitionStats]:
    """Per partition key: the files overlapping it (:func:`overlapping`), their bytes shared evenly among the
    partitions each file overlaps (so the partitions' bytes add up to the files' bytes), their rows when every
    one of them lies wholly inside the partition (:meth:`FileRange.rows_within`; else ``None``: unknown, never a
    count that includes rows of other partitions or NULLs), and their file-set fingerprint (which changes exactly
    when a commit adds or removes a file overlapping the partition)."""
    found = overlapping(partitions, files, grain, time_zone, timestamps)
    bounds = dict(zip((p.key for p in partitions), _bounds(partitions, grain, time_zone, timestamps)))
    spans: dict[str, int] = {}
    for chosen in found.values():
        for f in chosen:
            spans[f.path] = spans.get(f.path, 0) + 1
    out = {}
    for key, chosen in found.items():
        rows: int | None = 0
        for f in chosen:
            inside = f.rows_within(*bounds[key], timestamps)
            rows = None if rows is None or inside is None else rows + inside
        out[key] = PartitionStats(len(chosen), sum(f.bytes // spans[f.path] for f in chosen), rows,
                                  file_set_fingerprint(f.path for f in chosen) if chosen else "")
    return out


def range_cost(partitions: list[Partition], files, grain: Grain, time_zone: str, timestamps: bool) -> tuple[PartitionStats, int]:
    """The distinct files overlapping any of ``partitions`` as one :class:`PartitionStats` (files, bytes, rows:
    ``None`` when a file without statistics or reaching outside the partitions is among them), and how many of
    them have no statistics for the column."""
    if not partitions:
        return PartitionStats(), 0
    found = overlapping(partitions, files, grain, time_zone, timestamps)
    chosen = {f.path: f for fs in found.values() for f in fs}
    (first, _), (_, last) = _bounds([partitions[0], partitions[-1]], grain, time_zone, timestamps)
    rows: int | None = 0
    for f in chosen.values():
        inside = f.rows_within(first, last, timestamps)
        rows = None if rows is None or inside is None else rows + inside
    no_stats = sum(1 for f in chosen.values() if not f.has_stats)
    return PartitionStats(len(chosen), sum(f.bytes for f in chosen.values()), rows,
                          file_set_fingerprint(chosen) if chosen else ""), no_stats


def partitions_of_files(files, grain: Grain, time_zone: str, timestamps: bool) -> tuple[date | datetime, date | datetime] | None:
    """The half-open span ``[start, end)`` of the grain's partitions that hold every file's values (a rebuild
    without a range), or ``None`` when no file has statistics. Starts are dates for day and month (local dates in
    ``time_zone`` for a ``TIMESTAMP`` column), UTC hours for hour."""
    lows = [f.low for f in files if f.has_stats]
    highs = [f.high for f in files if f.has_stats]
    if not lows:
        return None
    low, high = min(lows), max(highs)
    if grain is Grain.HOUR:  # local hours: they start off the UTC hour in some zones, and some are not an hour
        tz = zone(time_zone)  # a maximum in the statistics is cut to the millisecond: the true one may be later
        return hour_start(low, tz), next_hour_start(high + STATS_TIMESTAMP_PRECISION - timedelta(microseconds=1), tz)
    if timestamps:
        tz = zone(time_zone)
        low, high = low.astimezone(tz).date(), high.astimezone(tz).date()
    end = high + timedelta(days=1)
    if grain is Grain.MONTH:
        low = low.replace(day=1)
        end = date(high.year + high.month // 12, high.month % 12 + 1, 1)
    return low, end
