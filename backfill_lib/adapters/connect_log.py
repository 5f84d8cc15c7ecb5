"""The Delta log read without a driver JVM (Spark Connect): SQL and the DataFrame API only.

Under Spark Connect (Databricks serverless, standard-access clusters, ``SparkSession.builder.remote``) there is
no ``spark._jvm`` to reach Delta's ``DeltaLog``; every read here goes through the server as SQL or a DataFrame:

- the version and its commit time: ``DESCRIBE HISTORY <t> LIMIT 1``;
- properties, partition columns and location: ``DESCRIBE DETAIL``;
- the data files of a version, their sizes, partition values and row counts: the ``_metadata`` column of the
  version read with ``versionAsOf`` (a scan of the version's rows: slower than the log, which the classic path
  keeps reading; deletion vectors are honoured because deleted rows are not read);
- one commit's actions: its own log file (``_delta_log/<version>.json``) read as text.

:class:`ConnectSnapshot` stands where the classic path holds a JVM ``Snapshot``;
:class:`~backfill_lib.adapters.log_reader.ConnectLogReader`, the reader a Connect session gets once, reads through
these functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partitions import quote_ident


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no driver JVM: ``_jvm``, ``sparkContext`` and ``_jdf`` raise)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@dataclass(frozen=True)
class ConnectSnapshot:
    """One version of a Delta table as read over Spark Connect (:func:`connect_snapshot`).

    ``timestamp_ms``: the commit's time (UTC milliseconds, ``DESCRIBE HISTORY``'s ``timestamp``); ``schema_json``:
    the version's schema as JSON (``StructType.json()``); ``partition_columns`` in the table's order.
    """

    spark: SparkSession = field(repr=False, compare=False)
    name: str
    version_number: int
    timestamp_ms: int
    location: str
    properties: dict
    partition_columns: tuple[str, ...]
    schema_json: str

    def version(self) -> int:
        return self.version_number

    def timestamp(self) -> int:
        return self.timestamp_ms

    def read(self) -> DataFrame:
        """The rows of this version (``versionAsOf``)."""
        return self.spark.read.option("versionAsOf", self.version_number).table(self.name)

    def add_files(self) -> DataFrame:
        """The data files of this version as :func:`~backfill_lib.adapters.delta_log.add_files` shapes them:
        ``path`` (relative to the table's location, as the log writes it; absolute when outside it),
        ``partitionValues`` (map of partition column name to its value as text, ``NULL`` for a null), ``size``
        (bytes), ``stats`` (JSON text with ``numRecords``: the rows read, deletion vectors applied). A file none
        of whose rows are live is not listed.

        Raises
        ------
        IntakeError
            When a partition column is a ``TIMESTAMP`` (its log text cannot be reproduced without the JVM).
        """
        from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

        types = {f.name: f.dataType for f in StructType.fromJson(json.loads(self.schema_json)).fields}
        timed = [c for c in self.partition_columns if isinstance(types.get(c), (TimestampType, TimestampNTZType))]
        if timed:  # the log's text of a timestamp partition value is not the value's text in a session zone
            raise IntakeError(f"table {self.name}: partition column {timed[0]} is a TIMESTAMP; under Spark Connect "
                              "its partition values cannot be read as the Delta log writes them (needs a driver "
                              "JVM); nothing written")
        prefix = self.location.rstrip("/") + "/"
        rows = self.read()
        # by metadataColumn, not the name: a table may keep a data column _metadata (its ingestion's), which hides
        # the file source's column of that name and would list the ingested files instead of the table's
        metadata = rows.metadataColumn("_metadata")
        path = metadata.getField("file_path")
        relative = F.when(path.startswith(prefix), F.substring(path, len(prefix) + 1, 2_147_483_647)) \
            .otherwise(path)
        # the grouping works on its own names: a partition column may be called path or size, or hold a back-quote
        names = [f"_bf_part_{i}" for i in range(len(self.partition_columns))]
        parts = [F.col(quote_ident(c)).cast("string").alias(n) for c, n in zip(self.partition_columns, names)]
        grouped = (rows.select(relative.alias("_bf_path"), metadata.getField("file_size").alias("_bf_size"), *parts)
                   .groupBy("_bf_path", "_bf_size", *names)
                   .agg(F.count(F.lit(1)).alias("_bf_rows")))
        values = (F.create_map(*[x for c, n in zip(self.partition_columns, names) for x in (F.lit(c), F.col(n))])
                  if self.partition_columns else F.create_map().cast("map<string,string>"))
        return grouped.select(F.col("_bf_path").alias("path"), values.alias("partitionValues"),
                              F.col("_bf_size").alias("size"),
                              F.to_json(F.struct(F.col("_bf_rows").alias("numRecords"))).alias("stats"))


def connect_snapshot(spark: SparkSession, name: str, version: int | None = None) -> ConnectSnapshot:
    """Delta table ``name`` at ``version`` (default: the latest) read over SQL: ``DESCRIBE HISTORY`` for the version
    and its time, ``DESCRIBE DETAIL`` for properties, partition columns and location, the version's schema.

    Raises
    ------
    AnalysisException
        When ``name`` does not exist or is not a Delta table (Delta's own error).
    """
    if version is None:
        row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").select(
            "version", F.unix_millis("timestamp").alias("ms")).first()
    else:
        row = (spark.sql(f"DESCRIBE HISTORY {name}").where(F.col("version") == version)
               .select("version", F.unix_millis("timestamp").alias("ms")).first())
        if row is None:
            raise ValueError(f"table {name} has no version {version} in its history")
    detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
    snapshot_version = int(row["version"])
    schema = spark.read.option("versionAsOf", snapshot_version).table(name).schema
    return ConnectSnapshot(spark, name, snapshot_version, int(row["ms"]), detail["location"],
                           dict(detail["properties"] or {}), tuple(detail["partitionColumns"] or ()), schema.json())


def connect_commit_actions(spark: SparkSession, snapshot: ConnectSnapshot, version: int) -> list[dict] | None:
    """The actions of commit ``version`` from its own log file (``_delta_log/%020d.json``) read as text through
    Spark; ``None`` when it cannot be read (log cleanup, a managed table whose log is not at its location)."""
    path = f"{snapshot.location.rstrip('/')}/_delta_log/{version:020d}.json"
    try:
        lines = [r["value"] for r in spark.read.text(path).collect()]
    except Exception:
        return None
    return [json.loads(line) for line in lines if line.strip()]


def connect_missing_files(spark: SparkSession, paths: list[str]) -> list[str]:
    """Those of ``paths`` (absolute file URLs) that storage no longer holds, looked up through Spark's file source
    (``binaryFile``, its content not read): where the classic path asks Hadoop's ``FileSystem`` in the driver."""
    if not paths:
        return []

    def present(batch: list[str]) -> set[str]:
        return {r["path"] for r in spark.read.format("binaryFile").load(list(batch)).select("path").collect()}

    try:
        found = present(paths)
    except Exception:  # one missing path fails the whole load: ask per file
        found = set()
        for p in paths:
            try:
                found |= present([p])
            except Exception:
                pass
    normal = {f.replace("file:///", "file:/") for f in found}
    return [p for p in paths if p not in found and p.replace("file:///", "file:/") not in normal]
