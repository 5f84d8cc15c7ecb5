"""Sources: the rows a request derives for a set of partitions, from a SQL file with bound range parameters."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from backfill_lib.errors import SourceError
from backfill_lib.request import BackfillRequest


def source_sql(request: BackfillRequest) -> str:
    """The text of the request's source SQL file, without a trailing semicolon."""
    return Path(request.source.sql).read_text().strip().rstrip(";")


def source_frame(
    spark: SparkSession, request: BackfillRequest, start: date | datetime, end: date | datetime
) -> DataFrame:
    """The source rows for the half-open range ``[start, end)``, as a lazy DataFrame.

    The SQL runs with the named parameters ``:range_start`` and ``:range_end`` bound to ``start`` and ``end``
    (``DATE`` or ``TIMESTAMP`` values). Only analysis happens here; no data is read.

    Raises
    ------
    SourceError
        When the SQL does not parse or analyse; the message names the file and Spark's error class.
    """
    try:
        return spark.sql(source_sql(request), args={"range_start": start, "range_end": end})
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0]
        raise SourceError(f"{request.source.sql}: {first}") from exc
