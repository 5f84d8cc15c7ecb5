"""Order-dependent targets (``depends_on_past``): finding and rewriting the source SQL's reads of the target itself.

A cumulative or SCD2 table derives partition N from partition N-1 of the target, so its source SQL names the
target. With ``depends_on_past`` those references must read "the target as it will be" (this run's staged
partitions, the old rows elsewhere; :mod:`backfill_lib.run.past` builds that relation as a temporary view). Here,
from Spark's own parse of the SQL (as :mod:`backfill_lib.plan.source_pins` pins versions), every table reference
that names the target (by name, or by the Delta location it resolves to) is found with its character span, and
replaced by the view's name.

Only references the parser gives as ``UnresolvedRelation`` are seen: the target read through a view or an
``IDENTIFIER(...)`` clause is not, and would be read as it was (old rows). So a ``depends_on_past`` request whose
SQL names the target nowhere directly is refused (:func:`check_past_reads`), and so is any run without a JVM parser
(Spark Connect), where the SQL cannot be rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.table_names import same_location
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.plan.source_pins import _current, _jvm_session, _key_of, parsed_relations

__all__ = ["TargetReference", "check_past_reads", "replace_target", "same_location", "target_references"]


@dataclass(frozen=True)
class TargetReference:
    """Where the source SQL names the target: inclusive character indices of the identifier, whether an alias
    follows it (``FROM db.totals t``), and the identifier's last part (``totals``, the implicit alias otherwise)."""

    start: int
    stop: int
    aliased: bool
    name: str


def target_references(spark: SparkSession, text: str, target: str,
                      target_location: str | None) -> list[TargetReference] | None:
    """Every reference of ``text`` (one query) to table ``target`` (a request's canonical name), found by Spark's
    parser: by name (case-insensitive parts), or by the Delta location another name resolves to
    (``target_location``; ``None``: by name only). CTE names are not table references. Returns ``None`` without a
    JVM parser (Spark Connect) or when ``text`` does not parse.

    Raises
    ------
    IntakeError
        When a reference to the target has no position in ``text`` (it cannot be rewritten).
    """
    parsed = parsed_relations(spark, text)
    if parsed is None:
        return None
    found, aliased = parsed
    wanted = _key_of(spark, target)
    locations: dict[str, str | None] = {}
    refs = []
    for key, parts, start, stop in found:
        if key != wanted:
            if target_location is None:
                continue
            if key not in locations:
                now = _current(spark, key)
                locations[key] = None if now is None else now[1]
            if not same_location(locations[key], target_location):
                continue
        if start is None or stop is None:
            raise IntakeError(f"the source SQL names the target {target} as {'.'.join(parts)} where it cannot be "
                              "rewritten to read this run's staged partitions (depends_on_past)")
        refs.append(TargetReference(start, stop, start in aliased, parts[-1]))
    return refs


def replace_target(text: str, refs: list[TargetReference], view: str) -> str:
    """``text`` with each of ``refs`` replaced by ``view`` (a temporary view's name); an unaliased reference keeps
    its last part as alias (``db.totals`` -> ``view AS totals``), so columns qualified by it still resolve. Pure."""
    from backfill_lib.core.partitions import quote_ident

    for ref in sorted(refs, key=lambda r: r.start, reverse=True):  # from the end: earlier indices stay valid
        new = view if ref.aliased else f"{view} AS {quote_ident(ref.name)}"
        text = f"{text[:ref.start]}{new}{text[ref.stop + 1:]}"
    return text


def check_past_reads(spark: SparkSession, request: BackfillRequest, at: str) -> None:
    """Refuse a ``depends_on_past`` request whose source SQL cannot be made to read this run's staged partitions:
    no JVM parser (Spark Connect), or no direct reference to the target (read through a view, or not at all). Reads
    the catalog and Delta logs only; nothing is written.

    Raises
    ------
    IntakeError
        ``"{where}: field 'depends_on_past': ..."`` naming the source SQL file and the target.
    """
    from backfill_lib.intake.sources import check_query, read_sql

    target = request.target.table
    sql = str(request.source.sql)
    if _jvm_session(spark) is None:
        raise IntakeError(f"{at}: field 'depends_on_past': needs Spark's SQL parser in the driver to rewrite "
                          f"{sql}'s reads of {target}, which Spark Connect does not offer; run it with classic PySpark")
    body = check_query(spark, read_sql(request.source.sql), sql)
    now = _current(spark, target)
    try:
        refs = target_references(spark, body, target, None if now is None else now[1])
    except IntakeError as exc:
        raise IntakeError(f"{at}: field 'depends_on_past': {sql}: {exc}") from None
    if not refs:
        raise IntakeError(f"{at}: field 'depends_on_past': {sql} does not name the target {target} directly "
                          "(a read through a view or IDENTIFIER() cannot be redirected to the staged partitions); "
                          "name it in the SQL, or leave depends_on_past out")
