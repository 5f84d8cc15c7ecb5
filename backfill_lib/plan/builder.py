"""The plan builder: from a checked request and the target's state, the frozen :class:`BackfillPlan`. Pure.

The batch math (partitions per batch from the source's bytes), run IDs, staging table names and the
partition-format checks of intake live here; :mod:`backfill_lib.plan.model` holds the plan's value types.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import replace
from datetime import datetime, timezone

from backfill_lib.core.errors import IntakeError, PartitionError, RequestError
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.partitions import (
    Grain,
    Partition,
    RowFilter,
    enumerate_partitions,
    hour_value_start,
    partition_of_key,
    repeated_keys,
    wall_value_key,
)
from backfill_lib.core.settings import DEFAULT_BATCH_BYTES
from backfill_lib.core.table_names import catalog_staging_table, path_staging_table, table_path
from backfill_lib.core.table_state import PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.table_checks import check_request_against_table, range_in_data
from backfill_lib.plan.generated import check_generated_columns
from backfill_lib.plan.model import BackfillPlan, Batch, PlannedPartition, SourceInput, is_wall_clock

#: Partitions per batch when nothing tells their size (no file-based source, an empty target).
FALLBACK_BATCH_SIZE = 31


def batch_partitions(planned: list[PlannedPartition], source_input: SourceInput, batch_bytes: int) -> int:
    """Partitions per batch so that each batch reads about ``batch_bytes`` bytes. Pure.

    Bytes per partition are the source's input bytes over the whole range (file-system metadata after
    partition pruning, :class:`SourceInput`) spread evenly over the planned partitions; without them, the
    target's current bytes per partition (Delta log). With neither, :data:`FALLBACK_BATCH_SIZE`. The result is
    between 1 and the number of planned partitions.
    """
    n = len(planned)
    if n == 0:
        return 1
    total = source_input.bytes or sum(p.current.bytes for p in planned)
    if not total:
        return min(n, FALLBACK_BATCH_SIZE)
    return max(1, min(n, batch_bytes * n // total))  # batch_bytes / (total / n), in integers


def _with_current_stats(parts: list[Partition], partitions: dict[str, PartitionStats], grain,
                        keyed: bool = False, time_zone: str = "UTC", wall_clock: bool = False) -> list[PlannedPartition]:
    """Each partition with the target's stats for it. Hours are matched by their UTC start, which parses
    Delta's value once per partition instead of building a second set of keys (planning ten years of hours
    stays linear and fast); ``keyed``: the stats are keyed by plan keys already (a formatted string column's
    values; integer date parts' keys, where a text that names no hour, ``2024-03-10T02`` of a spring-forward
    night, must not be read as a UTC hour: it is no planned partition's). ``wall_clock``: the values are a
    ``TIMESTAMP_NTZ`` column's, wall-clock hours of ``time_zone`` (:func:`~backfill_lib.plan.model.stats_by_key`)."""
    from backfill_lib.core.partitions import Grain
    from backfill_lib.plan.model import stats_by_key

    empty = PartitionStats()
    if wall_clock:
        partitions, keyed = stats_by_key(partitions, grain, time_zone, wall_clock=True), True
    if grain is not Grain.HOUR or keyed:
        return [PlannedPartition(p, partitions.get(p.key, empty)) for p in parts]
    by_start = {}
    for value, stats in partitions.items():
        try:
            if value is not None:
                by_start[hour_value_start(value)] = stats
        except PartitionError:  # a value that is no timestamp: no planned partition's
            pass
    return [PlannedPartition(p, by_start.get(p.start.astimezone(timezone.utc), empty)) for p in parts]


def new_run_id(now: datetime) -> str:
    """``bf_YYYYMMDD_HHMMSS_xxxxxx``: UTC time of planning plus 6 random hex digits; safe in table names."""
    return f"bf_{now.astimezone(timezone.utc):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_]{1,80}")


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is 1-80 letters, digits or underscores (it becomes part of a table name).

    Raises
    ------
    RequestError
        Naming the run ID otherwise.
    """
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise RequestError(f"run ID '{run_id}' must be 1 to 80 letters, digits or underscores")
    return run_id


def staging_table_name(target: str, staging_schema: str, run_id: str) -> str:
    """``[catalog.]<staging_schema>.<schema>__<table>__<run_id>``: one staging table per target and run.

    A path-based target ``delta.`<path>``` stages into ``<staging_schema>.path__<slug>__<hash>__<run_id>`` in the
    session catalog (:func:`~backfill_lib.core.table_names.path_staging_table`); a catalog name with a part that
    needs back-quotes (``sales.`order-lines```) into a sanitized, hashed name
    (:func:`~backfill_lib.core.table_names.catalog_staging_table`)."""
    path = table_path(target)
    if path is not None:
        return path_staging_table(path, staging_schema, run_id)
    return catalog_staging_table(target, staging_schema, run_id)


def build_plan(
    request: BackfillRequest,
    state: TableState,
    *,
    request_path: str,
    staging_schema: str,
    batch_size: int | None,
    now: datetime,
    run_id: str | None = None,
    source_input: SourceInput = SourceInput(),
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    where: RowFilter | None = None,
) -> BackfillPlan:
    """Build the frozen plan of ``request`` against the target's ``state``. Pure.

    Parameters
    ----------
    batch_size:
        Partitions per batch when the request does not set ``batch_size``; ``None`` sizes batches by bytes
        (:func:`batch_partitions`, ``batch_bytes`` of source input per batch).
    now:
        Captured once by the caller; the run ID and ``planned_at`` derive from it.
    where:
        The request's ``target.where`` as Spark analysed it (:func:`backfill_lib.intake.where_check.check_where`);
        required when the request has one. ``state.partitions`` are then the stats of ``where``'s files only.

    A rebuild without a range touches every partition the target has now (from the Delta log), in one batch:
    the whole table is re-created at once. A ``depends_on_past`` request gets one batch per partition, in the
    range's order (the run stages them in that order, one at a time; :mod:`backfill_lib.run.past`).

    The plan's ``session_time_zone`` is the request's ``time_zone``: the run's SQL runs in it, not in the
    settings' zone.

    A string partition column (``target.partition_format``) is keyed by its strings. The range's values in the
    Delta log that are not exactly in the format but name a partition of the range (``2024-3-9`` for
    ``yyyy-MM-dd``) are refused: the run would leave their rows beside the recomputed ones. An hour format without
    offset across a daylight-saving fall-back is refused: the repeated hour's two partitions would be one value.

    The target's generated columns are recorded (``target_generated``); one the source omits is computed when
    staging, in the run's time zone, which must be the zone Delta evaluates it in when publishing
    (:func:`~backfill_lib.plan.generated.check_generated_columns`).

    Raises
    ------
    IntakeError
        When the request does not fit the table (see :func:`check_request_against_table`), or its string
        partitions do not (above), or the target has generated columns and the request is a rebuild or would
        publish in another zone than it stages in.
    """
    target = request.target
    if target.where is not None and (where is None or where.text != target.where):
        raise IntakeError(f"field 'target.where': '{target.where}' was not checked against table {state.name}")
    check_request_against_table(request, state, where, request_path)
    grain, tz, fmt = target.grain, request.time_zone, target.partition_format
    bounds = request.bounds()
    data_column = range_in_data(request, state)
    column = state.column(target.partition_column) if target.partition_columns is None else None
    wall = is_wall_clock(grain, column.type if column is not None else None)
    range_files, no_stats = None, 0
    if data_column:
        parts, planned, range_files, no_stats = _data_column_partitions(request, state, bounds)
        start, end = (parts[0].start, parts[-1].end) if parts else (bounds or (None, None))
    elif bounds is None:
        parts = sorted({_partition_of_value(k, grain, tz, fmt, state, target.partition_columns is not None, wall)
                        for k in state.partitions if k is not None})
        start, end = (parts[0].start, parts[-1].end) if parts else (None, None)
    else:
        start, end = bounds
        parts = enumerate_partitions(start, end, grain, tz, fmt, wall_clock=wall)
        if fmt is not None:
            _check_format_values(request, state, parts)
        if target.partition_columns is not None and grain is Grain.HOUR:
            _check_hour_parts(request, parts)
    if not data_column:
        planned = _with_current_stats(parts, state.partitions, grain,
                                      fmt is not None or target.partition_columns is not None, tz, wall)
    if request.strategy.whole_table:  # one CREATE OR REPLACE of the staging table
        size = len(planned) or 1
    elif request.depends_on_past:  # partition N is staged before partition N+1 reads it (run.past)
        size = 1
    else:
        size = request.batch_size or batch_size or batch_partitions(planned, source_input, batch_bytes)
    batches = tuple(
        Batch(i, tuple(planned[j : j + size])) for i, j in enumerate(range(0, len(planned), size))
    )
    minted = not run_id
    run_id = check_run_id(run_id) if run_id else new_run_id(now)
    plan = BackfillPlan(
        run_id=run_id,
        planned_at=now.astimezone(timezone.utc).isoformat(timespec="seconds"),
        request=request,
        request_path=request_path,
        target_location=state.location,
        target_version=state.version,
        range_start=start,
        range_end=end,
        batches=batches,
        staging_table=staging_table_name(request.target.table, staging_schema, run_id),
        source_input=source_input,
        target_columns=state.columns,
        run_id_minted=minted,
        target_change_data_feed=state.change_data_feed,
        session_time_zone=tz,
        target_partition_columns=state.partition_columns,
        where=where,
        range_in_data=data_column,
        clustering_columns=state.clustering_columns,
        range_files=range_files,
        files_without_stats=no_stats,
        target_generated=state.generated,
        target_identity=state.identity,
    )
    check_generated_columns(plan)
    return plan


def _data_column_partitions(request: BackfillRequest, state: TableState, bounds):
    """The partitions of a range on a data column, each with the stats of the files overlapping it, the distinct
    files overlapping the whole range, and how many of them lack statistics (:mod:`backfill_lib.core.file_ranges`).
    Without a range (a rebuild), the partitions span the files' lowest to highest value."""
    from backfill_lib.core.file_ranges import overlap_stats, partitions_of_files, range_cost

    target, tz = request.target, request.time_zone
    timestamps = state.column(target.partition_column).type == "timestamp"
    files = state.files or ()
    if bounds is None:
        span = partitions_of_files(files, target.grain, tz, timestamps)
        if span is None and files:
            raise IntakeError(
                f"table {state.name}: no data file has statistics for column {target.partition_column}, so a rebuild "
                "cannot tell which partitions the table holds; give the request a range")
        parts = enumerate_partitions(*span, target.grain, tz) if span else []
    else:
        parts = enumerate_partitions(*bounds, target.grain, tz)
    stats = overlap_stats(parts, files, target.grain, tz, timestamps)
    planned = [PlannedPartition(p, stats[p.key]) for p in parts]
    cost, no_stats = range_cost(parts, files, target.grain, tz, timestamps)
    return parts, planned, cost, no_stats


def _partition_of_value(value: str, grain, time_zone: str, fmt: str | None, state: TableState,
                        keyed: bool = False, wall_clock: bool = False) -> Partition:
    """The partition a Delta partition value of ``state`` names; a value not in ``fmt`` is an intake error.
    ``keyed``: ``value`` is an integer date parts' key (:class:`~backfill_lib.core.partition_keys.PartitionKeys`),
    so it must be a plan key itself: the text of an hour a spring-forward skips (``2024-03-10T02``) is refused, not
    read as a UTC hour. ``wall_clock``: ``value`` is a ``TIMESTAMP_NTZ`` hour, a wall-clock hour of ``time_zone``
    (one a spring-forward skips, or off the hour, is refused likewise).

    Raises
    ------
    PartitionError
        When ``value`` names no partition of ``grain`` (``keyed``: no date or hour of ``time_zone``).
    IntakeError
        When ``value`` does not match ``fmt``.
    """
    if wall_clock:
        key = wall_value_key(value, time_zone)
        if key is None:
            raise PartitionError(f"table {state.name} holds TIMESTAMP_NTZ partition value '{value}', which is no "
                                 f"wall-clock hour of {time_zone} (off the hour, or an hour a daylight-saving "
                                 "spring-forward skips)")
        return partition_of_key(key, grain, time_zone, wall_clock=True)
    try:
        found = partition_of_key(value, grain, time_zone, fmt)
    except PartitionError as exc:
        if fmt is None:
            raise
        raise IntakeError(f"table {state.name} holds partition value '{value}', which does not match "
                          f"target.partition_format {fmt}: {exc}") from None
    if keyed and found.key != value:
        raise PartitionError(f"table {state.name} holds integer date parts {value}, which name no {grain.value} of "
                             f"{time_zone} (a wall-clock hour a daylight-saving spring-forward skips)")
    return found


def _check_hour_parts(request: BackfillRequest, parts: list[Partition]) -> None:
    """Refuse a range whose hours repeat a wall clock of the request's zone (a daylight-saving fall-back): integer
    hour columns hold the local hour, so the repeated hour's two partitions would be one set of values."""
    from backfill_lib.core.date_parts import values_of

    tz, seen = request.time_zone, {}
    for p in parts:
        values = values_of(p, Grain.HOUR, tz)
        if values in seen:
            shown = " and ".join(q.start.astimezone(timezone.utc).isoformat(timespec="minutes") for q in (seen[values], p))
            raise IntakeError(
                f"field 'target.partition_columns': the hours {shown} (UTC) are both hour {values[3]} of "
                f"{values[0]:04d}-{values[1]:02d}-{values[2]:02d} in {tz} (a daylight-saving fall-back): their rows "
                f"cannot be told apart in {request.target.partition_column}; use time_zone UTC if the columns hold UTC "
                "hours, or a range that does not cross the fall-back")
        seen[values] = p


def _check_format_values(request: BackfillRequest, state: TableState, parts: list[Partition]) -> None:
    """Refuse what a formatted string column cannot backfill exactly (see :func:`build_plan`)."""
    target, tz = request.target, request.time_zone
    fmt = PartitionFormat.of(target.partition_format)
    repeated = repeated_keys(parts)
    if repeated:
        key, hours = repeated[0]
        shown = " and ".join(p.start.astimezone(timezone.utc).isoformat(timespec="minutes") for p in hours)
        raise IntakeError(
            f"field 'target.partition_format': {target.partition_format} renders the hours {shown} (UTC) as the "
            f"same value '{key}' in {tz} (a daylight-saving fall-back): their rows cannot be told apart in "
            f"{target.partition_column}; use a format with an offset (e.g. yyyy-MM-dd'T'HH:mmXXX), time_zone UTC "
            "if the column holds UTC hours, or a range that does not cross the fall-back")
    if not parts:
        return
    keys = {p.key for p in parts}
    first, end = parts[0].start, parts[-1].end
    odd = []
    for value in state.partitions:
        if value is None or value in keys:
            continue
        try:
            fmt.parse(value, target.grain.value, tz)
            continue  # exactly in the format: a partition outside the range
        except PartitionError:
            pass
        start = fmt.loose_start(value, target.grain.value, tz)
        if start is not None and first <= start < end:
            odd.append(value)
    if odd:
        listed = ", ".join(f"'{v}'" for v in sorted(odd)[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        raise IntakeError(
            f"table {state.name} column {target.partition_column} holds partition values in the range that do not "
            f"match target.partition_format {target.partition_format}: {listed}; the run would leave their rows "
            "beside the recomputed ones (rewrite them in the format first)")


def check_selectable(request: BackfillRequest, mode: str, request_path: str) -> None:
    """Refuse ``--only mode`` for a request that cannot take it: a rebuild re-creates the whole table, so it
    cannot leave partitions out; under ``depends_on_past`` every partition after a re-staged one reads it, so
    leaving a later one out would keep it derived from the old rows. Pure.

    Raises
    ------
    IntakeError
        ``"{request_path}: --only {mode} cannot be used with strategy rebuild: ..."``, or ``"... with
        depends_on_past: ..."``.
    """
    if request.depends_on_past:
        raise IntakeError(f"{request_path}: --only {mode} cannot be used with depends_on_past: every partition after "
                          "a re-staged one derives from it and would be left stale (drop --only and run the range from "
                          "the first partition to redo)")
    if request.strategy.whole_table:
        raise IntakeError(f"{request_path}: --only {mode} cannot be used with strategy {request.strategy.value}: it "
                          "re-creates the whole table, so no partition can be left out (drop --only, or use strategy "
                          "recompute)")


def select_partitions(plan: BackfillPlan, selection, batch_size: int | None = None,
                      batch_bytes: int = DEFAULT_BATCH_BYTES) -> BackfillPlan:
    """``plan`` (every partition of its range) restricted to ``selection``
    (:class:`~backfill_lib.core.selection.Selection` of its partitions, in order): the batches hold only the
    selected partitions, and never span an unselected one. Pure.

    Each batch's source is read over ``[first partition's start, last partition's end)``, so a batch across a gap
    would read (and the stray-rows check refuse) the gap's rows: each run of adjacent selected partitions is
    batched on its own, in batches of the size :func:`build_plan` would use for the whole range
    (``batch_size`` as there; bytes per partition from the whole range). Everything else of the plan (range,
    target version, pins) stays; every predicate, validation and the publish then cover the selected partitions.

    Raises
    ------
    IntakeError
        When the plan is a whole-table rebuild, or ``selection`` names a partition the plan does not have at that
        position (it was made for another range).
    """
    from backfill_lib.core.selection import contiguous

    if plan.strategy.whole_table:
        check_selectable(plan.request, selection.mode.value, plan.request_path)
    planned = plan.partitions
    for c in selection.chosen:
        if c.index >= len(planned) or planned[c.index].key != c.key:
            raise IntakeError(f"{plan.request_path}: --only {selection.mode.value} selected partition {c.key}, which "
                              f"is not partition {c.index + 1} of the plan's range")
    size = plan.request.batch_size or batch_size or batch_partitions(list(planned), plan.source_input, batch_bytes)
    if plan.request.depends_on_past:  # partition N reads N-1 as staged: one partition per batch, as build_plan
        size = 1
    batches: list[Batch] = []
    for run in contiguous([c.index for c in selection.chosen]):
        # adjacent in the range's order; a gap inside the plan's own partitions (none today) would split here too
        segment = [planned[run[0]]]
        for i in run[1:]:
            if planned[i].partition.start != segment[-1].partition.end:
                batches.extend(_chunks(segment, size, len(batches)))
                segment = []
            segment.append(planned[i])
        batches.extend(_chunks(segment, size, len(batches)))
    return replace(plan, batches=tuple(batches), selection=selection)


def _chunks(partitions: list[PlannedPartition], size: int, first_index: int) -> list[Batch]:
    return [Batch(first_index + n, tuple(partitions[j:j + size])) for n, j in enumerate(range(0, len(partitions), size))]
