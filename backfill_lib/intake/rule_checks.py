"""Intake of a request's rules: every table, column and expression they name, checked against the live tables
before anything is staged. Analysis only: no data is read and nothing is written.

- ``reconciliation.N``: ``metric`` analyses as an aggregate on the source rows (the staged side: staged rows
  are the source's rows in the target's columns), ``source.table`` exists, has ``source.partition_column``, and
  ``source.metric`` analyses on it.
- ``metric_rules.N``: ``source.table`` exists, has ``source.partition_column``, and every column of ``metrics``
  exists (``sum`` ones integer or decimal) on both the source rows and that table.
- ``report_metric``: analyses as an aggregate on the target.

Every expression is also refused when it calls out of Spark (:func:`~backfill_lib.intake.sources.refuse_escapes`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, DecimalType, IntegralType, StructType

from backfill_lib.core.errors import IntakeError
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.rules import MetricSpec
from backfill_lib.intake.sources import check_aggregate, first_line, refuse_escapes


def _at(request_path: str, field: str) -> str:
    return f"{request_path}: field '{field}'"


def _table(spark: SparkSession, name: str, column: str, request_path: str, field: str) -> DataFrame:
    """Table ``name`` (lazy; analysed, not read), which must exist and have ``column``; ``field`` is the rule's
    ``source`` field."""
    try:
        df = spark.table(name)
    except Exception as exc:  # AnalysisException, or a name Spark cannot parse
        raise IntakeError(f"{_at(request_path, field + '.table')}: table {name} cannot be read: "
                          f"{first_line(exc)}") from None
    fold = name_fold()
    if fold(column) not in {fold(c) for c in df.columns}:
        raise IntakeError(f"{_at(request_path, field + '.partition_column')}: table {name} has no column {column} "
                          f"(columns: {', '.join(df.columns[:20])})")
    refuse_escapes(df, f"{_at(request_path, field + '.table')} ({name})")  # a view can hold what SQL may not
    return df


def check_columns(schema: StructType, spec: MetricSpec, at: str) -> None:
    """Check that every column ``spec`` names exists in ``schema`` (ignoring case unless the active session's
    ``spark.sql.caseSensitive`` is on, as Spark resolves it) and that ``sum`` columns are exact numbers.

    Parameters
    ----------
    schema : StructType
        The schema of the side being profiled.
    spec : MetricSpec
    at : str
        What the schema belongs to (a table name or "staged rows"), for the message.

    Raises
    ------
    IntakeError
        Naming ``at``, the column and, for ``sum``, its type when it is not integer or decimal.
    """
    fold = name_fold()
    types: dict[str, DataType] = {fold(f.name): f.dataType for f in schema.fields}
    for field in ("null_count", "nan_count", "sum", "min_max", "checksum"):
        for column in getattr(spec, field):
            if fold(column) not in types:
                raise IntakeError(f"{at}: metric {field} names column '{column}', which does not exist")
    for column in spec.sum:
        if not isinstance(types[fold(column)], (IntegralType, DecimalType)):
            raise IntakeError(
                f"{at}: metric sum({column}) needs an integer or decimal column, "
                f"'{column}' is {types[fold(column)].simpleString()}"
            )


def name_fold():
    """How the active session compares column names: as written with ``spark.sql.caseSensitive`` on, else
    lower-cased (Spark's default resolves ``v`` to a column ``V``)."""
    spark = SparkSession.getActiveSession()
    sensitive = spark is not None and str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    return (lambda name: name) if sensitive else str.lower


def check_rules(spark: SparkSession, request: BackfillRequest, request_path: str, source: DataFrame,
                target: DataFrame | None = None) -> None:
    """Check every rule of ``request`` against the live tables (see the module docstring).

    Parameters
    ----------
    source:
        The request's source rows (:func:`~backfill_lib.plan.source_query.source_frame`, analysed, not read): the
        staged side's schema.
    target:
        The target table (default ``spark.table(request.target.table)``), for ``report_metric``.

    Raises
    ------
    IntakeError
        ``"{request_path}: field 'reconciliation.0.metric': ..."``, naming the request file, the field and what is
        wrong (Spark's first message line for an expression that does not analyse).
    """
    rules, profiles = request.reconciliation, request.metric_rules
    if not (rules or profiles or request.report_metric):
        return
    part = request.target.partition_column
    for i, rule in enumerate(rules):
        field = f"reconciliation.{i}"
        check_aggregate(source, rule.metric, part, _at(request_path, f"{field}.metric"))
        table = _table(spark, rule.source.table, rule.source.partition_column, request_path, f"{field}.source")
        check_aggregate(table, rule.source.metric, rule.source.partition_column,
                        _at(request_path, f"{field}.source.metric"))
    for i, rule in enumerate(profiles):
        field = f"metric_rules.{i}"
        table = _table(spark, rule.source.table, rule.source.partition_column, request_path, f"{field}.source")
        check_columns(table.schema, rule.metrics, f"{_at(request_path, field + '.metrics')}: table {rule.source.table}")
        check_columns(source.schema, rule.metrics, f"{_at(request_path, field + '.metrics')}: the source rows")
    if request.report_metric:
        target = target if target is not None else spark.table(request.target.table)
        check_aggregate(target, request.report_metric, part, _at(request_path, "report_metric"))
