"""Staging tables: where a run writes the rows of each partition batch before anything is published.

One staging Delta table per run and target: the target's columns plus ``_backfill_batch`` (INT, the plan's batch
index), partitioned by ``_backfill_batch`` rather than by the target's partition column. A batch is written with
``replaceWhere`` on its batch partition *and* its target partitions, so a retried or resumed batch replaces its
rows and never appends (Delta's replaceWhere check refuses any row outside that condition).

Why by batch: a batch then writes one or a few files instead of one file per target partition (365 tiny files
for a year of days), and every audit of the staged rows (GX, reconciliation, diff, checksum) opens those few
files. Concurrent batches still never conflict, because each one's ``replaceWhere`` reads only its own batch
partition (Delta checks conflicts by partition values). Publishing writes the target's partitioning once.
Read staged rows with :func:`staged_rows`, which drops the batch column.

A run's first batch write creates the table, in the same commit as its rows (:class:`StagingTable`): creating it
empty first would cost a commit, and the first replaceWhere on the new table a load of its snapshot. A source row
outside the batch's partitions is found by the count that precedes every write, so it fails the batch before
anything is written, whichever write it would have been.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from backfill_lib.adapters.delta_log import live_metadata
from backfill_lib.core.errors import (LeaseError, PartitionError, SchemaMismatchError, StagingLocationError,
                                     StrayRowsError, error_condition)
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.retry import is_conflict
from backfill_lib.core.table_state import Column, column_mapping_mode
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.core.staging_mode import PINNED

#: The staging table's partition column: the plan's batch index (INT). Not a column of the target.
BATCH_COLUMN = "_backfill_batch"
#: Up to how many pinned rows a run gathers into one Spark partition once staged (:meth:`PinnedRows.gather`): so
#: few that one task reads or writes them in a moment, where every aggregation of rows spread over several Spark
#: partitions adds a shuffle stage, a Spark job of its own (GX's metrics, the audits' aggregations, the
#: publishing repartition)
SMALL_PIN_ROWS = 20_000


@dataclass(frozen=True)
class Layout:
    """How one batch's pinned rows lie in the session's Spark partitions (read in the batch's count, no job of its
    own): ``by_partition`` whether every target partition's rows are in one Spark partition, ``holders`` how many
    Spark partitions hold rows when they are (else 0), ``partitions`` how many target partitions have rows,
    ``rows`` how many rows."""

    by_partition: bool
    holders: int
    partitions: int
    rows: int = 0

    def __add__(self, other: "Layout") -> "Layout":
        # batches hold disjoint target partitions, each batch its own Spark partitions
        return Layout(self.by_partition and other.by_partition, self.holders + other.holders,
                      self.partitions + other.partitions, self.rows + other.rows)

    @property
    def gathered(self) -> bool:
        """Whether every row lies in one Spark partition (or there is none)."""
        return self.by_partition and self.holders <= 1

    def written_as_is(self, tasks: int) -> bool:
        """Whether writing the rows as they lie writes each target partition as one file from one task, over at
        least ``tasks`` tasks (or one per target partition, if fewer): as a repartition by the partition
        columns into ``tasks`` tasks would, without its shuffle. Rows all in one Spark partition, at most
        :data:`SMALL_PIN_ROWS`, are written by that one task."""
        return self.by_partition and (self.holders >= min(tasks, self.partitions)
                                      or self.gathered and self.rows <= SMALL_PIN_ROWS)


#: Error conditions of a staging table's create that another process's create of the same table at the same
#: moment causes (besides ``TABLE_OR_VIEW_ALREADY_EXISTS``): after one, the table is waited for.
RACED_CREATE = frozenset({"DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_PROTOCOL_CHANGED",
                          "DELTA_METADATA_CHANGED"})


def raced_create(exc: BaseException) -> bool:
    """Whether a staging table's failed create may have met another process's create of the same table: one of
    :data:`RACED_CREATE`, or a Delta commit conflict (converted by PySpark, whose Delta classes carry no
    condition, or not)."""
    return error_condition(exc) in RACED_CREATE or is_conflict(exc)


#: How long (seconds) a create that met another's files waits for that table to be registered.
CREATE_WAIT_SECONDS = 60.0


class StagingTable:
    """Writes batches into the run's staging table (``exists``: whether it exists yet).

    While it does not exist, the first batch to write creates it from its rows (``CREATE TABLE ... AS SELECT``,
    partitioned by ``_backfill_batch``) while the others wait for it; every later write replaces its batch
    (``replaceWhere`` on the batch and its partitions). Safe for concurrent batches.
    """

    def __init__(self, plan: BackfillPlan, exists: bool, properties: dict[str, str] | None = None):
        self.name = plan.staging_table
        self.run_id = plan.run_id
        self._exists = exists
        self._lock = threading.Lock()
        #: table properties the table is created with (:func:`staging_properties`)
        self.properties = {"delta.appendOnly": "false", **(properties or {})}

    def gather(self) -> None:
        """Nothing: the staging table's files are read as they lie (see :meth:`PinnedRows.gather`)."""

    def write(self, rows: DataFrame, condition: str, layout: Layout | None = None) -> None:
        """Write ``rows`` (with ``_backfill_batch``), replacing the staged rows that meet ``condition``
        (``layout`` is not kept: the table's files are laid out by this write).

        Raises
        ------
        LeaseError
            When the table's create finds it created by another process running this run ID (at once, or within
            :data:`CREATE_WAIT_SECONDS` after a create that met its files or its first commit).
        StagingLocationError
            When the table's location holds files but no table appears there in that time."""
        if not self._exists:
            with self._lock:
                if not self._exists:
                    # A new table has no rows to replace; Spark creates it with every column nullable.
                    writer = rows.writeTo(self.name).using("delta").partitionedBy(F.col(BATCH_COLUMN))
                    for key, value in self.properties.items():
                        writer = writer.tableProperty(key, value)
                    try:
                        writer.create()
                    except Exception as exc:
                        # Two processes running one run ID create the table together: the loser meets the catalog
                        # entry, the winner's files not yet committed, or its first log commit.
                        condition = error_condition(exc)
                        if condition == "TABLE_OR_VIEW_ALREADY_EXISTS" or self._appears(rows, raced_create(exc)):
                            raise self._created_elsewhere() from exc
                        if condition == "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION":
                            raise self._stray_files(exc) from exc
                        raise
                    self._exists = True
                    return
        # writeTo(...).overwrite(condition) is Delta's replaceWhere, without saveAsTable's catalog rewrite.
        rows.writeTo(self.name).overwrite(F.expr(condition))

    def _appears(self, rows: DataFrame, wait: bool) -> bool:
        """Whether this staging table is in the catalog now or, when ``wait``, within :data:`CREATE_WAIT_SECONDS`
        (another process's create writes its files, commits its log, then registers the table)."""
        spark = rows.sparkSession
        deadline = time.monotonic() + (CREATE_WAIT_SECONDS if wait else 0)
        while not spark.catalog.tableExists(self.name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        return True

    def _stray_files(self, exc: Exception) -> StagingLocationError:
        """The refusal of a create whose location holds files but no Delta table, and no table appeared there."""
        found = re.search(r"location \('([^']+)'\)", str(exc))
        where = found.group(1) if found else "its location"
        return StagingLocationError(
            f"staging table {self.name}: {where} holds files but no Delta table (a process killed while creating it "
            f"left them, or another process running run ID {self.run_id} is still writing them): once no process runs "
            f"{self.run_id}, remove that folder and run again; nothing was written")

    def _created_elsewhere(self) -> LeaseError:
        """The refusal of a run whose staging table another process created after this one found it missing:
        the same run ID run twice at once (``run --run-id`` found the other's plan in the ledger and resumed
        it, or both resumed it)."""
        return LeaseError(f"run ID {self.run_id} was started by another process at the same moment, and it created "
                          f"the run's staging table {self.name} first: that process runs it (`backfill status "
                          f"{self.run_id}`); this one wrote nothing")

    @staticmethod
    def hold(rows: DataFrame) -> DataFrame:
        """``rows`` computed once for the batch's count and its write: persisted (memory, spilling to disk)."""
        return rows.persist(StorageLevel.MEMORY_AND_DISK)

    @staticmethod
    def let_go(rows: DataFrame) -> None:
        """Free what :meth:`hold` kept, once the batch is written."""
        rows.unpersist()


class PinnedRows:
    """A pinned run's staged rows (:mod:`backfill_lib.core.staging_mode`): each batch's rows checkpointed in the
    session (``localCheckpoint``: computed once, kept by the block manager in memory and spilled to local
    disk), read back by :func:`staged_rows` under the run's staging table name. Nothing is written to any table;
    nothing outlives the process. Safe for concurrent batches; a batch written again replaces its rows."""

    def __init__(self, name: str):
        self.name = name
        self._batches: dict[str, DataFrame] = {}
        self._layouts: dict[str, Layout | None] = {}
        self._lock = threading.Lock()

    @staticmethod
    def hold(rows: DataFrame) -> DataFrame:
        """``rows`` pinned: computed once, by the first job that reads them (the batch's count), and kept for every
        later read (``localCheckpoint``, not eager: an eager one is a job of its own, and the count a second pass)."""
        return rows.localCheckpoint(eager=False)

    @staticmethod
    def let_go(rows: DataFrame) -> None:
        """Nothing: the pinned rows are the staged rows until the run ends (:func:`release_pinned`)."""

    def write(self, rows: DataFrame, condition: str, layout: Layout | None = None) -> None:
        """Keep ``rows`` (pinned by :meth:`hold`, with ``_backfill_batch``) as the batch that ``condition`` names,
        replacing its earlier rows; ``layout``: how they lie (``None``: not known)."""
        with self._lock:
            self._batches[condition] = rows
            self._layouts[condition] = layout

    def gather(self) -> None:
        """Once every batch is staged: pin the rows of every batch again as one Spark partition when they are at
        most :data:`SMALL_PIN_ROWS` and lie in more than one (one Spark job, over the rows already pinned), so
        that every later read (the audits, GX, the publishing write) aggregates them without a shuffle."""
        layout = self.layout()
        if layout is None or layout.gathered or layout.rows > SMALL_PIN_ROWS:
            return
        with self._lock:
            batches = list(self._batches.values())
        # eager: the rows are read from the batches' pins while they are still held
        rows = reduce(lambda a, b: a.unionByName(b), batches).coalesce(1).localCheckpoint(eager=True)
        with self._lock:
            self._batches = {"every batch": rows}
            self._layouts = {"every batch": Layout(True, 1, layout.partitions, layout.rows)}

    def layout(self) -> Layout | None:
        """How every pinned batch's rows lie together (in :meth:`rows`), or ``None`` when a batch's is not known
        or nothing is pinned."""
        with self._lock:
            layouts = list(self._layouts.values())
        return None if not layouts or None in layouts else reduce(lambda a, b: a + b, layouts)

    @property
    def holds_rows(self) -> bool:
        """Whether a batch has been pinned yet (no DataFrame is built to tell)."""
        with self._lock:
            return bool(self._batches)

    def rows(self) -> DataFrame | None:
        """Every pinned batch's rows (``_backfill_batch`` kept), or ``None`` before the first batch."""
        with self._lock:
            batches = list(self._batches.values())
        return None if not batches else reduce(lambda a, b: a.unionByName(b), batches)


_PINNED: dict[str, PinnedRows] = {}
_PINNED_LOCK = threading.Lock()


def pin_staging(name: str) -> PinnedRows:
    """Start the pinned rows of the staging table ``name`` in this process (replacing any pinned earlier)."""
    with _PINNED_LOCK:
        _PINNED[name] = PinnedRows(name)
        return _PINNED[name]


def pinned(name: str | None) -> bool:
    """Whether this process holds pinned rows under the staging table name ``name``."""
    with _PINNED_LOCK:
        held = _PINNED.get(name)
    return held is not None and held.holds_rows


def pinned_layout(name: str) -> Layout | None:
    """How the rows this process pinned under the staging table name ``name`` lie (:meth:`PinnedRows.layout`);
    ``None`` for a staging table or when it is not known."""
    with _PINNED_LOCK:
        held = _PINNED.get(name)
    return None if held is None else held.layout()


def release_pinned(name: str) -> None:
    """Let go of the pinned rows of ``name`` (the run finished, however it ended)."""
    with _PINNED_LOCK:
        _PINNED.pop(name, None)


@contextlib.contextmanager
def releasing_pinned(name: str):
    """Let go of the rows pinned under ``name`` when the block ends, however it ends (the run is over)."""
    try:
        yield
    finally:
        release_pinned(name)


def open_staging_table(spark: SparkSession, plan: BackfillPlan) -> StagingTable | PinnedRows:
    """The run's staging table, to be created by its first write when it does not exist yet (its schema is then
    created too); for a plan whose ``staging_mode`` is ``pinned``, its :class:`PinnedRows` instead (no table).

    Raises
    ------
    SchemaMismatchError
        When the staging table exists without ``_backfill_batch`` (staged by an earlier delta-backfill,
        partitioned like the target); nothing is created or written. A column of that name in the target or the
        source is refused earlier, by :func:`check_reserved_column` at intake.
    """
    if plan.staging_mode == PINNED:
        return pin_staging(plan.staging_table)
    exists = spark.catalog.tableExists(plan.staging_table)
    if exists and BATCH_COLUMN not in spark.table(plan.staging_table).columns:
        raise SchemaMismatchError(
            f"staging table {plan.staging_table} has no {BATCH_COLUMN} column (staged by an earlier delta-backfill): "
            f"run {plan.run_id} cannot continue in it; start a new run of the request"
        )
    if exists:
        return StagingTable(plan, exists)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {plan.staging_table.rsplit('.', 1)[0]}")
    return StagingTable(plan, exists, {**staging_properties(spark, plan.target_table), **staging_stats_properties(plan)})


#: What a staging table of a column-mapped target is created with: name mapping and the protocol it needs
#: (Delta protocol, "Column Mapping": reader version 2, writer version 5).
COLUMN_MAPPING_PROPERTIES = {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
                             "delta.minWriterVersion": "5"}


def staging_properties(spark: SparkSession, target_table: str) -> dict[str, str]:
    """The table properties a staging table of ``target_table`` inherits: column mapping by name when the target
    maps columns (by name or id), since its column names may then hold characters Delta refuses in unmapped
    tables (a space, ``,;{}()=``); nothing otherwise. Read from the target's latest snapshot (no Spark job)."""
    properties, _ = live_metadata(spark, target_table)
    return dict(COLUMN_MAPPING_PROPERTIES) if column_mapping_mode(properties) != "none" else {}


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def staging_stats_properties(plan: BackfillPlan) -> dict[str, str]:
    """File statistics a staging table collects: ``numRecords`` and the partition columns' statistics only
    (``delta.dataSkippingStatsColumns``), not Delta's default of the first 32 columns.

    Why: nothing reads a staging table's statistics but row counts and the data skipping of the range predicate
    (on the partition columns); on a row-level table, collecting min/max/null counts of every column is a
    noticeable share of the staging write. Publishing rewrites the rows, so the target's own files get Delta's
    default statistics. Empty (Delta's default) when a partition column's name is not a plain identifier, which the
    property's comma-separated list could not hold unambiguously."""
    columns = plan.partition_keys.columns
    if not all(_PLAIN_NAME.fullmatch(c) for c in columns):
        return {}
    return {"delta.dataSkippingStatsColumns": ",".join(columns)}


def check_reserved_column(target_table: str, target: tuple[Column, ...], source_sql: str,
                          source: tuple[Column, ...]) -> None:
    """Refuse a target or source column named ``_backfill_batch`` (the staging table's partition column).

    Raises
    ------
    SchemaMismatchError
        Naming the target table, or the source SQL, that has the column.
    """
    for where, columns, fix in ((target_table, target, "the target"), (source_sql, source, "the source SQL")):
        if any(c.name.lower() == BATCH_COLUMN for c in columns):
            raise SchemaMismatchError(
                f"{where}: column {BATCH_COLUMN} is reserved for the staging table's batch partition; "
                f"rename it in {fix}"
            )


def staged_rows(spark: SparkSession, staging_table: str) -> DataFrame:
    """The rows staged in ``staging_table``, with the target's columns only (``_backfill_batch`` dropped): the
    rows this process pinned under that name (a pinned run), else the staging table's."""
    with _PINNED_LOCK:
        held = _PINNED.get(staging_table)
    rows = None if held is None else held.rows()
    return (spark.table(staging_table) if rows is None else rows).drop(BATCH_COLUMN)


def aligned(df: DataFrame, casts: tuple[ColumnCast, ...]) -> DataFrame:
    """``df`` with the target's columns in the target's order, widened columns cast explicitly, and generated
    columns the source omits computed by their expressions.

    A generated column is computed over the *aligned* columns (after widening), as Delta evaluates it over the
    written row, in the session time zone of this analysis (the run's: the request's ``time_zone``), which the
    plan makes sure is the zone Delta evaluates it in when publishing
    (:func:`backfill_lib.plan.generated.check_generated_columns`)."""
    plain = [c for c in casts if c.expression is None]
    cols = [F.col(quote_ident(c.name)) for c in plain]  # quoted: a name may hold a dot (not a struct field)
    # aliased: a source column spelt in another case (a case-insensitive session) takes the target's spelling
    df = df.select([(col.cast(c.type) if c.cast else col).alias(c.name) for col, c in zip(cols, plain)])
    if len(plain) == len(casts):
        return df
    return df.select([F.col(quote_ident(c.name)) if c.expression is None
                      else F.expr(f"({c.expression})").cast(c.type).alias(c.name) for c in casts])


def stage_batch(plan: BackfillPlan, batch: Batch, df: DataFrame, staging: StagingTable | PinnedRows,
                before_write: Callable[[], None] = lambda: None) -> dict[str, int]:
    """Write ``df`` into the staging table as batch ``batch.index``, replacing that batch's earlier rows; return
    rows per partition key.

    ``df`` is held by ``staging`` (persisted, or pinned for good by a pinned run) and counted per partition first
    (the source runs once, in that count), then ``before_write`` is called and the very rows counted are written:
    the count finds stray rows before anything is written and needs no read of the staging table afterwards. A planned partition the source
    left empty counts 0 rows.

    Raises
    ------
    StrayRowsError
        When ``df`` holds rows outside the batch's partitions or outside ``target.where``; the message names the
        first offending partitions and their row counts (a value not in a string column's
        ``partition_format`` says so). Nothing is written.
    """
    predicate = plan.batch_predicate(batch)
    keys = plan.partition_keys
    df = staging.hold(df)
    try:
        in_range = F.coalesce(F.expr(plan.partition_predicate([p.partition for p in batch.partitions])), F.lit(False))
        in_where = F.lit(True) if plan.where is None else F.coalesce(F.expr(f"({plan.where.sql})"), F.lit(False))
        # Each group's Spark partition ids (the held rows' own: no shuffle comes before), for the layout the
        # publishing write may keep (Layout.written_as_is); projected first, as Spark refuses a nondeterministic
        # expression inside an aggregate.
        counted = (df.select(keys.expr().alias("p"), in_range.alias("in_range"), in_where.alias("in_where"),
                             F.spark_partition_id().alias("pid"))
                   .groupBy("p", "in_range", "in_where")
                   .agg(F.count("*").alias("count"), F.min("pid").alias("lo"), F.max("pid").alias("hi")).collect())
        stray = [r for r in counted if not (r["in_range"] and r["in_where"])]
        if stray:
            raise StrayRowsError(_stray_message(plan, batch, stray))
        before_write()
        staging.write(df.withColumn(BATCH_COLUMN, F.lit(batch.index).cast("int")),
                      f"{BATCH_COLUMN} = {batch.index} AND ({predicate})", _layout(counted))
    finally:
        staging.let_go(df)
    rows: dict[str | None, int] = {}
    for r in counted:  # every group is inside both here
        rows[r["p"]] = rows.get(r["p"], 0) + int(r["count"])
    rows = keys.rekey(rows)
    return {key: rows.get(key, 0) for key in batch.keys}


def _layout(counted: list) -> Layout:
    """The :class:`Layout` of a batch's rows from :func:`stage_batch`'s groups (``p``, ``lo``, ``hi``)."""
    spans: dict[object, tuple[int, int]] = {}
    for r in counted:
        lo, hi = spans.get(r["p"], (r["lo"], r["hi"]))
        spans[r["p"]] = (min(lo, r["lo"]), max(hi, r["hi"]))
    by_partition = all(lo == hi for lo, hi in spans.values())
    return Layout(by_partition, len({lo for lo, _ in spans.values()}) if by_partition else 0, len(spans),
                  sum(int(r["count"]) for r in counted))


def _stray_message(plan: BackfillPlan, batch: Batch, stray: list) -> str:
    """What :func:`stage_batch` says of ``stray`` (grouped counts outside the batch's partitions or ``where``)."""
    keys, fmt = plan.partition_keys, plan.partition_format

    def listed(groups: list) -> str:
        counts: dict[tuple[bool, str], int] = {}
        for r in groups:
            slot = (r["p"] is not None, r["p"] or "")
            counts[slot] = counts.get(slot, 0) + int(r["count"])
        items = sorted(counts.items())
        shown = []
        for (known, p), n in items[:5]:
            note = ""
            if known and fmt is not None:
                try:
                    PartitionFormat.of(fmt).parse(p, plan.request.target.grain.value, plan.request.time_zone)
                except PartitionError:
                    note = f", not a {fmt} value"
            shown.append(f"{keys.key(p) if known else 'NULL'} ({n} row{'' if n == 1 else 's'}{note})")
        more = f" and {len(items) - 5} more" if len(items) > 5 else ""
        return ", ".join(shown) + more

    span = f"batch {batch.index} [{batch.keys[0]} .. {batch.keys[-1]}] of {plan.target_table}"
    parts = []
    outside_range = [r for r in stray if not r["in_range"]]
    outside_where = [r for r in stray if r["in_range"] and not r["in_where"]]
    if outside_range:
        parts.append(f"rows outside {span}: partition {listed(outside_range)}")
    if outside_where:
        parts.append(f"rows outside target.where ({plan.where.text}) in {span}: partition {listed(outside_where)}")
    return f"source {plan.request.source.sql} produced {'; and '.join(parts)}; nothing written"
