"""The session's table-state reader: classic (a driver JVM, Delta's ``DeltaLog`` through py4j) or Spark Connect
(SQL and the DataFrame API only), chosen once per session.

:func:`log_reader` makes the reader the first time a session asks and hands the same object back after, as
Delta's own Python API chooses between its classic and Connect ``DeltaTable`` once, when the table object is made.
Both classes have the same methods (:class:`LogReader`); callers (:mod:`backfill_lib.adapters.delta_log` and the
stages) call them without asking which session they hold. :func:`snapshot_reader` is the reader of a snapshot one
of them made, for the functions that get a snapshot and no session.
"""

from __future__ import annotations

import json
import threading
import weakref
from abc import ABC, abstractmethod
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.connect_log import (
    ConnectSnapshot,
    connect_commit_actions,
    connect_missing_files,
    connect_snapshot,
    is_connect,
)
from backfill_lib.adapters.kernel_log import kernel_add_files, kernel_scan_lines
from backfill_lib.core.errors import IntakeError, first_line
from backfill_lib.core.table_state import Column, WriteBlocker, uniform_blockers, unsupported_feature_blockers


class LogReader(ABC):
    """What the product reads of a Delta table's state, for one session. ``snapshot`` arguments are snapshots
    this reader's :meth:`latest_snapshot` made.

    Capabilities of the session the stages branch on, named by what they mean: ``pins_session`` (a session can
    pin a source table's version for the run's reads), ``named_parameters`` (SQL named parameters reach Delta's
    SQL parser intact), ``delta_table_api`` (Delta's Python ``DeltaTable`` works: it needs a driver JVM)."""

    pins_session: bool
    named_parameters: bool
    delta_table_api: bool

    def __init__(self, spark: SparkSession):
        self.spark = spark

    @abstractmethod
    def is_delta_path(self, name: str, path: str) -> bool:
        """Whether path-based table ``name`` (at ``path``) holds a Delta table."""

    @abstractmethod
    def latest_snapshot(self, name: str):
        """The latest snapshot of Delta table ``name`` (:func:`~.delta_log.latest_snapshot`)."""

    @abstractmethod
    def current_version(self, name: str) -> int:
        """The latest committed version of Delta table ``name``."""

    @abstractmethod
    def history_since(self, name: str, version: int, newest: int) -> list:
        """``DESCRIBE HISTORY`` rows (``version``, ``userMetadata``, ``timestamp_us``) from ``version`` on, newest
        first; ``newest``: how many entries reach back to ``version`` (> 0)."""

    @abstractmethod
    def history(self, name: str) -> DataFrame:
        """The whole history of Delta table ``name`` as ``DESCRIBE HISTORY`` has it."""

    @abstractmethod
    def user_metadata(self, snapshot, start: int, end: int) -> list[tuple[int, str | None]] | None:
        """``(version, userMetadata)`` of commits ``start`` to ``end`` read in the driver, newest first; ``None``
        when they cannot be read so (then ``DESCRIBE HISTORY``)."""

    @abstractmethod
    def commit_actions(self, snapshot, version: int) -> list[dict] | None:
        """The actions of commit ``version`` (:func:`~.delta_log.commit_actions`)."""

    @abstractmethod
    def partition_value_key(self, snapshot, column: str) -> str:
        """The key of ``column`` in the ``partitionValues`` of ``snapshot``'s actions."""

    @abstractmethod
    def add_files(self, snapshot) -> DataFrame:
        """The ``add`` actions of ``snapshot`` (:func:`~.delta_log.add_files`)."""

    @abstractmethod
    def scan_lines(self, snapshot) -> list[str] | None:
        """Delta Kernel's scan files of ``snapshot`` in the driver; ``None`` when not read so."""

    @abstractmethod
    def replayed_files(self, snapshot) -> DataFrame:
        """The ``add`` actions of ``snapshot`` from Delta's own replay (no Kernel)."""

    @abstractmethod
    def snapshot_detail(self, name: str) -> tuple:
        """``(snapshot, detail)`` of :func:`~.delta_log._snapshot_detail`; ``(None, None)`` when only
        ``DESCRIBE DETAIL`` can say it."""

    @abstractmethod
    def schema_string(self, snapshot) -> str:
        """``snapshot``'s schema as JSON text (the Delta log's schemaString)."""

    @abstractmethod
    def typed_partition_values(self, snapshot, values) -> list:
        """Every partition column as a column of its type from the ``partitionValues`` column ``values``."""

    @abstractmethod
    def snapshot_metadata(self, snapshot) -> tuple[dict[str, str], tuple[Column, ...]]:
        """The table properties and top-level columns of ``snapshot``'s metadata."""

    @abstractmethod
    def properties(self, snapshot) -> dict:
        """The table properties of ``snapshot``'s metadata."""

    @abstractmethod
    def feature_write_blockers(self, snapshot, properties: dict[str, str]) -> list[WriteBlocker]:
        """What of ``snapshot``'s protocol and table ``properties`` this session's Delta refuses to commit to:
        writer features it does not support and UniForm formats whose converter is not on the classpath
        (:func:`~.delta_log.live_write_blockers` adds the properties' own blockers)."""

    @abstractmethod
    def holds_version(self, table: str, now, version: int) -> bool:
        """Whether snapshot ``now`` of ``table`` (not at ``version``) holds exactly ``version``'s data and schema
        (:func:`~backfill_lib.publish.commit.holds_version`)."""

    @abstractmethod
    def missing_files(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` (absolute file URLs) that storage no longer holds."""

    @abstractmethod
    def files_bytes(self, files: list[str]) -> int:
        """The total size of ``files`` (absolute file URLs) from storage's metadata (no content read)."""


class ClassicLogReader(LogReader):
    """The Delta log read through a driver JVM: Delta's ``DeltaLog`` and ``Snapshot`` by py4j, Delta Kernel in the
    driver, Hadoop's ``FileSystem``."""

    pins_session = True
    named_parameters = True
    delta_table_api = True

    def is_delta_path(self, name: str, path: str) -> bool:
        from delta.tables import DeltaTable

        try:
            return bool(DeltaTable.isDeltaTable(self.spark, path))
        except Exception as exc:  # no credentials for the bucket, an unknown scheme
            raise IntakeError(f"table {name}: path {path} cannot be read: {first_line(exc)}") from None

    def latest_snapshot(self, name: str):
        from delta.tables import DeltaTable

        spark = self.spark
        jvm = spark.sparkContext._jvm
        jspark = spark._jsparkSession
        try:
            ident = jspark.sessionState().sqlParser().parseTableIdentifier(name)
            delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(jspark, ident)
        except Exception:  # another catalog's name, a runtime without this overload, a missing table: the public API
            delta_log = DeltaTable.forName(spark, name)._jdt.deltaLog()
        snapshot = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
        if snapshot.version() < 0:  # no Delta log where the catalog points (a Parquet table): the public API's error
            DeltaTable.forName(spark, name)
        return snapshot

    def current_version(self, name: str) -> int:
        return int(self.latest_snapshot(name).version())

    def history_since(self, name: str, version: int, newest: int) -> list:
        from delta.tables import DeltaTable

        table = DeltaTable.forName(self.spark, name)
        columns = ["version", "userMetadata", F.unix_micros("timestamp").alias("timestamp_us")]
        rows = table.history(newest).where(F.col("version") >= version).select(*columns).collect()
        if not rows or min(int(r["version"]) for r in rows) > version:
            rows = table.history().where(F.col("version") >= version).select(*columns).collect()
        return sorted(rows, key=lambda r: -int(r["version"]))

    def history(self, name: str) -> DataFrame:
        from delta.tables import DeltaTable

        return DeltaTable.forName(self.spark, name).history()

    def user_metadata(self, snapshot, start: int, end: int) -> list[tuple[int, str | None]] | None:
        try:
            return self.commit_user_metadata(snapshot, start, end)
        except Exception:  # Delta's internal API changed shape: the public one
            return None

    def commit_user_metadata(self, snapshot, start: int, end: int) -> list[tuple[int, str | None]] | None:
        """``userMetadata`` of commits ``start`` to ``end`` (inclusive), newest first, from ``DeltaLog.getChanges``
        (a commit's first action is its ``commitInfo``); ``None`` when a commit's file is gone (log cleanup) or does
        not open with its ``commitInfo``. Raises when Delta's internal API changed shape."""
        jvm = self.spark.sparkContext._jvm
        changes = snapshot.deltaLog().getChanges(start, end, jvm.scala.Option.empty(), False)
        found: list[tuple[int, str | None]] = []
        while changes.hasNext():
            commit = changes.next()
            info = commit._2().apply(0)
            if info.getClass().getSimpleName() != "CommitInfo":
                return None
            meta = info.userMetadata()
            found.append((int(commit._1()), meta.get() if meta.isDefined() else None))
        if [v for v, _ in found] != list(range(start, end + 1)):
            return None
        return found[::-1]

    def commit_actions(self, snapshot, version: int) -> list[dict] | None:
        try:
            jvm = self.spark.sparkContext._jvm
            changes = snapshot.deltaLog().getChanges(version, version, jvm.scala.Option.empty(), False)
            if not changes.hasNext():
                return None
            commit = changes.next()
            if int(commit._1()) != version:
                return None
            actions = commit._2().iterator()
            lines = []
            while actions.hasNext():
                lines.append(actions.next().json())
        except Exception:
            return None
        return [json.loads(line) for line in lines]

    def partition_value_key(self, snapshot, column: str) -> str:
        physical = "delta.columnMapping.physicalName"
        try:
            for f in snapshot.metadata().schema().fields():
                if f.name() == column:
                    return f.metadata().getString(physical) if f.metadata().contains(physical) else column
        except Exception:  # Delta's internal API changed shape: the name, as before column mapping
            pass
        return column

    def add_files(self, snapshot) -> DataFrame:
        files = kernel_add_files(self.spark, snapshot)  # a small table's log, replayed in the driver without a Spark job
        return files if files is not None else self.replayed_files(snapshot)

    def scan_lines(self, snapshot) -> list[str] | None:
        return kernel_scan_lines(self.spark, snapshot)

    def replayed_files(self, snapshot) -> DataFrame:
        return DataFrame(snapshot.allFiles().toDF(), self.spark)

    def snapshot_detail(self, name: str) -> tuple:
        try:
            snapshot = self.latest_snapshot(name)
            if snapshot.version() < 0 or snapshot.protocol().writerFeatureNames().contains("clustering"):
                return None, None
            properties, _ = self.snapshot_metadata(snapshot)
            partition_columns = self.partition_columns(snapshot)
            location = str(snapshot.deltaLog().dataPath().toString())
        except Exception:  # a view, no such table, Delta's internal API changed shape: DESCRIBE DETAIL says
            return None, None
        detail = {"partitionColumns": partition_columns, "properties": properties, "location": location,
                  "clusteringColumns": ()}
        return snapshot, detail

    def schema_string(self, snapshot) -> str:
        return snapshot.metadata().schemaString()

    def typed_partition_values(self, snapshot, values) -> list:
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(snapshot.metadata().schemaString()))
        types = {f.name: f.dataType for f in schema.fields}
        return [values.getItem(self.partition_value_key(snapshot, c)).cast(types[c]).alias(c)
                for c in self.partition_columns(snapshot)]

    @staticmethod
    def partition_columns(snapshot) -> list[str]:
        """The partition columns of a JVM snapshot's metadata, by name, in the table's order."""
        columns, names = [], snapshot.metadata().partitionColumns().iterator()  # a Scala Seq
        while names.hasNext():
            columns.append(str(names.next()))
        return columns

    def snapshot_metadata(self, snapshot) -> tuple[dict[str, str], tuple[Column, ...]]:
        from pyspark.sql.types import StructType

        entries = snapshot.metadata().configuration().iterator()
        properties = {}
        while entries.hasNext():
            entry = entries.next()
            properties[entry._1()] = entry._2()
        schema = StructType.fromJson(json.loads(snapshot.metadata().schemaString()))
        return properties, tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields)

    def properties(self, snapshot) -> dict:
        configuration = snapshot.metadata().configuration()
        return dict(self.spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters.asJava(configuration))

    def feature_write_blockers(self, snapshot, properties: dict[str, str]) -> list[WriteBlocker]:
        if isinstance(snapshot, ConnectSnapshot):  # not a JVM snapshot: nothing to ask of its protocol
            return []
        jvm = self.spark.sparkContext._jvm
        found: list[WriteBlocker] = []
        try:
            features = snapshot.protocol().writerFeatureNames().toSeq()
            supported = jvm.org.apache.spark.sql.delta.TableFeature.allSupportedFeaturesMap().keySet().toSeq()
            names = [features.apply(i) for i in range(features.size())]
            known = [supported.apply(i) for i in range(supported.size())]
            found += unsupported_feature_blockers(names, known, _delta_release(jvm))
        except Exception:  # Delta's internal API changed shape: Delta names an unsupported feature at commit
            pass
        found += uniform_blockers(properties, lambda cls: _loadable(jvm, cls))
        return found

    def holds_version(self, table: str, now, version: int) -> bool:
        try:
            log = now.deltaLog()
            then = log.getSnapshotAt(version, getattr(log, "getSnapshotAt$default$2")(),
                                     getattr(log, "getSnapshotAt$default$3")(),
                                     getattr(log, "getSnapshotAt$default$4")())
            if then.metadata().schemaString() != now.metadata().schemaString():
                return False

            def files(snapshot):
                df = self.add_files(snapshot)
                dv = F.to_json("deletionVector") if "deletionVector" in df.columns else F.lit(None).cast("string")
                return df.select("path", dv.alias("dv"))

            a, b = files(now), files(then)
            return a.count() == b.count() and a.exceptAll(b).isEmpty()
        except Exception:
            return False

    def missing_files(self, paths: list[str]) -> list[str]:
        jvm = self.spark.sparkContext._jvm
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        missing = []
        for f in paths:
            path = jvm.org.apache.hadoop.fs.Path(f)
            if not path.getFileSystem(conf).exists(path):
                missing.append(f)
        return missing

    def files_bytes(self, files: list[str]) -> int:
        path_class = self.spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # resolved once: each name step is a py4j call
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        file_systems: dict[tuple[str, str], object] = {}
        total = 0
        for f in files:
            path = path_class(f)
            root = urlsplit(f)[:2]  # scheme and authority name the file system
            if root not in file_systems:
                file_systems[root] = path.getFileSystem(conf)
            total += file_systems[root].getFileStatus(path).getLen()
        return total


class ConnectLogReader(LogReader):
    """The Delta log read without a driver JVM (Spark Connect): SQL and the DataFrame API only
    (:mod:`backfill_lib.adapters.connect_log`); its snapshots are :class:`ConnectSnapshot`."""

    pins_session = False
    named_parameters = False  # the Connect server loses them under Delta's SQL parser
    delta_table_api = False  # Delta's MERGE and history as SQL instead

    def is_delta_path(self, name: str, path: str) -> bool:
        try:  # no JVM for DeltaTable.isDeltaTable: Delta's DESCRIBE DETAIL names the format
            return self.spark.sql(f"DESCRIBE DETAIL {name}").first()["format"] == "delta"
        except Exception:
            return False

    def latest_snapshot(self, name: str) -> ConnectSnapshot:
        return connect_snapshot(self.spark, name)

    def current_version(self, name: str) -> int:  # one statement, not a whole ConnectSnapshot
        return int(self.spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])

    def history_since(self, name: str, version: int, newest: int) -> list:
        # Delta's Python DeltaTable needs a JVM (or Delta's Connect plugin): its SQL
        columns = ["version", "userMetadata", F.unix_micros("timestamp").alias("timestamp_us")]
        rows = self.spark.sql(f"DESCRIBE HISTORY {name}").where(F.col("version") >= version).select(*columns).collect()
        return sorted(rows, key=lambda r: -int(r["version"]))

    def history(self, name: str) -> DataFrame:  # no DeltaTable without a JVM: Delta's SQL
        return self.spark.sql(f"DESCRIBE HISTORY {name}")

    def user_metadata(self, snapshot, start: int, end: int) -> None:  # no log objects: DESCRIBE HISTORY
        return None

    def commit_actions(self, snapshot: ConnectSnapshot, version: int) -> list[dict] | None:
        return connect_commit_actions(self.spark, snapshot, version)

    def partition_value_key(self, snapshot: ConnectSnapshot, column: str) -> str:
        return column  # its partition values are keyed by name

    def add_files(self, snapshot: ConnectSnapshot) -> DataFrame:
        return snapshot.add_files()

    def scan_lines(self, snapshot: ConnectSnapshot) -> None:
        return None

    def replayed_files(self, snapshot: ConnectSnapshot) -> DataFrame:
        return snapshot.add_files()

    def snapshot_detail(self, name: str) -> tuple:
        return None, None

    def schema_string(self, snapshot: ConnectSnapshot) -> str:
        return snapshot.schema_json

    def typed_partition_values(self, snapshot: ConnectSnapshot, values) -> list:
        from pyspark.sql.types import StructType

        types = {f.name: f.dataType for f in StructType.fromJson(json.loads(snapshot.schema_json)).fields}
        return [values.getItem(c).cast(types[c]).alias(c) for c in snapshot.partition_columns]

    def snapshot_metadata(self, snapshot: ConnectSnapshot) -> tuple[dict[str, str], tuple[Column, ...]]:
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(snapshot.schema_json))
        return dict(snapshot.properties), tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields)

    def properties(self, snapshot: ConnectSnapshot) -> dict:  # DESCRIBE DETAIL's properties, read with it
        return dict(snapshot.properties)

    def feature_write_blockers(self, snapshot, properties: dict[str, str]) -> list[WriteBlocker]:
        return []  # no JVM here to ask: Delta names an unsupported feature or converter when it refuses the commit

    def holds_version(self, table: str, now: ConnectSnapshot, version: int) -> bool:
        # no log objects: the version's schema and rows instead
        try:
            then = self.spark.read.option("versionAsOf", version).table(table)
            latest = now.read()
            return (then.schema == latest.schema and then.count() == latest.count()
                    and then.exceptAll(latest).isEmpty())
        except Exception:
            return False

    def missing_files(self, paths: list[str]) -> list[str]:  # no Hadoop FileSystem in the driver: Spark's file source
        return connect_missing_files(self.spark, paths)

    def files_bytes(self, files: list[str]) -> int:
        # no Hadoop FileSystem in the driver: the sizes from Spark's file source (no content read)
        size = self.spark.read.format("binaryFile").load(list(files)).agg(F.sum("length")).first()[0]
        return int(size or 0)


def _delta_release(jvm) -> str:
    """``Delta Lake 4.4.0 of this session``, or ``the Delta Lake of this session`` when its JVM does not say."""
    try:
        return f"Delta Lake {jvm.io.delta.package.VERSION()} of this session"
    except Exception:
        return "the Delta Lake of this session"


def _loadable(jvm, cls: str) -> bool:
    """Whether the session's JVM can load class ``cls`` (as Delta looks for a UniForm converter); ``True`` when
    it cannot be asked (Delta then decides)."""
    try:
        return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(cls))
    except Exception:
        return True


_READERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def log_reader(spark: SparkSession) -> LogReader:
    """The table-state reader of session ``spark``: made on the session's first call (:class:`ConnectLogReader`
    on a Spark Connect session, :class:`ClassicLogReader` otherwise), the same object on every later one."""
    with _LOCK:
        reader = _READERS.get(spark)
        if reader is None:
            reader = (ConnectLogReader if is_connect(spark) else ClassicLogReader)(spark)
            _READERS[spark] = reader
        return reader


def snapshot_reader(snapshot) -> LogReader:
    """The reader that made ``snapshot``: its session's (a :class:`ConnectSnapshot` names it); a JVM snapshot's
    methods need no session, so any classic reader reads it."""
    if isinstance(snapshot, ConnectSnapshot):
        return log_reader(snapshot.spark)
    return _SESSIONLESS_CLASSIC


#: the classic reader of snapshots handed over without their session: its snapshot-only methods
#: (:meth:`~ClassicLogReader.partition_value_key`, :meth:`~ClassicLogReader.schema_string`,
#: :meth:`~ClassicLogReader.snapshot_metadata`) touch no session
_SESSIONLESS_CLASSIC = ClassicLogReader(None)  # type: ignore[arg-type]
