"""Reading table state from Delta: version, schema, partition columns and per-partition cost from the log.

Per-partition files, bytes and rows come from the ``add`` actions of the table's current snapshot (their
``size`` and the ``numRecords`` of their ``stats``), read through Delta's ``DeltaLog``: no data file is
scanned. Nothing here writes.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta, timezone

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.kernel_log import kernel_add_files
from backfill_lib.adapters.log_reader import log_reader, snapshot_reader
from backfill_lib.core.errors import IntakeError
from backfill_lib.core.file_ranges import FileRange, file_set_fingerprint
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.table_names import table_path
from backfill_lib.core.table_state import (
    Column,
    Constraint,
    GeneratedColumn,
    IdentityColumn,
    PartitionStats,
    TableState,
    column_mapping_mode,
    constraints_of,
    WriteBlocker,
    generated_columns_of,
    identity_columns_of,
    identity_metadata_of,
    unsupported_feature_blockers,
    write_blockers_of,
)


def table_exists(spark: SparkSession, name: str) -> bool:
    """Whether table ``name`` exists: a catalog name in the catalog; a path-based name ``delta.`<path>``` when its
    path holds a Delta table (a Delta log), where ``spark.catalog.tableExists`` raises for a path without one.

    Raises
    ------
    IntakeError
        When a path-based table's path cannot be read (the file system's first message line).
    """
    path = table_path(name)
    if path is None:
        try:
            return spark.catalog.tableExists(name)
        except Exception as exc:  # Delta loads the table's log to answer, and refuses one it cannot read
            _refuse_unreadable(name, exc)
            raise
    try:
        return log_reader(spark).is_delta_path(name, path)
    except Exception as exc:  # the reader's IntakeError keeps Delta's refusal as its context
        _refuse_unreadable(name, exc)
        raise


#: How Delta 4.4 ends the message of ``DELTA_UNSUPPORTED_FEATURES_FOR_READ``: ``... unsupported by Delta Lake
#: "4.4.0": f1, f2.``
_UNSUPPORTED_READ = re.compile(r'DELTA_UNSUPPORTED_FEATURES_FOR_READ\].*unsupported by Delta Lake "([^"]*)": ([^\n]*)')


def _refuse_unreadable(name: str, exc: BaseException) -> None:
    """Raise :class:`IntakeError` naming table ``name`` and the reader features when ``exc`` is Delta's refusal to
    read a table that requires reader features it does not support; return otherwise."""
    found, seen = None, 0
    while exc is not None and found is None and seen < 8:  # the exception, then the one it was raised handling
        found = _UNSUPPORTED_READ.search(str(exc))
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    if found:
        features = [f.strip() for f in found.group(2).strip().rstrip(".").split(",") if f.strip()]
        blocker = unsupported_feature_blockers(features, (), f"Delta Lake {found.group(1)} of this session",
                                               reader=True)
        if blocker:
            raise IntakeError(blocker[0].message(f"table {name}", name)) from None


def missing_table_message(name: str) -> str:
    """What to say of a table :func:`table_exists` did not find: a catalog table does not exist; a path-based
    one has no Delta table at its path."""
    path = table_path(name)
    if path is None:
        return f"table {name} does not exist"
    return f"table {name} is not a Delta table: no Delta log at {path} (a path-based table names a Delta table's directory)"


def latest_snapshot(spark: SparkSession, name: str):
    """The latest snapshot of Delta table ``name`` (a JVM ``org.apache.spark.sql.delta.Snapshot``), after
    listing the log for new commits: its version and file list belong to one and the same version.

    Through ``DeltaLog.forTable`` with the parsed table identifier: one catalog lookup (3 metastore calls, about
    50 ms on a local session) where ``DeltaTable.forName`` makes 11 (about 115 ms), and no Spark job, where
    ``DeltaTable.history`` reads and sorts commit files in one (0.6-0.8 s warm).

    Raises
    ------
    AnalysisException
        When ``name`` does not exist or is not a Delta table (Delta's own error, from ``DeltaTable.forName``).

    Under Spark Connect, a :class:`~backfill_lib.adapters.connect_log.ConnectSnapshot` read over SQL instead.
    """
    return log_reader(spark).latest_snapshot(name)


def current_version(spark: SparkSession, name: str) -> int:
    """The latest committed version of Delta table ``name``."""
    return log_reader(spark).current_version(name)


def history_since(spark: SparkSession, name: str, version: int) -> list:
    """``DESCRIBE HISTORY`` entries of Delta table ``name`` from ``version`` (inclusive) on, newest first, as rows
    of ``version`` (int), ``userMetadata`` (str or None) and ``timestamp_us`` (commit time, UTC microseconds).

    Only the newest entries are read (``history(n)``), not a history of months; when commits landed between
    counting and reading and pushed ``version`` out of them, the whole history is read instead."""
    newest = current_version(spark, name) - version + 1
    if newest <= 0:
        return []
    return log_reader(spark).history_since(name, version, newest)


#: :func:`user_metadata_since` reads up to this many commits' log files in the driver; more go through
#: :func:`history_since` (one Spark job however many).
DRIVER_READ_COMMITS = 16


def user_metadata_since(spark: SparkSession, name: str, version: int) -> list[tuple[int, str | None]]:
    """``(version, userMetadata)`` of every commit of Delta table ``name`` from ``version`` (inclusive) on,
    newest first.

    A few commits are read in the driver from their own log files (Delta's ``DeltaLog.getChanges``, whose first
    action of a commit is its ``commitInfo``): about 60 ms, where ``DESCRIBE HISTORY`` runs a Spark job
    (0.35-0.5 s warm on a local session). Many commits, or a runtime without that API, take
    :func:`history_since`.
    """
    snapshot = latest_snapshot(spark, name)
    latest = int(snapshot.version())
    if latest < version:
        return []
    if latest - version < DRIVER_READ_COMMITS:
        found = log_reader(spark).user_metadata(snapshot, version, latest)  # None under Spark Connect
        if found is not None:
            return found
    return [(int(r["version"]), r["userMetadata"]) for r in history_since(spark, name, version)]


def _commit_user_metadata(spark: SparkSession, snapshot, start: int, end: int) -> list[tuple[int, str | None]] | None:
    """``userMetadata`` of commits ``start`` to ``end`` (inclusive), newest first; ``None`` when a commit's file
    is gone (log cleanup) or does not open with its ``commitInfo``."""
    return log_reader(spark).commit_user_metadata(snapshot, start, end)


def commit_actions(spark: SparkSession, snapshot, version: int) -> list[dict] | None:
    """The actions of commit ``version`` of ``snapshot``'s table, each as the one-key dict its log line holds
    (``{"add": {...}}``, ``{"remove": {...}}``, ``{"commitInfo": {...}}``, ...; Delta protocol, "Actions").

    Read in the driver from the commit's own log file (Delta's ``DeltaLog.getChanges``, each action's ``json``):
    about 0.1 ms per action, no Spark job. ``None`` when the commit's file is gone (log cleanup) or Delta's
    internal API changed shape. Under Spark Connect, the commit's log file read as text through Spark.
    """
    return log_reader(spark).commit_actions(snapshot, version)


def partition_value_key(snapshot, column: str) -> str:
    """The key of ``column`` in the ``partitionValues`` of ``snapshot``'s ``add`` and ``remove`` actions: its
    physical name when the table uses column mapping (``delta.columnMapping.physicalName`` in the column's
    metadata; Delta protocol, "Column Mapping"), else its name."""
    return snapshot_reader(snapshot).partition_value_key(snapshot, column)


def add_files(spark: SparkSession, snapshot) -> DataFrame:
    """The ``add`` actions of ``snapshot`` (from :func:`latest_snapshot`): ``path``, ``partitionValues``, ``size``,
    ``stats``, ``deletionVector``; from Delta's own log replay (checkpoints included), no data file read: Delta
    Kernel's in the driver for a table of a few thousand files (:func:`~.kernel_log.kernel_add_files`), else the
    Spark snapshot's (a Spark job). Under Spark Connect, from
    the version's ``_metadata`` column (:meth:`ConnectSnapshot.add_files`: a scan; ``stats`` holds
    ``numRecords`` only)."""
    return log_reader(spark).add_files(snapshot)


def read_table_state(spark: SparkSession, name: str, with_partitions: bool = True, *,
                     partition_column: str | PartitionKeys | None = None, where: str | None = None,
                     bounds: tuple | None = None) -> TableState:
    """Read ``name``'s version, schema, partition columns, whether its Change Data Feed is on, constraints, column mapping mode and (optionally)
    per-partition stats.

    The stats are keyed by the values of ``partition_column`` (default: the first partition column; none when
    it is not a partition column), summed over the other partition columns, and count only the files whose
    partition values satisfy ``where`` (a checked ``target.where``, :func:`partition_stats`). When
    ``partition_column`` is a ``DATE`` or ``TIMESTAMP`` data column instead, ``files`` holds the data files whose
    statistics overlap ``bounds`` (the range's half-open ``(start, end)``: dates, or UTC datetimes for hours;
    ``None``: every file), from :func:`data_column_files`. ``partition_column`` may be the :class:`PartitionKeys`
    of integer date-part partition columns; their stats are keyed as :func:`partition_stats` keys them.

    Raises
    ------
    IntakeError
        When the table does not exist or is not a Delta table.
    """
    if not table_exists(spark, name):
        raise IntakeError(missing_table_message(name))
    snapshot, detail = _snapshot_detail(spark, name)
    if detail is None:
        detail = _described_detail(spark, name)
        snapshot = latest_snapshot(spark, name)
    schema = spark.table(name).schema
    columns = tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields)
    partition_columns = tuple(detail["partitionColumns"])
    properties = detail["properties"] or {}
    change_data_feed = str(properties.get("delta.enableChangeDataFeed", "")).strip().lower() == "true"
    version = int(snapshot.version())  # the version and its partitions' files, read from one snapshot
    partitions: dict[str, PartitionStats] = {}
    keys = partition_column if isinstance(partition_column, PartitionKeys) and partition_column.parts else None
    if isinstance(partition_column, PartitionKeys) and keys is None:
        partition_column = partition_column.column
    column = None if keys else partition_column or (partition_columns[0] if partition_columns else None)
    files = None
    if with_partitions and keys is not None:
        if set(keys.parts) <= set(partition_columns):  # else intake names the part that is no partition column
            partitions = partition_stats(spark, name, keys, snapshot, where=where)
    elif with_partitions and column in partition_columns:
        partitions = partition_stats(spark, name, column, snapshot, where=where)
    elif with_partitions and column is not None:
        kind = next((c.type for c in columns if c.name == column), None)
        if kind in ("date", "timestamp"):
            files = data_column_files(spark, snapshot, column, kind, bounds, where=where)
    clustering = tuple(detail.get("clusteringColumns") or ())  # Delta 3.2+ describes liquid clustering
    return TableState(name, detail["location"], version, columns, partition_columns, partitions,
                      change_data_feed=change_data_feed, constraints=constraints_of(properties, columns),
                      column_mapping=column_mapping_mode(properties), clustering_columns=clustering,
                      files=files, generated=snapshot_generated_columns(snapshot),
                      write_blockers=live_write_blockers(spark, snapshot, properties),
                      identity=snapshot_identity_columns(snapshot))


def _snapshot_detail(spark: SparkSession, name: str) -> tuple:
    """``(snapshot, detail)``: the latest snapshot of ``name`` and what ``DESCRIBE DETAIL`` says of it that a plan
    reads (``partitionColumns``, ``properties``, ``location``, ``clusteringColumns``), from the
    snapshot's protocol and metadata alone; ``(None, None)`` where only ``DESCRIBE DETAIL`` can say it.

    ``DESCRIBE DETAIL`` also counts the table's files and bytes, for which Delta replays the whole log in a Spark
    job (the largest part of a small dry run, paid again by each new session); the plan counts files itself,
    per partition (:func:`partition_stats`). ``(None, None)`` under Spark Connect (no snapshot object), for a name
    that is no Delta table or a view (``DESCRIBE DETAIL`` then says which), and for a table with liquid clustering
    (its columns live in domain metadata, which Delta reads with the whole file list)."""
    return log_reader(spark).snapshot_detail(name)


def _described_detail(spark: SparkSession, name: str) -> dict:
    """``DESCRIBE DETAIL`` of Delta table ``name`` as a dict.

    Raises
    ------
    IntakeError
        When ``name`` is a view or not a Delta table."""
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()
    except AnalysisException as exc:  # a view (EXPECT_TABLE_NOT_VIEW), or a table Delta cannot describe
        kind = "a view" if _is_view(spark, name) else "not a Delta table"
        first = next((line for line in str(exc).splitlines() if line.strip()), "").strip()
        raise IntakeError(f"table {name} is {kind}; a backfill writes Delta tables only ({first})") from None
    if detail["format"] != "delta":
        raise IntakeError(f"table {name} is not a Delta table (format {detail['format']})")
    return detail


def _stat_value(text: str | None, kind: str) -> date | datetime | None:
    """A ``minValues``/``maxValues`` entry as Python: a date, or a UTC datetime (Delta writes ISO 8601 text with
    an offset, milliseconds at most); ``None`` when absent or unreadable (then the file counts as unknown)."""
    if text is None:
        return None
    try:
        if kind == "date":
            return date.fromisoformat(text[:10])
        value = datetime.fromisoformat(text.replace(" ", "T"))
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    except ValueError:
        return None


def data_column_files(spark: SparkSession, snapshot, column: str, kind: str, bounds: tuple | None = None, *,
                      where: str | None = None) -> tuple[FileRange, ...]:
    """The data files of ``snapshot`` whose ``minValues``/``maxValues`` of data column ``column`` (of Spark type
    ``kind``: ``date`` or ``timestamp``) overlap ``bounds`` (half-open; dates, or aware datetimes read as instants;
    ``None``: every file), and every file without statistics for it, from the Delta log (no data read).

    ``where`` (SQL on partition columns) keeps only the files whose partition values satisfy it. Rows are
    ``numRecords`` less the rows a deletion vector marks deleted."""
    from pyspark.sql.types import StringType, StructField, StructType

    files = add_files(spark, snapshot)
    physical = partition_value_key(snapshot, column)  # statistics are keyed by physical name, like partitions
    bound = StructType([StructField(physical, StringType())])
    stats = F.from_json("stats", StructType([StructField("numRecords", StringType()), StructField("minValues", bound),
                                             StructField("maxValues", bound), StructField("nullCount", bound)]))
    deleted = (F.coalesce(F.col("deletionVector.cardinality"), F.lit(0)) if "deletionVector" in files.columns
               else F.lit(0))
    selected = files.select(
        "path", "size", stats.alias("__bf_s"), deleted.alias("__bf_deleted"),
        *(_typed_partition_values(snapshot, F.col("partitionValues")) if where is not None else ()))
    if where is not None:
        selected = selected.where(F.coalesce(F.expr(where), F.lit(False)))
    rows = selected.select(
        "path", "size", (F.col("__bf_s.numRecords").cast("long") - F.col("__bf_deleted")).alias("n"),
        F.col("__bf_s.minValues").getField(physical).alias("low"),
        F.col("__bf_s.maxValues").getField(physical).alias("high"),
        F.col("__bf_s.nullCount").getField(physical).cast("long").alias("nulls")).collect()
    found = []
    for r in rows:
        low, high = _stat_value(r["low"], kind), _stat_value(r["high"], kind)
        if low is None or high is None:
            low = high = None
        elif bounds is not None:
            start, end = bounds
            if kind == "timestamp" and not isinstance(start, datetime):  # days of a timestamp column
                start, end = (datetime.combine(d, datetime.min.time(), tzinfo=timezone.utc) for d in (start, end))
                start, end = start - timedelta(days=1), end + timedelta(days=1)  # any zone's midnight lies within a day of UTC's
            reach = FileRange("", 0, None, low, high).reach(kind == "timestamp")  # exclusive
            if reach <= start or low >= end:
                continue
        nulls = None if r["nulls"] is None else int(r["nulls"])  # a file of NULLs only has no min/max
        found.append(FileRange(r["path"], int(r["size"]), None if r["n"] is None else int(r["n"]), low, high, nulls))
    return tuple(found)


def snapshot_generated_columns(snapshot) -> tuple[GeneratedColumn, ...]:
    """The generated columns of ``snapshot``'s table (:func:`generated_columns_of`), from the Delta log's
    schemaString: the catalog's schema (``spark.table(name).schema``) drops the ``delta.generationExpression``
    field metadata (Delta 4.4)."""
    from pyspark.sql.types import StructType

    schema_string = snapshot_reader(snapshot).schema_string(snapshot)
    fields = json.loads(schema_string)["fields"]
    schema = StructType.fromJson({"type": "struct", "fields": fields})
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    return generated_columns_of((f["name"], types[f["name"]], f.get("metadata")) for f in fields)


def snapshot_identity_columns(snapshot) -> tuple[IdentityColumn, ...]:
    """The IDENTITY columns of ``snapshot``'s table (:func:`identity_columns_of`), from the Delta log's
    schemaString: the catalog's schema drops the ``delta.identity.*`` field metadata, as it does generation
    expressions."""
    from pyspark.sql.types import StructType

    schema_string = snapshot_reader(snapshot).schema_string(snapshot)
    fields = json.loads(schema_string)["fields"]
    types = {f.name: f.dataType.simpleString() for f in StructType.fromJson({"type": "struct", "fields": fields}).fields}
    return identity_columns_of((f["name"], types[f["name"]], f.get("metadata")) for f in fields)


def snapshot_identity_metadata(snapshot) -> dict[str, dict]:
    """``{column: {delta.identity.* key: value}}`` of ``snapshot``'s IDENTITY columns
    (:func:`~backfill_lib.core.table_state.identity_metadata_of`), from the Delta log's schemaString; ``{}`` under
    Spark Connect, whose schema carries no field metadata of Delta's."""
    schema_string = snapshot_reader(snapshot).schema_string(snapshot)
    return identity_metadata_of((f["name"], f.get("metadata")) for f in json.loads(schema_string)["fields"])


def live_write_blockers(spark: SparkSession, snapshot, properties: dict[str, str]) -> tuple[WriteBlocker, ...]:
    """What Delta table ``snapshot`` (with table ``properties``) has under which this session's Delta refuses
    the commit publishing a backfill: writer features it does not support (from the snapshot's protocol and
    Delta's own list of the features it supports), UniForm formats whose converter is not on the classpath, and
    ``delta.appendOnly`` (:func:`~backfill_lib.core.table_state.write_blockers_of`). Under Spark Connect (no
    JVM here to ask) only the properties: Delta names the rest when it refuses the commit."""
    found = log_reader(spark).feature_write_blockers(snapshot, properties)
    return (*found, *write_blockers_of(properties))


def live_table_blockers(spark: SparkSession, name: str) -> tuple[WriteBlocker, ...]:
    """:func:`live_write_blockers` of Delta table ``name`` as of its latest commit (its properties only when
    Delta's internal API changed shape)."""
    try:
        snapshot = latest_snapshot(spark, name)
        properties, _ = _snapshot_metadata(snapshot)
    except Exception:
        return write_blockers_of(live_metadata(spark, name)[0])
    return live_write_blockers(spark, snapshot, properties)


def live_generated_columns(spark: SparkSession, name: str) -> tuple[GeneratedColumn, ...]:
    """The generated columns of Delta table ``name`` as of its latest commit (what its next write enforces)."""
    return snapshot_generated_columns(latest_snapshot(spark, name))


def _typed_partition_values(snapshot, values) -> list:
    """Every partition column of ``snapshot``'s table as a column of its type, named as the table names it, from
    the ``add`` actions' ``partitionValues`` (strings, keyed by physical name under column mapping)."""
    return snapshot_reader(snapshot).typed_partition_values(snapshot, values)


def _is_view(spark: SparkSession, name: str) -> bool:
    try:
        return spark.catalog.getTable(name).tableType in ("VIEW", "TEMPORARY")
    except Exception:
        return False


def _snapshot_metadata(snapshot) -> tuple[dict[str, str], tuple[Column, ...]]:
    """The table properties and top-level columns of ``snapshot``'s metadata (its Delta log; no catalog call)."""
    return snapshot_reader(snapshot).snapshot_metadata(snapshot)


def live_metadata(spark: SparkSession, name: str) -> tuple[dict[str, str], tuple[Column, ...]]:
    """Delta table ``name``'s properties and columns as of its latest commit: from the snapshot's metadata (one
    catalog lookup, :func:`latest_snapshot`), else (Delta's internal API changed shape) from ``DESCRIBE DETAIL``.

    Raises
    ------
    IntakeError
        When the table does not exist or is not a Delta table.
    """
    try:
        return _snapshot_metadata(latest_snapshot(spark, name))
    except Exception:
        state = read_table_state(spark, name, with_partitions=False)
        properties = spark.sql(f"DESCRIBE DETAIL {name}").first()["properties"] or {}
        return properties, state.columns


def catalog_folder(spark: SparkSession, name: str) -> str | None:
    """The folder the session catalog gives for table ``name`` when it is on this machine's file system (a
    ``file:`` URI): one metastore call, no Delta log read. ``None`` for any other location, under Spark Connect,
    for a name the session catalog does not parse, or when the lookup fails (a missing table)."""
    from urllib.parse import unquote, urlparse

    try:
        jspark = spark._jsparkSession
        ident = jspark.sessionState().sqlParser().parseTableIdentifier(name)
        uri = urlparse(str(jspark.sessionState().catalog().getTableMetadata(ident).location()))
    except Exception:
        return None
    return unquote(uri.path) if uri.scheme == "file" else None


def live_constraints(spark: SparkSession, name: str) -> tuple[Constraint, ...]:
    """The CHECK and NOT NULL constraints Delta table ``name`` enforces as of its latest commit
    (:func:`constraints_of` of :func:`live_metadata`)."""
    return constraints_of(*live_metadata(spark, name))


def partition_stats(spark: SparkSession, name: str, partition_column: str | PartitionKeys, snapshot=None,
                    where: str | None = None) -> dict[str, PartitionStats]:
    """Files, bytes, rows and a file-set fingerprint per value of ``partition_column`` of Delta table ``name``,
    from the Delta log of ``snapshot`` (default: the latest, from :func:`latest_snapshot`).

    ``partition_column`` may be the :class:`PartitionKeys` of integer date-part columns
    (:mod:`backfill_lib.core.date_parts`): the stats are then keyed by the plan keys their values form.

    A file's rows are its ``numRecords`` less the rows its deletion vector marks deleted (the vector's
    ``cardinality``; Delta protocol, "Deletion Vectors"), so they count the rows a query reads. With several
    partition columns, a value's stats sum its files over the others; ``where`` (SQL on partition columns, as
    :class:`~backfill_lib.core.partitions.RowFilter` renders it) keeps only the files whose partition values,
    cast to their columns' types, satisfy it."""
    snapshot = snapshot if snapshot is not None else latest_snapshot(spark, name)
    parts = partition_column if isinstance(partition_column, PartitionKeys) and partition_column.parts else None
    if isinstance(partition_column, PartitionKeys) and parts is None:
        partition_column = partition_column.column
    reader = log_reader(spark)
    lines = reader.scan_lines(snapshot)  # None under Spark Connect
    if lines is not None and parts is None and where is None:  # the raw values are the keys: no typing to do
        return _stats_by_value(lines, partition_value_key(snapshot, partition_column))
    if lines is not None:
        files = kernel_add_files(spark, snapshot, lines)
    else:  # Kernel already declined: straight to Delta's own replay (or the Connect snapshot's files)
        files = reader.replayed_files(snapshot)
    deleted = (F.coalesce(F.col("deletionVector.cardinality"), F.lit(0)) if "deletionVector" in files.columns
               else F.lit(0))
    values = F.col("partitionValues")
    typed = parts is not None or where is not None
    # Names no partition column has: ``where`` reads the partition columns beside them by their own names.
    plain = () if parts is not None else (values.getItem(partition_value_key(snapshot, partition_column)),)
    selected = files.select(
        *(value.alias("__bf_p") for value in plain),
        F.col("path").alias("__bf_path"),
        F.col("size").alias("__bf_size"),
        (F.get_json_object("stats", "$.numRecords").cast("long") - deleted).alias("__bf_n"),
        *(_typed_partition_values(snapshot, values) if typed else ()),
    )
    if where is not None:
        selected = selected.where(F.coalesce(F.expr(where), F.lit(False)))
    # the integer parts' values form the key, as the plan renders it, from the typed values selected above
    key = parts.expr() if parts is not None else F.col("__bf_p")
    rows = (
        selected
        .groupBy(key.alias("p"))
        .agg(
            F.count("*").alias("files"),
            F.sum("__bf_size").alias("bytes"),
            # null when any file lacks stats: then the row count is unknown, not smaller.
            F.when(F.count("__bf_n") == F.count("*"), F.sum("__bf_n")).alias("rows"),
            F.collect_list("__bf_path").alias("paths"),
        )
        .collect()
    )
    return {
        (parts.key(r["p"]) if parts is not None else r["p"]): PartitionStats(
            int(r["files"]),
            int(r["bytes"]),
            None if r["rows"] is None else int(r["rows"]),
            file_set_fingerprint(r["paths"]),
        )
        for r in rows
    }


def _stats_by_value(lines: list[str], key: str) -> dict[str, PartitionStats]:
    """:func:`partition_stats` of Kernel's scan files (:func:`~.kernel_log.kernel_scan_lines`) keyed by the raw
    partition value under ``key`` (its physical name), summed in the driver: the Spark query it replaces parsed
    the same lines in a Spark job, a large part of a small dry run."""
    found: dict[str | None, list] = {}
    for line in lines:
        add = json.loads(line)["add"]
        files = found.setdefault((add.get("partitionValues") or {}).get(key), [0, 0, 0, []])
        files[0] += 1
        files[1] += int(add["size"])
        rows = _stats_rows(add.get("stats"))
        if rows is None or files[2] is None:
            files[2] = None
        else:
            files[2] += rows - int((add.get("deletionVector") or {}).get("cardinality") or 0)
        files[3].append(add["path"])
    return {value: PartitionStats(n, size, rows, file_set_fingerprint(paths))
            for value, (n, size, rows, paths) in found.items()}


def _stats_rows(stats: str | None) -> int | None:
    """``numRecords`` of an ``add`` action's ``stats`` JSON text; ``None`` when there are none (the rows are then
    unknown, not fewer)."""
    try:
        rows = json.loads(stats).get("numRecords") if stats else None
        return None if rows is None else int(rows)
    except (ValueError, TypeError, AttributeError):
        return None
