"""The source query of a plan: the request's SQL bound to a half-open range, at the plan's pinned versions.

Checked first by intake (:mod:`backfill_lib.intake.sources`: one read-only query, no escape out of Spark); here
it is bound, pinned and sized. Only analysis and file metadata; no data is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, datetime

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from backfill_lib.core.errors import IntakeError, first_line
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.sources import check_query, read_sql, refuse_escapes
from backfill_lib.intake.sql_text import wrap_query
from backfill_lib.plan.model import SourceInput
from backfill_lib.plan.source_pins import pinned_sql


def source_frame(
    spark: SparkSession, request: BackfillRequest, start: date | datetime | None, end: date | datetime | None,
    versions: Mapping[str, int] | None = None, rewrite: Callable[[str], str] | None = None,
) -> DataFrame:
    """The source rows for the half-open range ``[start, end)``, as a lazy DataFrame.

    The SQL runs with the named parameters ``:range_start`` and ``:range_end`` bound to ``start`` and ``end``
    (``DATE`` or ``TIMESTAMP`` values); with ``None`` bounds (a rebuild of the whole table) it runs without
    parameters. It is checked to be one query (:func:`check_query`) and runs only as a subquery
    (``SELECT * FROM (...)``); its analysed plan must not call out of Spark (:func:`refuse_escapes`). Only
    analysis happens here; no data is read and nothing else is executed.
    ``versions`` (the plan's :attr:`~backfill_lib.plan.model.BackfillPlan.pinned_versions`) reads each Delta table the
    SQL names at its pinned version (:func:`backfill_lib.plan.source_pins.pin_versions`), rewritten after the check
    and before the wrapping; ``None`` reads them as they are. ``rewrite`` (``depends_on_past``: the target's
    references replaced by the run's view of it, :func:`backfill_lib.run.past.past_source_frame`) is applied to
    the checked query before the pinning.

    Raises
    ------
    IntakeError
        When the file is not one query, does not parse or analyse, or uses a forbidden construct; the message names
        the file and Spark's first message line.
    """
    where = str(request.source.sql)
    body = check_query(spark, read_sql(request.source.sql), where)
    text = wrap_query(pinned_sql(spark, body if rewrite is None else rewrite(body), versions))
    try:
        if start is None:
            df = spark.sql(text)
        else:
            df = sql_with_bounds(spark, text, start, end)
    except PySparkException as exc:
        raise IntakeError(f"{where}: {first_line(exc)}") from exc
    refuse_escapes(df, where)
    refuse_open_change_feeds(df, where)
    return df


def refuse_open_change_feeds(df: DataFrame, at: str) -> None:
    """Refuse ``df`` when it reads a Delta Change Data Feed up to the latest version (see
    :func:`~backfill_lib.adapters.change_feed_files.open_change_feeds`): the run could not read it at one version.

    Raises
    ------
    IntakeError
        ``"{where}: reads the Change Data Feed of db.t up to its latest version, N ..."``.
    """
    from backfill_lib.adapters.change_feed_files import open_change_feeds

    feeds = open_change_feeds(df)
    if feeds:
        table, start, latest = feeds[0]
        raise IntakeError(
            f"{at}: reads the Change Data Feed of {table} up to its latest version, {latest} (no ending version, "
            "or a later one): a commit during the run would change what it reads and the run cannot pin it; give "
            f"an ending version of at most {latest}, e.g. table_changes('{table.removeprefix('spark_catalog.')}', "
            f"{start}, {latest})")


def sql_literal(value) -> str:
    """A ``DATE`` or ``TIMESTAMP`` bound as SQL literal text (an aware datetime with its offset: the same instant
    in any session time zone)."""
    if isinstance(value, datetime):
        return f"TIMESTAMP'{value.isoformat(sep=' ')}'"
    return f"DATE'{value.isoformat()}'"


def sql_with_bounds(spark: SparkSession, text: str, start, end) -> DataFrame:
    """``text`` run with ``:range_start`` and ``:range_end`` bound to ``start`` and ``end``: as Spark's named
    parameters, except under Spark Connect, whose server loses them under Delta's SQL parser; there they are bound
    as literals in the text (:func:`~backfill_lib.intake.sql_text.bind_named_parameters`)."""
    from backfill_lib.adapters.log_reader import log_reader

    if not log_reader(spark).named_parameters:
        from backfill_lib.intake.sql_text import bind_named_parameters

        return spark.sql(bind_named_parameters(text, {"range_start": sql_literal(start),
                                                      "range_end": sql_literal(end)}))
    return spark.sql(text, args={"range_start": start, "range_end": end})


def source_input(spark: SparkSession, df: DataFrame):
    """Files and bytes ``df`` would read: ``DataFrame.inputFiles()`` after partition pruning, sized from the
    file system's metadata (no data read). Returns :class:`~backfill_lib.plan.model.SourceInput`.

    A query that reads only Delta tables and their change feeds is sized by Delta Kernel and the Delta log in
    the driver instead, from the same pruning (:func:`~backfill_lib.adapters.kernel_scan.kernel_input_files`):
    ``inputFiles()`` lists Delta's files in a Spark job, and none of a change feed. Otherwise, when the query
    reads a leaf whose files ``inputFiles()`` does not list (a change feed, an RDD, a cached relation), the size
    is unknown (``None``, with the reason): a count of the other leaves alone would be too low, and batches are
    then sized by the target's bytes (:func:`~backfill_lib.plan.builder.batch_partitions`)."""
    from backfill_lib.adapters.kernel_scan import kernel_input_files
    from backfill_lib.adapters.source_leaves import unlisted_leaf

    found = kernel_input_files(spark, df)
    if found is not None:
        return SourceInput(*found)
    leaf = unlisted_leaf(df)
    if leaf is not None:
        return SourceInput(None, None, f"the query reads {leaf}, whose files Spark does not list")
    files = df.inputFiles()
    if not files:
        return SourceInput(0, 0)
    from backfill_lib.adapters.log_reader import log_reader

    # Hadoop's FileSystem in the driver; under Spark Connect, Spark's file source (no content read either way)
    return SourceInput(len(files), log_reader(spark).files_bytes(files))
