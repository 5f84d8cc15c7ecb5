"""Intake of ``target.where``: one read-only boolean expression over the target's other partition columns,
checked by Spark's own parser and analyzer against the target's schema. Analysis only: no data is read.

The checked predicate is kept as Spark renders the analysed expression (:class:`~backfill_lib.core.partitions.RowFilter`):
comments gone, names quoted where they need it, once with bare columns (staging, validation, the diff, the
``replaceWhere``) and once with the columns qualified by ``t`` (a MERGE, whose staged side has the same columns).
"""

from __future__ import annotations

import json

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from backfill_lib.core.errors import IntakeError, error_condition, first_line
from backfill_lib.core.partitions import RowFilter
from backfill_lib.core.table_state import TableState
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.sources import _classes, _parser, refuse_escapes
from backfill_lib.intake.table_checks import check_where_columns

#: Catalyst expression classes (simple names) of subqueries, which a ``where`` may not hold.
_SUBQUERIES = {"ScalarSubquery", "ListQuery", "Exists", "InSubquery", "LateralSubquery"}


def check_where(spark: SparkSession, request: BackfillRequest, state: TableState, request_path: str) -> RowFilter | None:
    """The request's ``target.where`` checked against ``state`` (the target's columns and partition spec), or
    ``None`` when it has none.

    The text must parse as one expression (Spark's ``parseExpression``: no statement, no second expression),
    analyse as a boolean predicate on the target's columns, be deterministic, hold no subquery or user-defined
    function, call nothing outside Spark (:func:`~backfill_lib.intake.sources.refuse_escapes`) and read only
    partition columns other than the range's (:func:`~backfill_lib.intake.table_checks.check_where_columns`).

    Raises
    ------
    IntakeError
        ``"{request_path}: field 'target.where': ..."``: a column the table does not have (named, with the
        table's columns), a text that does not parse or analyse (Spark's first message line), or any rule above.
    """
    text = request.target.where
    if text is None:
        return None
    at = f"{request_path}: field 'target.where'"
    parser = _parser(spark)
    if parser is None:
        raise IntakeError(f"{at}: checking a where needs a session with a driver JVM (not Spark Connect)")
    try:
        parsed = parser.parseExpression(text)
    except Exception as exc:  # py4j hands back Spark's ParseException
        raise IntakeError(f"{at}: '{text}' does not parse as one SQL expression: {first_line(exc)}") from None
    if parsed.getClass().getSimpleName() == "Alias":
        raise IntakeError(f"{at}: '{text}' is a named expression, not a predicate")
    schema = spark.table(state.name).schema
    rendered = []
    for alias in ("", "t"):
        empty = spark.createDataFrame([], schema)
        empty = empty.alias(alias) if alias else empty
        try:
            df = empty.where(text)
            condition = df._jdf.queryExecution().analyzed().condition()
        except PySparkException as exc:
            condition_name = error_condition(exc)
            if condition_name.startswith("UNRESOLVED_COLUMN"):
                missing = (exc.getMessageParameters() or {}).get("objectName", "?").strip("`")
                raise IntakeError(f"{at}: '{text}' names column {missing}, which table {state.name} does not have "
                                  f"(columns: {', '.join(c.name for c in state.columns)})") from None
            raise IntakeError(f"{at}: '{text}' is not a predicate on table {state.name}: {first_line(exc)}") from None
        if not alias:
            _refuse_constructs(df, condition, text, at)
            columns = _references(condition)
        rendered.append(str(condition.sql()))
    found = RowFilter(text, rendered[0], rendered[1], columns)
    check_where_columns(state, request.target.range_columns, found, at)
    return found


def _refuse_constructs(df, condition, text: str, at: str) -> None:
    refuse_escapes(df, at)
    if not condition.deterministic():
        raise IntakeError(f"{at}: '{text}' is not deterministic; a where must select the same rows every time")
    classes = _classes(json.loads(condition.toJSON()))
    for cls in sorted(classes):
        simple = cls.rsplit(".", 1)[-1]
        what = ("a subquery" if simple in _SUBQUERIES
                else "a user-defined function" if "UDF" in simple or "UserDefinedFunction" in simple else None)
        if what:
            raise IntakeError(f"{at}: '{text}' holds {what} ({simple}); a where is a predicate on partition columns")


def _references(condition) -> tuple[str, ...]:
    """The names of the columns ``condition`` reads, in first-seen order."""
    names: list[str] = []
    it = condition.references().iterator()
    while it.hasNext():
        name = str(it.next().name())
        if name not in names:
            names.append(name)
    return tuple(names)
