"""Source snapshot: every Delta table a run reads is read at one version, pinned once per run.

A run pins the current version of each Delta table its source SQL names directly and of each table its
reconciliation and metric rules read (:func:`pin_sources`); the versions are stored with the frozen plan in the
ledger (``plan_json``), so staging, reconciliation and a resume read the same data however long they take and
whatever commits land meanwhile. The source SQL is rewritten (:func:`pin_versions`) from Spark's own parse of
it: every table reference the parser gives as an ``UnresolvedRelation`` that is not a CTE name, not a temporary
view and not already time-travelled gets `` VERSION AS OF N`` right after its identifier (Spark's grammar:
``identifierReference temporalClause? optionsClause? sample? tableAlias``). Tables read through a view or an
``IDENTIFIER(...)`` clause are not pinned.

At publish, :func:`backfill_lib.plan.source_changes.source_changes` tells, per pinned table, whether commits after its pinned version changed
what the run read: a data-changing ``add`` of a file the range's queries read now, or a ``remove`` of a file
they read at the pinned version (so appends to other partitions and compactions are not changes). The
request's ``on_source_change`` decides what a change does (``report``: a failed ``source_snapshot`` check in
the run's result and report, the pinned rows are published; ``refuse``: :class:`SourceChangedError`).

Without a JVM (Spark Connect) the SQL is not rewritten, only the rules' tables are pinned (their version from
``DESCRIBE HISTORY``), and at publish any newer version of a pinned table counts as a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession

from backfill_lib.adapters.jvm_plan import scala_list
from backfill_lib.core.table_names import catalog_table, is_absolute_path, path_table, split_table_name, table_path
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.plan.model import BackfillPlan, SourceVersion

#: commits after a pinned version read in the driver to find what changed; beyond this a newer version counts
#: as a change without looking (a source that busy has most likely changed the range anyway)
MAX_INSPECTED_COMMITS = 1000


def table_key(parts: Iterable[str]) -> str:
    """The key a table is pinned under: its name parts lower-cased (Spark's identifiers are case-insensitive),
    joined by dots, a part that is not a plain identifier or is a reserved word back-quoted
    (:func:`~backfill_lib.core.table_names.catalog_table`, so the key reads the table in SQL too).
    A path-based table (``delta`` and an absolute path) keeps its path's case: paths are case-sensitive."""
    parts = list(parts)
    if len(parts) == 2 and parts[0].lower() == "delta" and is_absolute_path(parts[1]):
        return path_table(parts[1])
    # lower-cased, then spelt as check_table_name spells a request's names (a reserved word back-quoted too)
    return catalog_table([p.lower() for p in parts])


def _jvm_session(spark: SparkSession):
    """The JVM SparkSession of classic PySpark; ``None`` under Spark Connect."""
    return getattr(spark, "_jsparkSession", None)


def parsed_relations(spark: SparkSession, text: str) -> tuple[list[tuple[str, list[str], int | None, int | None]],
                                                                set[int]] | None:
    """The table references of ``text`` Spark's parser finds, as ``(key, name parts, start, stop)`` (inclusive
    character indices of the identifier in ``text``; ``None`` when the parser gave none), CTE references left
    out, with the start indices of those an alias follows (``FROM db.t x``); ``None`` when there is no JVM
    parser or ``text`` does not parse (then Spark reports it when it runs)."""
    jss = _jvm_session(spark)
    if jss is None:
        return None
    try:
        root = jss.sessionState().sqlParser().parsePlan(text)
    except Exception:
        return None
    found, ctes, aliased, stack = [], set(), set(), [root]
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "UnresolvedWith":
            ctes.update(pair._1().lower() for pair in scala_list(node.cteRelations()))
        elif kind == "SubqueryAlias" and node.child().getClass().getSimpleName() == "UnresolvedRelation":
            start = node.child().origin().startIndex()
            if start.isDefined():
                aliased.add(int(start.get()))
        elif kind == "UnresolvedRelation":
            parts = [str(p) for p in scala_list(node.multipartIdentifier())]
            origin = node.origin()
            start, stop = origin.startIndex(), origin.stopIndex()
            same_text = origin.sqlText().isDefined() and origin.sqlText().get() == text
            found.append((table_key(parts), parts, int(start.get()) if start.isDefined() and same_text else None,
                          int(stop.get()) if stop.isDefined() and same_text else None))
        # children, plus CTE definitions and subquery expressions (a plan's innerChildren)
        stack.extend(scala_list(node.children()) + scala_list(node.innerChildren()))
    return [r for r in found if not (len(r[1]) == 1 and r[1][0].lower() in ctes)], aliased


def _relations(spark: SparkSession, text: str) -> list[tuple[str, list[str], int | None, int | None]] | None:
    """:func:`parsed_relations` without the aliases."""
    parsed = parsed_relations(spark, text)
    return None if parsed is None else parsed[0]


def _is_temp_view(spark: SparkSession, parts: list[str]) -> bool:
    jss = _jvm_session(spark)
    ident = jss.sessionState().sqlParser().parseMultipartIdentifier(table_key(parts))
    return bool(jss.sessionState().catalog().isTempView(ident))


def _snapshot(spark: SparkSession, name: str, version: int | None = None):
    """Delta table ``name``'s snapshot (JVM ``Snapshot``) at ``version`` (default: the latest)."""
    from backfill_lib.adapters.delta_log import latest_snapshot

    latest = latest_snapshot(spark, name)
    if version is None or int(latest.version()) == version:
        return latest
    jvm = spark.sparkContext._jvm
    return latest.deltaLog().getSnapshotAt(version, jvm.scala.Option.empty(), jvm.scala.Option.empty(), False)


def snapshot_at(spark: SparkSession, name: str, version: int | None):
    """Delta table ``name``'s snapshot at ``version`` (default: the latest), for reading its log (for example
    :func:`~backfill_lib.adapters.delta_log.partition_stats`) as the run's pinned reads see it."""
    return _snapshot(spark, name, version)


def _current(spark: SparkSession, name: str) -> tuple[int, str] | None:
    """``(version, location)`` of Delta table ``name`` now; ``None`` when it is not a Delta table (a view,
    Parquet, a missing table: the run's own checks name those)."""
    if _jvm_session(spark) is None:
        try:
            row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()
        except Exception:
            return None
        return (int(row["version"]), name) if row is not None else None
    try:
        snap = _snapshot(spark, name)
        return int(snap.version()), str(snap.deltaLog().dataPath().toString())
    except Exception:
        return None


def pin_versions(spark: SparkSession, text: str,
                 versions: Mapping[str, int] | None = None) -> tuple[str, dict[str, int]]:
    """``text`` (source SQL) with `` VERSION AS OF N`` after each Delta table it names, and those versions.

    With ``versions`` (``{table_key: version}``, from the plan), exactly those tables are pinned at those
    versions (no catalog or Delta log read); without, the tables that are Delta tables now are pinned at their
    latest version. CTE names, temporary views and references that already carry ``VERSION AS OF`` /
    ``TIMESTAMP AS OF`` are left as written. Returns ``(text, {table_key: version})`` of the tables pinned;
    ``text`` unchanged (and ``{}``) when nothing is pinned, the text does not parse, or there is no JVM.
    """
    if versions is not None and not versions:
        return text, {}
    relations = _relations(spark, text)
    if not relations:
        return text, {}
    if versions is None:
        versions = {}
        for key, parts, _, _ in relations:
            if key not in versions and not _is_temp_view(spark, parts):
                now = _current(spark, key)
                if now is not None:
                    versions[key] = now[0]
    used: dict[str, int] = {}
    # from the last reference to the first, so each insertion leaves the indices before it valid
    for key, _, start, stop in sorted(relations, key=lambda r: -1 if r[2] is None else r[2], reverse=True):
        if key in versions and start is not None and stop is not None:
            text = f"{text[:stop + 1]} VERSION AS OF {int(versions[key])}{text[stop + 1:]}"
            used[key] = int(versions[key])
    return text, used


def pinned_sql(spark: SparkSession, text: str, versions: Mapping[str, int] | None) -> str:
    """``text`` with its tables pinned at ``versions`` (see :func:`pin_versions`); unchanged for ``None``."""
    return text if versions is None else pin_versions(spark, text, versions)[0]


def _rule_tables(request: BackfillRequest) -> list[str]:
    return [r.source.table for r in request.reconciliation] + [r.source.table for r in request.metric_rules]


def _parts_of(spark: SparkSession, name: str) -> list[str]:
    jss = _jvm_session(spark)
    if jss is not None:
        try:
            return [str(p) for p in scala_list(jss.sessionState().sqlParser().parseMultipartIdentifier(name))]
        except Exception:  # not a name Spark parses: read as written, Spark's error comes when it is read
            pass
    path = table_path(name)
    if path is not None:
        return ["delta", path]
    # a dot inside a back-quoted part does not split it (sales.`a.b` is two parts)
    return split_table_name(name) or name.split(".")


def _key_of(spark: SparkSession, name: str) -> str:
    return table_key(_parts_of(spark, name))


def pin_sources(spark: SparkSession, request: BackfillRequest) -> tuple[SourceVersion, ...]:
    """The current version of every Delta table ``request`` reads: those its source SQL names (see
    :func:`pin_versions`) and its reconciliation and metric rules' source tables, in that order. Names of one
    table (``flights`` and ``demo.flights``) get one version (matched by the table's location). Reads only
    the catalog and the Delta logs."""
    from backfill_lib.intake.sources import source_sql

    names = [(key, parts) for key, parts, _, _ in _relations(spark, source_sql(request)) or []]
    names += [(table_key(parts), parts) for parts in (_parts_of(spark, t) for t in _rule_tables(request))]
    pinned: dict[str, SourceVersion] = {}
    by_location: dict[str, int] = {}
    for key, parts in names:
        if key in pinned or (_jvm_session(spark) is not None and _is_temp_view(spark, parts)):
            continue
        now = _current(spark, key)
        if now is None:
            continue
        version = by_location.setdefault(now[1], now[0])
        pinned[key] = SourceVersion(key, version, now[1])
    return tuple(pinned.values())


def read_table(spark: SparkSession, plan: BackfillPlan, name: str) -> DataFrame:
    """Table ``name`` as the run reads it: at its pinned version when the plan pinned it, else as it is."""
    version = (plan.pinned_versions or {}).get(_key_of(spark, name))
    return spark.table(name) if version is None else spark.read.option("versionAsOf", version).table(name)


def pinned_version(spark: SparkSession, plan: BackfillPlan, name: str) -> int | None:
    """The version the plan pinned table ``name`` at, or ``None``."""
    return (plan.pinned_versions or {}).get(_key_of(spark, name))


# --- at publish -------------------------------------------------------------------------------------------------


def describe_pins(pins: Iterable[SourceVersion] | None) -> str:
    """``demo.flights@12, demo.carriers@3`` (``none`` for a plan that pinned nothing, ``not pinned`` for a
    plan from before pinning existed)."""
    if pins is None:
        return "not pinned"
    return ", ".join(f"{s.table}@{s.version}" for s in pins) or "none"
