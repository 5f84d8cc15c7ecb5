"""The SQL predicate of a set of partitions, in any layout: ranges of a date or timestamp column, the keys of a
formatted string column, the values of date-part columns, the wall-clock hours of a ``TIMESTAMP_NTZ`` column."""

from __future__ import annotations

from backfill_lib.core.date_parts import parts_predicate
from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partitions import (
    Grain,
    Partition,
    contiguous_runs,
    keys_predicate,
    range_predicate,
    wall_hours_predicate,
)


def partitions_predicate(column: str, partitions: list[Partition], qualifier: str = "", formatted: bool = False,
                         shown: int | None = None, *, parts: tuple[str, ...] = (), grain: Grain | None = None,
                         time_zone: str = "UTC", wall_clock: bool = False) -> str:
    """The SQL predicate selecting exactly ``partitions`` of ``column`` (an OR of contiguous ranges; for a
    ``formatted`` string column, the keys: :func:`~backfill_lib.core.partitions.keys_predicate`). ``qualifier``: a table alias.

    With integer date-part columns ``parts`` (widest first, those of ``grain``; ``column`` is then their label),
    the predicate on those columns: :func:`backfill_lib.core.date_parts.parts_predicate` (an hour's values in
    ``time_zone``'s wall clock). ``wall_clock``: hours of a ``TIMESTAMP_NTZ`` column (:func:`~backfill_lib.core.partitions.wall_hours_predicate`).

    Raises
    ------
    PartitionError
        When ``partitions`` is empty: an empty predicate would scope nothing, so it is never produced.
    """
    if not partitions:
        raise PartitionError("no partitions to build a predicate for")
    if parts:
        return parts_predicate(parts, partitions, grain, time_zone, qualifier)
    if formatted:
        return keys_predicate(column, [p.key for p in sorted(partitions)], qualifier, shown)
    if wall_clock:
        return wall_hours_predicate(column, partitions, time_zone, qualifier)
    runs = contiguous_runs(partitions)
    parts = [f"({range_predicate(column, s, e, qualifier)})" for s, e in runs]
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
