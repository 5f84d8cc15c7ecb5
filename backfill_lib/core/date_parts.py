"""Integer date-part partitions: a table partitioned by ``year``, ``month``, ``day`` (and ``hour``) integer columns
that together name the partition (``PARTITIONED BY (y, m, d)``, the Hive habit). Pure.

The request names the columns in ``target.partition_columns`` (``{year: y, month: m, day: d}``). The plan keys
such a partition as it keys a ``DATE`` or ``TIMESTAMP`` partition (``2024-03-09``; ``2024-03-01`` for a month; for
an hour the ISO 8601 start of the hour with the request's offset), so everything keyed by partition is the same
as for the other layouts. Spark renders a row's key from its parts as text (:func:`key_format`:
``2024-03-09``, or ``2024-03-10T03`` for an hour, a wall-clock hour of the request's time zone), and
:func:`hour_key` maps an hour's text to the plan key. A row whose parts name no real date (``m = 13``, ``d = 30``
in February) renders a text no planned partition has, so it is a stray row, named as it is.

Every predicate compares the integer columns themselves (:func:`parts_predicate`:
``(`y` = 2024 AND `m` = 3 AND `d` BETWEEN 9 AND 20)``), so Delta's ``replaceWhere`` stays a partition-only
predicate. An hour column holds the local wall clock, which repeats at a daylight-saving fall-back; the plan
refuses a range across one, as for a string hour pattern without offset.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from itertools import groupby

from backfill_lib.core.partitions import Grain, Partition, partition_key, quote_ident, zone

#: The parts in order, from the widest.
PART_NAMES = ("year", "month", "day", "hour")

_FORMATS = {Grain.MONTH: "%04d-%02d-01", Grain.DAY: "%04d-%02d-%02d", Grain.HOUR: "%04d-%02d-%02dT%02d"}


def parts_of_grain(grain: Grain) -> tuple[str, ...]:
    """The parts a partition of ``grain`` needs: year and month for ``month``, and day, and hour."""
    return PART_NAMES[: {Grain.MONTH: 2, Grain.DAY: 3, Grain.HOUR: 4}[grain]]


def label(columns: tuple[str, ...]) -> str:
    """How plans and messages name the parts' columns together: ``y/m/d``."""
    return "/".join(columns)


def key_format(grain: Grain) -> str:
    """The ``format_string`` pattern Spark renders a row's parts with (``%04d-%02d-%02d`` for a day)."""
    return _FORMATS[grain]


def hour_key(text: str, time_zone: str) -> str:
    """The plan key of an hour rendered by :func:`key_format` (``2024-03-10T03``: a wall-clock hour of
    ``time_zone``); ``text`` itself when it names no hour (``2024-02-30T03``, or an hour a spring-forward skips),
    which no planned partition has."""
    try:
        wall = datetime.strptime(text, "%Y-%m-%dT%H")
    except ValueError:
        return text
    tz = zone(time_zone)
    local = wall.replace(tzinfo=tz)
    if local.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None) != wall:
        return text  # skipped by a daylight-saving spring-forward: no hour of the zone
    return partition_key(local, Grain.HOUR)


def values_of(partition: Partition, grain: Grain, time_zone: str) -> tuple[int, ...]:
    """The parts' values of ``partition`` (an hour's in ``time_zone``'s wall clock), widest first."""
    start = partition.start
    if isinstance(start, datetime):
        start = start.astimezone(zone(time_zone))
        return start.year, start.month, start.day, start.hour
    assert isinstance(start, date)
    return (start.year, start.month, start.day)[: len(parts_of_grain(grain))]


def parts_predicate(columns: tuple[str, ...], partitions: list[Partition], grain: Grain, time_zone: str,
                    qualifier: str = "") -> str:
    """The SQL predicate selecting exactly ``partitions`` on the integer ``columns`` (widest first, those of
    ``grain``): one conjunction per run of consecutive values under the same wider parts, ORed, e.g.
    ``((`y` = 2024 AND `m` = 2 AND `d` BETWEEN 27 AND 29) OR (`y` = 2024 AND `m` = 3 AND `d` = 1))``.
    ``qualifier``: a table alias. ``partitions`` must not be empty: plans build their predicates through
    :func:`~backfill_lib.core.predicates.partitions_predicate`, which refuses an empty list."""
    cols = [(f"{qualifier}." if qualifier else "") + quote_ident(c) for c in columns]
    values = sorted({values_of(p, grain, time_zone) for p in partitions})
    terms = []
    for outer, group in groupby(values, key=lambda v: v[:-1]):
        last = [v[-1] for v in group]
        runs: list[list[int]] = []
        for n in last:
            if runs and runs[-1][1] == n - 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        fixed = [f"{c} = {v}" for c, v in zip(cols, outer)]
        for low, high in runs:
            inner = f"{cols[-1]} = {low}" if low == high else f"{cols[-1]} BETWEEN {low} AND {high}"
            terms.append("(" + " AND ".join([*fixed, inner]) + ")")
    return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"

