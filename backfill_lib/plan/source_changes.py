"""Source changes at publish: whether commits after a pinned version changed what the run read.

:func:`source_changes` tells, per table the plan pinned (:mod:`backfill_lib.plan.source_pins`), whether commits after
its pinned version changed what the run read: a data-changing ``add`` of a file the range's queries read now, or a
``remove`` of a file they read at the pinned version (so appends to other partitions and compactions are not
changes). :func:`read_files` names the data files the run's queries read (``--only changed`` asks it too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from pyspark.sql import SparkSession

from backfill_lib.adapters.jvm_plan import scala_list
from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import range_predicate
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.plan.model import BackfillPlan, SourceVersion
from backfill_lib.plan.source_pins import MAX_INSPECTED_COMMITS, _current, _jvm_session, _key_of, _snapshot
from backfill_lib.plan.source_query import source_frame


def _file_name(path: str) -> str:
    """A data file's name (its last path segment, URL-decoded): Delta's file names carry a UUID, so the name
    alone tells a file of the log from a file a query reads (absolute URIs there, relative paths in the log)."""
    return unquote(urlsplit(path).path.rsplit("/", 1)[-1])


def read_files(spark: SparkSession, request: BackfillRequest, start, end,
               versions: Mapping[str, int] | None) -> set[str]:
    """Names of the data files read over ``[start, end)`` (``None, None``: whole tables) by ``request``'s source
    SQL and every rule's source table, each Delta table at its version in ``versions`` (``{table_key:
    version}``; a table not there, or ``versions`` ``None``, as it is now)."""
    whole = start is None and end is None
    frames = [source_frame(spark, request, start, end, versions=versions)]
    rules = [(r.source.table, r.source.partition_column) for r in request.reconciliation]
    rules += [(r.source.table, r.source.partition_column) for r in request.metric_rules]
    for table, column in rules:
        version = (versions or {}).get(_key_of(spark, table))
        df = spark.table(table) if version is None else spark.read.option("versionAsOf", version).table(table)
        frames.append(df if whole else df.where(range_predicate(column, start, end)))
    return {_file_name(f) for df in frames for f in df.inputFiles()}


def _read_files(spark: SparkSession, plan: BackfillPlan, pinned: bool) -> set[str]:
    """Names of the data files the run's reads of its range take (:func:`read_files` over the plan's range,
    whole tables for a rebuild), at the pinned versions or (``pinned`` false) now."""
    bounds = (None, None) if plan.request.range is None else (plan.range_start, plan.range_end)
    return read_files(spark, plan.request, *bounds, plan.pinned_versions if pinned else None)


def _touching_commits(spark: SparkSession, source: SourceVersion, latest: int, before: set[str],
                      now: set[str]) -> list[int] | None:
    """Versions after ``source.version`` up to ``latest`` with a data-changing ``remove`` of a file in
    ``before`` or ``add`` of a file in ``now``; ``None`` when those commits cannot all be read (cleaned up,
    too many, Delta's internal API changed shape)."""
    if latest - source.version > MAX_INSPECTED_COMMITS:
        return None
    try:
        jvm = spark.sparkContext._jvm
        log = _snapshot(spark, source.table).deltaLog()
        changes = log.getChanges(source.version + 1, latest, jvm.scala.Option.empty(), False)
        touched, seen = [], []
        while changes.hasNext():
            commit = changes.next()
            version = int(commit._1())
            if version > latest:
                break
            seen.append(version)
            for action in scala_list(commit._2()):
                kind = action.getClass().getSimpleName()
                if kind not in ("AddFile", "RemoveFile"):
                    continue
                body = next(iter(json.loads(action.json()).values()))
                if not body.get("dataChange", True):
                    continue
                if _file_name(body["path"]) in (now if kind == "AddFile" else before):
                    touched.append(version)
                    break
    except Exception:
        return None
    if seen != list(range(source.version + 1, latest + 1)):
        return None
    return touched


def source_changes(spark: SparkSession, plan: BackfillPlan) -> list[Check]:
    """One ``source_snapshot`` check per table the plan pinned: it passes when no commit after the pinned
    version changed what the run read over its range (see the module docstring), fails naming the table, the
    pinned and current versions and the commits that changed it. Reads only Delta logs and the files the
    queries would read (no data); the files are listed only when a pinned table has a newer version."""
    pins = plan.source_versions or ()
    latest: dict[str, int | None] = {}
    for s in pins:
        now = _current(spark, s.table)
        latest[s.table] = None if now is None else now[0]
    advanced = [s for s in pins if latest[s.table] != s.version]
    files: tuple[set[str], set[str]] | None = None
    if advanced and _jvm_session(spark) is not None:
        try:
            files = (_read_files(spark, plan, True), _read_files(spark, plan, False))
        except Exception:  # a source gone or no longer readable: every newer table counts as changed
            files = None
    checks = []
    for s in pins:
        cur = latest[s.table]
        name, expected = s.table, f"version {s.version}"
        if cur == s.version:
            checks.append(Check("source_snapshot", name, True, observed=f"version {cur}", expected=expected,
                                message=f"{name} still at version {s.version}, as staged and reconciled"))
            continue
        if cur is None:
            detail = f"{name} is no longer a readable Delta table (pinned at version {s.version})"
            checks.append(Check("source_snapshot", name, False, observed="unreadable", expected=expected, message=detail))
            continue
        touched = None if files is None else _touching_commits(spark, s, cur, *files)
        if touched == []:
            checks.append(Check("source_snapshot", name, True, observed=f"version {cur}", expected=expected,
                                message=f"{name} has versions {s.version + 1}..{cur} after the pinned version "
                                        f"{s.version}, none changing the files the run read"))
            continue
        which = (f"versions {', '.join(map(str, touched))} changed its data in the run's range" if touched
                 else f"versions {s.version + 1}..{cur} were not inspected, so treated as changing the range")
        checks.append(Check("source_snapshot", name, False, observed=f"version {cur}", expected=expected,
                            message=f"source {name} changed after the run read it at version {s.version}: now at "
                                    f"version {cur}; {which}"))
    return checks
