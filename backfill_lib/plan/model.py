"""The plan: one frozen object, built without side effects, printed by the dry run and executed by the run.

``build_plan(request, state, ...)`` decides which partitions are touched, how they are batched, where they are
staged and what the target looked like (version, per-partition files, bytes and rows from the Delta log).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any, Callable

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import (
    Partition,
    RowFilter,
    partition_of_key,
)
from backfill_lib.core.predicates import partitions_predicate
from backfill_lib.core.selection import Selection
from backfill_lib.core.table_state import PartitionStats
from backfill_lib.intake.request import BackfillRequest, Strategy
from backfill_lib.intake.schema_guard import SchemaChange


@dataclass(frozen=True)
class PlannedPartition:
    """A partition the plan touches and what the target holds in it now (from the Delta log)."""

    partition: Partition
    current: PartitionStats

    @property
    def key(self) -> str:
        return self.partition.key


@dataclass(frozen=True)
class Batch:
    """Partitions staged together by one Spark job, contiguous and in order."""

    index: int
    partitions: tuple[PlannedPartition, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.partitions)

    @property
    def start(self) -> date | datetime:
        return self.partitions[0].partition.start

    @property
    def end(self) -> date | datetime:
        return self.partitions[-1].partition.end


@dataclass(frozen=True)
class SourceInput:
    """What the source SQL reads for the whole range: data files and their bytes (file-system metadata, after
    partition pruning; no data read). ``None`` fields when the source is not file-based, or when part of what it
    reads has no files Spark lists (``why_unknown`` says which part); never a count of part of the source."""

    files: int | None = None
    bytes: int | None = None
    why_unknown: str | None = None


@dataclass(frozen=True)
class SourceVersion:
    """A Delta table the run reads and the version it reads it at (pinned once per run; see
    :mod:`backfill_lib.plan.source_pins`). ``table`` is the name as the request writes it (lower-cased parts),
    ``location`` the table's data path (names of one table share it)."""

    table: str
    version: int
    location: str = ""


#: How a stage asks for the implementation of a plan's strategy (a
#: :class:`~backfill_lib.strategies.base.StrategyImpl`, for the plan's strategy and publish mode): the runner, the
#: one module above the stages that imports the implementations, hands :func:`backfill_lib.strategies.implementation`
#: to each stage, so the stages import no strategy.
Implementation = Callable[["BackfillPlan"], Any]


@dataclass(frozen=True)
class BackfillPlan:
    """Everything a run does, fixed before it starts.

    ``range_start`` / ``range_end`` are the half-open bounds of the whole range; ``target_version`` is the
    version of the target the plan read (the publish fence compares against it). Totals are in files, bytes and
    rows of the target's current data in range.
    """

    run_id: str
    planned_at: str
    request: BackfillRequest
    request_path: str
    target_location: str
    target_version: int
    range_start: date | datetime
    range_end: date | datetime
    batches: tuple[Batch, ...]
    staging_table: str
    source_input: SourceInput = SourceInput()
    target_columns: tuple = ()
    #: the run a downstream mart's child run belongs to (its commits carry that run ID)
    parent_run_id: str | None = None
    #: who approved publishing to a protected table (set at run time, not planned)
    approved_by: str | None = None
    #: True when ``build_plan`` minted ``run_id`` (time plus 24 random bits), so no ledger can hold it yet and the
    #: runner skips looking it up; False for a given run ID and for a plan read back from the ledger
    run_id_minted: bool = False
    #: whether the target has the Change Data Feed on (``delta.enableChangeDataFeed``) as the plan read it
    target_change_data_feed: bool = False
    #: the Spark session time zone (``spark.sql.session.timeZone``) the run's SQL is analysed and run in: the
    #: request's ``time_zone``, whatever the settings' zone (set by :func:`build_plan`, recorded in the ledger)
    session_time_zone: str = "UTC"
    #: where staged rows wait for the publish commit: ``durable`` (the staging table) or ``pinned`` (held by the
    #: run's Spark session); chosen when the plan is prepared and again, knowing how far the run goes, when it
    #: starts (:func:`backfill_lib.plan.prepare.staging_choice`)
    staging_mode: str = "durable"
    #: why the run stages so, when the settings or request left it to ``auto`` or it fell back from ``pinned``
    #: (``"one batch, straight through"``); ``None`` for a mode asked and kept
    staging_reason: str | None = None

    @property
    def write_time_zone(self) -> str:
        """The session time zone of the run's writes into a table partitioned by the plan's column (publishing,
        and a rebuild's staging): ``UTC`` for the hour grain, else :attr:`session_time_zone`.

        Delta derives a ``TIMESTAMP`` partition value from its wall-clock text in the session zone
        (``2024-10-27 02:00:00``) parsed back in that zone (``DelayedCommitProtocol.parsePartitions``,
        delta-spark 4.4.0), so in a zone with a daylight-saving fall-back the two repeated hours would get one
        value and the second hour's rows would land in the first; UTC repeats no wall clock. What is written
        is analysed in :attr:`session_time_zone` before, so the rows are the same. Dates have no zone, nor
        ``TIMESTAMP_NTZ`` values (:attr:`wall_clock`): their partition value is their wall clock in every zone.
        """
        from backfill_lib.core.partitions import Grain

        timestamp_hours = (self.request.target.grain is Grain.HOUR and self.partition_format is None
                           and not self.range_in_data  # a data column's values are no partition directory
                           and not self.date_parts  # integer hours hold no instant
                           and not self.wall_clock)
        return "UTC" if timestamp_hours else self.session_time_zone
    #: the version of every Delta source the run reads (source SQL tables, rules' tables); ``None`` until the
    #: run pins them (:func:`backfill_lib.plan.source_pins.pin_sources`), and for runs stored before pinning existed
    source_versions: tuple[SourceVersion, ...] | None = None
    #: the target's partition spec as the plan read it (the range's column at any position); ``()`` for plans
    #: stored before it was recorded
    target_partition_columns: tuple[str, ...] = ()
    #: ``target.where`` as Spark analysed it at intake (``None``: every partition of the range)
    where: RowFilter | None = None
    #: whether the range's column is a data column, not a partition column (an unpartitioned or clustered table,
    #: or one partitioned by other columns): its partitions are the grain's spans of the column's values, their
    #: cost comes from the files' min/max statistics (:mod:`backfill_lib.core.file_ranges`)
    range_in_data: bool = False
    #: the target's liquid clustering columns as the plan read them (``()``: not clustered)
    clustering_columns: tuple[str, ...] = ()
    #: with :attr:`range_in_data`: the distinct files overlapping the range (a file spanning several partitions
    #: counts once), and how many of them have no statistics for the column (their rows are unknown)
    range_files: PartitionStats | None = None
    files_without_stats: int = 0

    @property
    def range_type(self) -> str:
        """The Spark type of the range's column (``date``, ``timestamp`` or ``string``) as the plan read it."""
        if self.date_parts:
            return "int"
        found = next((c.type for c in self.target_columns if c.name == self.partition_column), None)
        return found or ("string" if self.partition_format else self.request.target.grain.spark_type)

    @property
    def wall_clock(self) -> bool:
        """Whether the range's column is a ``TIMESTAMP_NTZ`` of the hour grain: its partitions are the wall-clock
        hours of the request's time zone (:func:`~backfill_lib.core.partitions.wall_hours`)."""
        return is_wall_clock(self.request.target.grain, self.range_type)
    #: the target's generated columns as the plan read them (:class:`~backfill_lib.core.table_state.GeneratedColumn`):
    #: staging computes one the source omits; ``()`` for plans stored before they were recorded
    target_generated: tuple = ()
    #: ``--only missing|failed|changed``: the partitions of the range selected and why
    #: (:mod:`backfill_lib.core.selection`); the batches hold only those. ``None``: every partition of the range
    selection: Selection | None = None
    #: a rebuild's differences between the target's schema and the source's, which the rebuilt table takes
    #: (:func:`~backfill_lib.intake.schema_guard.schema_changes`, as the plan analysed the source); ``()`` for
    #: recompute and patch, which keep the target's schema
    schema_changes: tuple[SchemaChange, ...] = ()
    #: the target's IDENTITY columns as the plan read them (:class:`~backfill_lib.core.table_state.IdentityColumn`;
    #: intake refuses ``GENERATED ALWAYS`` ones); ``()`` for plans stored before they were recorded
    target_identity: tuple = ()

    @property
    def pinned_versions(self) -> dict[str, int] | None:
        """``{table: version}`` of :attr:`source_versions` (``None`` when not pinned)."""
        return None if self.source_versions is None else {s.table: s.version for s in self.source_versions}

    @property
    def commit_run_id(self) -> str:
        """The run ID recorded in the target's commits: the parent run's, for a mart."""
        return self.parent_run_id or self.run_id

    @property
    def strategy(self) -> Strategy:
        return self.request.strategy

    @property
    def target_table(self) -> str:
        return self.request.target.table

    @property
    def partition_column(self) -> str:
        return self.request.target.partition_column

    @property
    def date_parts(self) -> tuple[str, ...]:
        """The integer year/month/day(/hour) partition columns carrying the range (``target.partition_columns``,
        widest first); ``()`` when one column carries it (:attr:`partition_column`)."""
        parts = self.request.target.partition_columns
        return parts.columns() if parts is not None else ()

    @property
    def range_columns(self) -> tuple[str, ...]:
        """The target's columns that carry the range: :attr:`date_parts`, or :attr:`partition_column`."""
        return self.date_parts or (self.partition_column,)

    @property
    def partition_format(self) -> str | None:
        """The pattern of a ``STRING`` partition column (``target.partition_format``), else ``None``."""
        return self.request.target.partition_format

    @property
    def partition_spec(self) -> tuple[str, ...]:
        """The target's partition columns in order (``()`` when unpartitioned; the range's column alone for a plan
        stored without them)."""
        if self.range_in_data:
            return self.target_partition_columns
        return self.target_partition_columns or self.range_columns

    @property
    def partitions(self) -> tuple[PlannedPartition, ...]:
        return tuple(p for b in self.batches for p in b.partitions)

    @property
    def partition_keys(self) -> PartitionKeys:
        """How runtime code keys the partition column's values as this plan keys its partitions."""
        return PartitionKeys(self.partition_column, self.request.target.grain, self.request.time_zone,
                             self.partition_format, data_type=self.range_type if self.range_in_data else None,
                             parts=self.date_parts, wall_clock=self.wall_clock)

    def partition_predicate(self, partitions: list[Partition] | None = None, qualifier: str = "",
                            shown: int | None = None) -> str:
        """The SQL predicate of ``partitions`` (default: every planned partition) on the partition column alone:
        ranges of ``DATE``/``TIMESTAMP`` literals, or the keys of a formatted string column (``shown``: a
        shortened ``IN`` list, for people)."""
        chosen = partitions if partitions is not None else [p.partition for p in self.partitions]
        if self.date_parts:
            return partitions_predicate(self.partition_column, chosen, qualifier, parts=self.date_parts,
                                        grain=self.request.target.grain, time_zone=self.request.time_zone)
        if self.range_in_data and self.range_type == "timestamp":  # days of a timestamp: local midnights, in UTC
            from backfill_lib.core.file_ranges import instant_bounds

            grain, tz = self.request.target.grain, self.request.time_zone
            chosen = [Partition(*instant_bounds(p, grain, tz), p.key) for p in chosen]
        return partitions_predicate(self.partition_column, chosen, qualifier, self.partition_format is not None,
                                    shown, time_zone=self.request.time_zone, wall_clock=self.wall_clock)

    def predicate(self, partitions: list[Partition] | None = None, qualifier: str = "",
                  shown: int | None = None) -> str:
        """The SQL predicate of the rows the run covers: ``partitions`` (default: every planned partition) on
        the partition column, ``AND`` the request's ``target.where`` when it has one. ``qualifier``: ``""``, or
        ``t`` for the target's alias in a MERGE."""
        chosen = self.partition_predicate(partitions, qualifier, shown)
        return chosen if self.where is None else f"{chosen} AND ({self.where.on(qualifier)})"

    def batch_predicate(self, batch: Batch) -> str:
        return self.predicate([p.partition for p in batch.partitions])

    @property
    def total(self) -> PartitionStats:
        """Sum of the target's files, bytes and rows over the planned partitions (rows ``None`` if unknown); for a
        range on a data column, the distinct files overlapping it (:attr:`range_files`)."""
        if self.range_files is not None:
            return self.range_files
        cur = [p.current for p in self.partitions]
        rows = None if any(c.rows is None for c in cur) else sum(c.rows for c in cur)
        return PartitionStats(sum(c.files for c in cur), sum(c.bytes for c in cur), rows)

    def summary(self) -> dict:
        """A JSON-ready summary stored in the ledger with the run."""
        total = self.total
        return {
            "run_id": self.run_id,
            "planned_at": self.planned_at,
            "request": json.loads(self.request.model_dump_json()),
            "request_path": self.request_path,
            "target_version": self.target_version,
            "range_start": str(self.range_start),
            "range_end_exclusive": str(self.range_end),
            # what the run's lease holds: its range, or the whole table (core.leases reads this, not the strategy)
            "whole_table": self.strategy.whole_table,
            "partitions": len(self.partitions),
            "batches": [list(b.keys) for b in self.batches],
            "staging_table": self.staging_table,
            "staging_mode": self.staging_mode,
            "staging_reason": self.staging_reason,
            "current": asdict(total),
            "current_rows": {p.key: p.current.rows for p in self.partitions},
            "current_partitions": {p.key: asdict(p.current) for p in self.partitions},
            "target_location": self.target_location,
            "target_columns": [asdict(c) for c in self.target_columns],
            "source_input": asdict(self.source_input),
            "parent_run_id": self.parent_run_id,
            "target_change_data_feed": self.target_change_data_feed,
            "session_time_zone": self.session_time_zone,
            "write_time_zone": self.write_time_zone,
            "source_versions": (None if self.source_versions is None
                                else [asdict(s) for s in self.source_versions]),
            "target_partition_columns": list(self.target_partition_columns),
            "where": None if self.where is None else asdict(self.where),
            "range_in_data": self.range_in_data,
            "clustering_columns": list(self.clustering_columns),
            "range_files": None if self.range_files is None else asdict(self.range_files),
            "files_without_stats": self.files_without_stats,
            "target_generated": [asdict(g) for g in self.target_generated],
            "selection": None if self.selection is None else self.selection.to_json(),
            # also in "request"; here for readers of the ledger: batches are one partition each, staged in order
            "depends_on_past": self.request.depends_on_past,
            "schema_changes": [asdict(c) for c in self.schema_changes],
            "target_identity": [asdict(c) for c in self.target_identity],
        }


def is_wall_clock(grain, column_type: str | None) -> bool:
    """Whether a range of ``grain`` on a column of Spark type ``column_type`` is planned in wall-clock hours: an
    hour grain on a ``TIMESTAMP_NTZ`` column."""
    from backfill_lib.core.partitions import Grain

    return grain is Grain.HOUR and column_type == "timestamp_ntz"


def stats_by_key(partitions: dict[str, PartitionStats], grain, time_zone: str,
                 fmt: str | None = None, *, keyed: bool = False, wall_clock: bool = False) -> dict[str, PartitionStats]:
    """Stats by partition value (from the Delta log) keyed as the plan keys them.

    Returned as they are when the values are plan keys already: day and month values, a formatted string
    column's (``fmt``; a value not in the format matches no plan key), and ``keyed`` ones (integer date parts,
    keyed by :class:`~backfill_lib.core.partition_keys.PartitionKeys`: a text that names no date or hour, such as
    ``2024-03-10T02`` of a New York spring-forward night, stays as it is and matches no plan key). Delta's
    timestamp hour values (UTC: ``2024-03-10T07:00:00.000000Z``) become local keys of ``time_zone``; a ``None``
    value, or one that is no timestamp, is left out. ``wall_clock``: the values are a ``TIMESTAMP_NTZ`` column's
    (``2024-03-10 03:00:00``), wall-clock hours of ``time_zone``; one that is no hour of the zone is left out."""
    from backfill_lib.core.partitions import Grain, wall_value_key

    if grain is not Grain.HOUR or fmt is not None or keyed:
        return partitions
    if wall_clock:
        return {key: v for k, v in partitions.items() if k is not None and (key := wall_value_key(k, time_zone))}
    out = {}
    for k, v in partitions.items():
        try:
            if k is not None:
                out[partition_of_key(k, grain, time_zone).key] = v
        except PartitionError:  # no timestamp: no plan key is its
            pass
    return out


def plan_from_summary(summary: dict) -> BackfillPlan:
    """Rebuild the frozen plan a run stored in the ledger (:meth:`BackfillPlan.summary`), for publishing a
    validated run later or resuming it. The partitions, batches and the target state the plan saw come back
    exactly; nothing is re-read from the tables."""
    from backfill_lib.core.table_state import Column, GeneratedColumn, IdentityColumn

    request = BackfillRequest.model_validate(summary["request"])
    grain, tz, fmt = request.target.grain, request.time_zone, request.target.partition_format
    stats = summary["current_partitions"]
    range_type = next((c["type"] for c in summary["target_columns"] if c["name"] == request.target.partition_column),
                      None)
    wall = is_wall_clock(grain, range_type) and not summary.get("range_in_data")
    batches = tuple(
        Batch(i, tuple(PlannedPartition(partition_of_key(k, grain, tz, fmt, wall_clock=wall), PartitionStats(**stats[k]))
                       for k in keys))
        for i, keys in enumerate(summary["batches"])
    )
    parts = [p.partition for b in batches for p in b.partitions]
    bounds = request.bounds() or ((parts[0].start, parts[-1].end) if parts else (None, None))
    return BackfillPlan(
        run_id=summary["run_id"],
        planned_at=summary["planned_at"],
        request=request,
        request_path=summary["request_path"],
        target_location=summary["target_location"],
        target_version=summary["target_version"],
        range_start=bounds[0],
        range_end=bounds[1],
        batches=batches,
        staging_table=summary["staging_table"],
        staging_mode=summary.get("staging_mode") or "durable",
        staging_reason=summary.get("staging_reason"),
        source_input=SourceInput(**summary["source_input"]),
        target_columns=tuple(Column(**c) for c in summary["target_columns"]),
        parent_run_id=summary.get("parent_run_id"),
        target_change_data_feed=bool(summary.get("target_change_data_feed", False)),
        # a plan stored before the field ran in the settings' zone; it continues in the request's
        session_time_zone=summary.get("session_time_zone") or tz,
        source_versions=(None if summary.get("source_versions") is None
                         else tuple(SourceVersion(**s) for s in summary["source_versions"])),
        target_partition_columns=tuple(summary.get("target_partition_columns") or ()),
        where=None if summary.get("where") is None else RowFilter(**{**summary["where"],
                                                                      "columns": tuple(summary["where"]["columns"])}),
        range_in_data=bool(summary.get("range_in_data", False)),
        clustering_columns=tuple(summary.get("clustering_columns") or ()),
        range_files=None if summary.get("range_files") is None else PartitionStats(**summary["range_files"]),
        files_without_stats=int(summary.get("files_without_stats") or 0),
        target_generated=tuple(GeneratedColumn(**g) for g in summary.get("target_generated") or ()),
        selection=None if summary.get("selection") is None else Selection.from_json(summary["selection"]),
        schema_changes=tuple(SchemaChange(**c) for c in summary.get("schema_changes") or ()),
        target_identity=tuple(IdentityColumn(**c) for c in summary.get("target_identity") or ()),
    )
