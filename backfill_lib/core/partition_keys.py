"""The one way runtime code turns a partition column's values into the plan's partition keys.

The plan keys partitions as :func:`backfill_lib.core.partitions.partition_key` renders them: ``YYYY-MM-DD`` for
``day`` and ``month``, and for ``hour`` the start of the hour in the request's time zone with its offset
(``2024-03-10T03:00:00-04:00``). Spark renders a ``TIMESTAMP`` in the *session* time zone, which need not be
the request's, so every grouping by partition goes through :class:`PartitionKeys`: Spark renders an
unambiguous ISO 8601 instant and Python maps it to the plan key.

A ``STRING`` partition column with a ``partition_format`` holds the plan's keys themselves (``20240310``):
grouping by it needs no mapping. A typed column keyed for such a plan (a rule's source table, :meth:`PartitionKeys.of_source`)
renders its values in the format.

A ``TIMESTAMP_NTZ`` hour column (``wall_clock``) holds wall-clock readings: Spark renders them as text as they
are (``2024-03-10 03:00:00``, no zone involved) and Python keys the wall-clock hour in the request's time zone
(:func:`~backfill_lib.core.partitions.wall_value_key`); a value no planned hour has (off the hour, or in an hour a
spring-forward skips) keeps its text, which no planned partition has.

Integer date-part columns (``year``/``month``/``day``/``hour``, :mod:`backfill_lib.core.date_parts`) are keyed
from their values together: ``parts`` names them, widest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, TypeVar

from backfill_lib.core.partitions import Grain, partition_key, partition_of_key, quote_ident, wall_value_key

if TYPE_CHECKING:
    from pyspark.sql import Column

V = TypeVar("V")

# Spark datetime pattern: ISO 8601 with the session zone's offset (``Z`` for UTC), e.g. 2024-03-10T07:00:00Z.
_INSTANT = "yyyy-MM-dd'T'HH:mm:ssXXX"


@dataclass(frozen=True)
class PartitionKeys:
    """How to key ``column`` (of ``grain``, in ``time_zone``) as the plan does.

    ``format`` is the plan's ``partition_format`` (``None``: ISO keys); ``string_column`` says whether
    ``column`` holds those formatted strings (the target's column) or typed ``DATE``/``TIMESTAMP`` values whose
    keys are rendered in the format (:meth:`of`). ``data_type`` (``date`` or ``timestamp``) is set when ``column``
    is a data column rather than a partition column: its values are truncated to the grain's partition first (a
    timestamp's day and hour in the session time zone, which the run sets to ``time_zone``).

    Examples
    --------
    >>> PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd").key("20240310")
    '20240310'
    >>> PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd", string_column=False).key("2024-03-10")
    '20240310'
    """

    column: str
    grain: Grain
    time_zone: str
    format: str | None = None
    string_column: bool = True
    data_type: str | None = None
    #: the integer date-part columns (year, month, day, hour; those of ``grain``) that carry the partition
    #: together; ``column`` is then their label (``y/m/d``), no column of the table
    parts: tuple[str, ...] = ()
    #: the column is a ``TIMESTAMP_NTZ`` (of the hour grain): its values are wall-clock readings of ``time_zone``
    wall_clock: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        """The table's columns the keys are computed from: the parts, or ``column``."""
        return self.parts or (self.column,)

    @property
    def holds_keys(self) -> bool:
        """Whether the column's values are the plan's keys as they are (a formatted string column)."""
        return self.format is not None and self.string_column

    def expr(self) -> "Column":
        """A string column Spark can group by: the value of a formatted string column, the date for day and
        month, an ISO instant for hour."""
        from pyspark.sql import functions as F

        if self.parts:
            from backfill_lib.core.date_parts import key_format

            cols = [F.col(quote_ident(c)) for c in self.parts]
            known = cols[0].isNotNull()
            for c in cols[1:]:
                known = known & c.isNotNull()
            return F.when(known, F.format_string(key_format(self.grain), *cols))
        column = F.col(quote_ident(self.column))  # quoted: a name may hold a dot (not a struct field)
        if self.wall_clock:
            # as text, never through date_format, which reads an NTZ value as a TIMESTAMP of the session's zone
            # and so moves a wall clock the zone skips (02:15 of a New York spring-forward night reads 03:15)
            return column.cast("string")
        if self.data_type is not None:
            if self.grain is Grain.HOUR:
                return F.date_format(F.date_trunc("hour", column), _INSTANT)
            day = F.to_date(column) if self.data_type == "timestamp" else column
            return (F.trunc(day, "month") if self.grain is Grain.MONTH else day).cast("string")
        if self.grain is Grain.HOUR and not self.holds_keys:
            return F.date_format(column, _INSTANT)
        return column.cast("string")

    def key(self, raw: str | None) -> str | None:
        """The plan key of one value :meth:`expr` produced (``None`` stays ``None``: a NULL partition value)."""
        if raw is None or self.holds_keys:
            return raw
        if self.wall_clock:
            return wall_value_key(raw, self.time_zone) or raw
        if self.parts:
            from backfill_lib.core.date_parts import hour_key

            return hour_key(raw, self.time_zone) if self.grain is Grain.HOUR else raw
        if self.format is not None:
            start = partition_of_key(raw, self.grain, self.time_zone).start
            return partition_key(start, self.grain, self.format, self.time_zone)
        if self.grain is not Grain.HOUR:
            return raw
        return partition_of_key(raw, self.grain, self.time_zone).key

    def key_of_value(self, value: object) -> str | None:
        """The plan key of a partition value collected into Python: a ``date``, a ``datetime`` (naive ones are
        in this process's local time, as pyspark returns them), or a string from :meth:`expr`."""
        if value is None:
            return None
        if self.wall_clock and isinstance(value, datetime):  # pyspark returns TIMESTAMP_NTZ as the naive wall clock
            return self.key(value.replace(tzinfo=None).isoformat(sep=" "))
        if self.data_type is not None and isinstance(value, date):
            return self._data_key(value)
        if isinstance(value, datetime):
            aware = value if value.tzinfo else value.astimezone()
            return self.key(partition_of_key(aware.isoformat(), self.grain, self.time_zone).key)
        if isinstance(value, date):
            return self.key(value.isoformat())
        return self.key(str(value))

    def key_of_row(self, row: dict) -> str | None:
        """The plan key of a row collected into Python as a dict holding :attr:`columns` (a GX unexpected
        index row): :meth:`key_of_value` of the column, or the parts' values rendered as :meth:`expr` does."""
        if not self.parts:
            return self.key_of_value(row.get(self.column))
        values = [row.get(c) for c in self.parts]
        if any(v is None for v in values):
            return None
        from backfill_lib.core.date_parts import key_format

        return self.key(key_format(self.grain) % tuple(int(v) for v in values))

    def _data_key(self, value: date) -> str:
        """The plan key of a data column's value: the partition of the grain holding it (``time_zone``'s), in the
        plan's format (a rule's source column, :meth:`of_source`, keyed as a string target's plan keys)."""
        return self.key(self._data_partition(value))

    def _data_partition(self, value: date) -> str:
        """The ISO key (``YYYY-MM-DD``, ``YYYY-MM-01``, or an hour's UTC instant) of the grain holding ``value``."""
        from datetime import timezone as _tz

        from backfill_lib.core.partitions import zone

        if isinstance(value, datetime):
            aware = value if value.tzinfo else value.astimezone()
            local = aware.astimezone(zone(self.time_zone))
            if self.grain is Grain.HOUR:
                start = local.replace(minute=0, second=0, microsecond=0)
                return partition_of_key(start.astimezone(_tz.utc).isoformat(), self.grain, self.time_zone).key
            value = local.date()
        return (value.replace(day=1) if self.grain is Grain.MONTH else value).isoformat()

    def rekey(self, values: dict[str | None, V]) -> dict[str | None, V]:
        """``values`` keyed by :meth:`expr`'s strings, re-keyed by plan keys."""
        if self.holds_keys or (self.grain is not Grain.HOUR and self.format is None):
            return values
        return {self.key(k): v for k, v in values.items()}

    def of(self, column: str) -> "PartitionKeys":
        """The same keying for another column holding the same values (an alias of this one)."""
        return PartitionKeys(column, self.grain, self.time_zone, self.format, self.string_column, self.data_type,
                             wall_clock=self.wall_clock)

    def renamed(self, names: dict[str, str]) -> "PartitionKeys":
        """The same keying on other columns holding the same values: each of :attr:`columns` renamed by
        ``names`` (e.g. a diff's positional aliases)."""
        if self.parts:
            return PartitionKeys(self.column, self.grain, self.time_zone, parts=tuple(names[c] for c in self.parts))
        return self.of(names[self.column])

    def of_source(self, column: str) -> "PartitionKeys":
        """The keying of a source table's ``DATE`` or ``TIMESTAMP`` column (a rule's ``source.partition_column``,
        a partition column or a data column) at the same grain: each value keyed as the plan keys the partition
        of ``time_zone`` holding it (in the plan's format). A ``TIMESTAMP`` is taken to its day (or hour) in the
        session's time zone, which a run sets to ``time_zone``."""
        return PartitionKeys(column, self.grain, self.time_zone, self.format, string_column=False,
                             data_type="timestamp")


def keys_of(column: "str | PartitionKeys") -> PartitionKeys:
    """``column`` as :class:`PartitionKeys`; a bare column name is a ``DATE`` column keyed ``YYYY-MM-DD``."""
    return column if isinstance(column, PartitionKeys) else PartitionKeys(column, Grain.DAY, "UTC")
