"""A Delta snapshot's ``add`` actions read with Delta Kernel in the driver, without a Spark job.

Delta's Spark snapshot builds its file list with a Spark job (a log replay that reads, shuffles and caches the
log), the largest part of a dry run. Delta Kernel (``io.delta.kernel``, Delta's own library for reading the log,
among delta-spark 4.4.0's jars) replays the same log in the driver several times faster. :func:`kernel_add_files` is
used for tables of at most :data:`MAX_FILES` files (their count known from the version's checksum file), where
the driver's replay is the cheaper one; for any other
table, and whenever Kernel is absent (a platform's own Delta without it) or refuses the table (a reader feature it
does not support, a catalog-managed table), it returns ``None`` and the caller reads Delta's Spark snapshot.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The largest file count read through Kernel, whose replay runs in one driver thread; a larger log is left to
#: Spark's replay job, which spreads over executors.
MAX_FILES = 10000

#: The scan files' schema: the ``add`` columns of Delta's ``snapshot.allFiles()`` that
#: :mod:`backfill_lib.adapters.delta_log` reads, with their types there (Delta protocol, "Add File").
SCAN_FILE_SCHEMA = ("add STRUCT<path: STRING, partitionValues: MAP<STRING, STRING>, size: BIGINT, stats: STRING, "
                    "deletionVector: STRUCT<storageType: STRING, pathOrInlineDv: STRING, offset: INT, "
                    "sizeInBytes: INT, cardinality: BIGINT, maxRowIndex: BIGINT>>")


def kernel_scan_lines(spark: SparkSession, snapshot) -> list[str] | None:
    """The scan files of ``snapshot`` (a JVM ``org.apache.spark.sql.delta.Snapshot``) read by Delta Kernel at the
    same version, one JSON text a file (``{"add": {...}}``, the fields of :data:`SCAN_FILE_SCHEMA` as the log
    holds them: ``path`` relative to the table's root and URL-encoded, ``partitionValues`` keyed by physical name
    under column mapping, ``stats`` the log's JSON text).

    ``None`` (nothing read, nothing raised) when the snapshot's file count is unknown (no checksum file for its
    version) or above :data:`MAX_FILES`, when a file comes without ``stats`` (a checkpoint written with
    ``delta.checkpoint.writeStatsAsJson`` false holds them as ``stats_parsed`` only, which Kernel does not turn
    back into ``stats`` as Delta's Spark snapshot does), when Kernel's classes are missing or Kernel cannot read
    the table, or when Kernel's file count differs from the checksum's.
    """
    try:
        # the version's checksum file (read with the snapshot); Snapshot.numOfFilesIfKnown replays the whole log
        checksum = snapshot.checksumOpt()
        if checksum.isEmpty() or int(checksum.get().numFiles()) > MAX_FILES:
            return None
        expected = int(checksum.get().numFiles())
        lines = scan_file_lines(spark, snapshot)
    except Exception as exc:  # Kernel missing or refusing the table: Delta's Spark snapshot reads it
        log.debug("Delta Kernel did not read the log of version %s: %s", snapshot.version(),
                  (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        return None
    if len(lines) != expected:
        log.debug("Delta Kernel found %d files where the checksum says %d", len(lines), expected)
        return None
    # the setting's value now says nothing of the checkpoint Kernel replayed from
    if any(json.loads(line)["add"].get("stats") is None for line in lines):
        log.debug("Delta Kernel gave a file without stats at version %s", snapshot.version())
        return None
    return lines


def kernel_add_files(spark: SparkSession, snapshot, lines: list[str] | None = None) -> DataFrame | None:
    """The ``add`` actions of ``snapshot`` as a DataFrame of the ``add`` fields of :data:`SCAN_FILE_SCHEMA`, from
    :func:`kernel_scan_lines` (or its ``lines``, already read); ``None`` when it gives none. Queries on it read
    no file (the rows are in the driver), though Spark runs a job to parse them."""
    lines = kernel_scan_lines(spark, snapshot) if lines is None else lines
    if lines is None:
        return None
    # one string through py4j, split in the JVM: a call a line would double the driver's time
    # (py4j finds no generic method such as Arrays.asList of an array; Pattern.splitAsStream is not generic)
    jvm, jspark = spark.sparkContext._jvm, spark._jsparkSession
    strings = jvm.org.apache.spark.sql.Encoders.STRING()
    if lines:
        split = jvm.java.util.regex.Pattern.compile("\n").splitAsStream("\n".join(lines)).toList()
        dataset = jspark.createDataset(split, strings)
    else:
        dataset = jspark.emptyDataset(strings)
    return DataFrame(jspark.read().schema(SCAN_FILE_SCHEMA).json(dataset), spark).select("add.*")


def scan_file_lines(spark: SparkSession, snapshot, predicate=None, stats: bool = True,
                    limit: int | None = None) -> list[str] | None:
    """The scan files of ``snapshot``'s version as Kernel returns them (``{"add": {...}}`` JSON, one a file);
    ``None`` as soon as there are more than ``limit`` (the rest left unread).

    ``predicate`` (a Kernel ``Predicate`` on the table's logical columns) keeps the files Kernel's partition
    pruning and data skipping cannot rule out; ``stats`` False leaves ``stats`` out (cheaper).
    Kernel's JSON handler writes each batch of scan files to a file in a local temporary folder, read back here
    and removed: several times faster than a py4j call a file."""
    jvm = spark.sparkContext._jvm
    kernel = jvm.io.delta.kernel
    delta_log = snapshot.deltaLog()
    engine = kernel.defaults.engine.DefaultEngine.create(delta_log.newDeltaHadoopConf())
    version = kernel.Table.forPath(engine, delta_log.dataPath().toString()).getSnapshotAsOfVersion(
        engine, snapshot.version())
    builder = version.getScanBuilder()
    if predicate is not None:
        builder = builder.withFilter(predicate)
    # getScanFiles(engine, includeStats): without it Kernel leaves `stats` out of the scan files
    batches = builder.build().getScanFiles(engine, stats)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="backfill-kernel-") as folder:
        try:
            while batches.hasNext():
                path = Path(folder, f"{len(lines)}.json")
                # file:// : a bare path would name the cluster's default file system (HDFS on EMR)
                engine.getJsonHandler().writeJsonFileAtomically(path.as_uri(), batches.next().getRows(), True)
                # split at "\n" alone: str.splitlines also splits at U+0085 and U+2028, which JSON leaves
                # unescaped in a partition value or a stats string (Kernel's file count then never matched)
                lines += [line for line in path.read_bytes().decode("utf-8").split("\n") if line]
                if limit is not None and len(lines) > limit:
                    return None
        finally:
            batches.close()
    return lines
