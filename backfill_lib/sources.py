"""Sources: the rows a request derives for a set of partitions, from a SQL file with bound range parameters."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from backfill_lib.errors import SourceError
from backfill_lib.request import BackfillRequest


def source_sql(request: BackfillRequest) -> str:
    """The text of the request's source SQL file, without a trailing semicolon."""
    return Path(request.source.sql).read_text().strip().rstrip(";")


def source_frame(
    spark: SparkSession, request: BackfillRequest, start: date | datetime | None, end: date | datetime | None,
    versions: Mapping[str, int] | None = None,
) -> DataFrame:
    """The source rows for the half-open range ``[start, end)``, as a lazy DataFrame.

    The SQL runs with the named parameters ``:range_start`` and ``:range_end`` bound to ``start`` and ``end``
    (``DATE`` or ``TIMESTAMP`` values); with ``None`` bounds (a rebuild of the whole table) it runs without
    parameters. ``versions`` (the plan's :attr:`~backfill_lib.plan.BackfillPlan.pinned_versions`) reads each
    Delta table the SQL names at its pinned version (:func:`backfill_lib.source_snapshot.pin_versions`); ``None``
    reads them as they are. Only analysis happens here; no data is read.

    Raises
    ------
    SourceError
        When the SQL does not parse or analyse; the message names the file and Spark's error class.
    """
    from backfill_lib.source_snapshot import pinned_sql

    text = pinned_sql(spark, source_sql(request), versions)
    try:
        if start is None:
            return spark.sql(text)
        return spark.sql(text, args={"range_start": start, "range_end": end})
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0]
        raise SourceError(f"{request.source.sql}: {first}") from exc


def source_input(spark: SparkSession, df: DataFrame):
    """Files and bytes ``df`` would read: ``DataFrame.inputFiles()`` after partition pruning, sized from the
    file system's metadata (no data read). Returns :class:`~backfill_lib.plan.SourceInput`."""
    from backfill_lib.plan import SourceInput

    files = df.inputFiles()
    if not files:
        return SourceInput(0, 0)
    path_class = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # resolved once: each name step is a py4j call
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    file_systems: dict[tuple[str, str], object] = {}
    total = 0
    for f in files:
        path = path_class(f)
        root = urlsplit(f)[:2]  # scheme and authority name the file system
        if root not in file_systems:
            file_systems[root] = path.getFileSystem(conf)
        total += file_systems[root].getFileStatus(path).getLen()
    return SourceInput(len(files), total)
