"""Sources: the rows a request derives for a set of partitions, from a SQL file with bound range parameters.

Request SQL only ever runs as a query. :func:`check_query` refuses a file holding anything but one query (a
command such as ``DROP TABLE``, a SQL script, several statements) before Spark runs it, and the query then runs
only as the subquery of ``SELECT * FROM (...)`` (:func:`~backfill_lib.intake.sql_text.wrap_query`), where no command
parses; :func:`refuse_escapes` refuses the query constructs that reach outside Spark (``reflect`` and
``java_method``, which call JVM methods, and ``TRANSFORM ... USING``, which runs a program).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.errors import IntakeError, first_line
from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.sql_text import single_query

#: Catalyst classes of an analysed plan that reach outside the query, with what the message calls them.
FORBIDDEN = {
    "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection":
        "reflect / java_method / try_reflect (they call JVM methods)",
    "org.apache.spark.sql.catalyst.plans.logical.ScriptTransformation": "TRANSFORM ... USING (it runs a program)",
}


def read_sql(path: str | Path, at: str | None = None) -> str:
    """The text of SQL file ``path`` (UTF-8).

    Raises
    ------
    IntakeError
        When the file is missing or not UTF-8 text; the message names ``at`` (default: the path).
    """
    at = at or str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise IntakeError(f"{at}: file not found") from exc
    except UnicodeDecodeError as exc:
        raise IntakeError(f"{at}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from exc


def source_sql(request: BackfillRequest) -> str:
    """The text of the request's source SQL file, without a trailing semicolon (unchecked: see
    :func:`check_query`)."""
    return read_sql(request.source.sql).strip().rstrip(";")


def _parser(spark: SparkSession):
    """Spark's SQL parser in the driver's JVM (Delta's, which delegates to Spark's), or ``None`` without one
    (Spark Connect)."""
    jspark = getattr(spark, "_jsparkSession", None)
    return None if jspark is None else jspark.sessionState().sqlParser()


def check_query(spark: SparkSession, text: str, at: str) -> str:
    """The one query ``text`` holds, ready for :func:`~backfill_lib.intake.sql_text.wrap_query`, or an error: nothing
    in ``text`` is executed.

    First the pure split into statements (:func:`~backfill_lib.intake.sql_text.single_query`), then, where the driver
    has a JVM, Spark's own parser: the statement must parse as a query (``parseQuery``), and when it does not,
    ``parsePlan`` names what it is. Without a JVM (Spark Connect) the subquery wrapping alone keeps commands out.

    Raises
    ------
    IntakeError
        ``"{where}: holds a statement (DROP TABLE), not a query"``, ``holds 2 statements``, ``holds a SQL script``,
        ``holds no query``, or ``does not parse``, with Spark's first message line.
    """
    try:
        body = single_query(text, at)
    except ValueError as exc:
        raise IntakeError(str(exc)) from None
    parser = _parser(spark)
    if parser is not None:
        try:
            parser.parseQuery(body)
        except Exception as exc:  # py4j hands back Spark's ParseException (or a Py4JError)
            try:
                plan = parser.parsePlan(body)
            except Exception:
                raise IntakeError(f"{at}: does not parse as a query: {first_line(exc)}") from exc
            while plan.getClass().getSimpleName() == "UnresolvedWith":  # WITH a AS (...) INSERT ...: name the INSERT
                plan = plan.child()
            raise IntakeError(f"{at}: holds a statement ({plan.getClass().getSimpleName()}), not a query") from exc
    return body


def _classes(tree) -> set[str]:
    """Every ``class`` named in a Catalyst plan's JSON (nodes, expressions, subquery plans)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("class"), str):
                found.add(item["class"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def refuse_escapes(df: DataFrame, at: str) -> None:
    """Refuse ``df`` when its analysed plan (views, subqueries and CTEs included) uses a :data:`FORBIDDEN`
    construct. Reads no data. Under Spark Connect, which sends no plan object, the analysed plan's text
    (``EXPLAIN EXTENDED``) is searched for the same constructs by name (:func:`_refuse_escapes_in_text`).

    Raises
    ------
    IntakeError
        ``"{where}: uses reflect / java_method ..."``.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        _refuse_escapes_in_text(df, at)
        return
    try:
        classes = _classes(json.loads(jdf.queryExecution().analyzed().toJSON()))
    except Exception as exc:  # fail closed: a plan that cannot be inspected is not run
        raise IntakeError(f"{at}: its analysed plan could not be inspected: {first_line(exc)}") from exc
    for cls, what in FORBIDDEN.items():
        if cls in classes:
            raise IntakeError(f"{at}: uses {what}; request SQL may only read tables")


#: How the analysed plan's text names :data:`FORBIDDEN`'s classes (an expression by its SQL name and an open
#: parenthesis, the operator by its node name).
FORBIDDEN_TEXT = {
    re.compile(r"(?<![\w`])(reflect|java_method|try_reflect)\("): FORBIDDEN[
        "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection"],
    re.compile(r"(?<![\w`])ScriptTransformation\b"): FORBIDDEN[
        "org.apache.spark.sql.catalyst.plans.logical.ScriptTransformation"],
}


def _refuse_escapes_in_text(df: DataFrame, at: str) -> None:
    """:func:`refuse_escapes` for a DataFrame without a JVM plan (Spark Connect): its analysed plan as text.

    A column or table named like a forbidden function followed by ``(`` is refused too (fails closed)."""
    explain = getattr(df, "_explain_string", None)
    try:
        text = explain(extended=True)
    except Exception as exc:  # fail closed: a plan that cannot be inspected is not run
        raise IntakeError(f"{at}: its analysed plan could not be inspected: {first_line(exc)}") from exc
    analysed = text.split("== Analyzed Logical Plan ==", 1)[-1].split("== Optimized Logical Plan ==", 1)[0]
    for pattern, what in FORBIDDEN_TEXT.items():
        if pattern.search(analysed):
            raise IntakeError(f"{at}: uses {what}; request SQL may only read tables")


def check_aggregate(df: DataFrame, text: str, by: str, at: str) -> DataFrame:
    """Analyse aggregate expression ``text`` (a metric such as ``sum(flights)``) on ``df`` grouped by column
    ``by``, without reading data; return that aggregation (columns ``by`` and ``_metric``).

    ``F.expr`` parses exactly one expression, so no statement can hide in ``text``; a scalar subquery in it is a
    query, checked like the rest by :func:`refuse_escapes`.

    Raises
    ------
    IntakeError
        ``"{where}: ..."`` when ``text`` does not parse as one expression or does not analyse on ``df`` (an unknown
        column, a non-aggregate), or uses a forbidden construct.
    """
    try:
        metric = F.expr(text)
        out = df.groupBy(F.col(quote_ident(by))).agg(metric.alias("_metric"))
        out.schema  # analysis, no job
    except PySparkException as exc:
        raise IntakeError(f"{at}: '{text}' is not a valid aggregate here: {first_line(exc)}") from None
    refuse_escapes(out, at)
    return out
