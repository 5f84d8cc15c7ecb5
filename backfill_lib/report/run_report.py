"""Assemble a run's report from its outcome (what the run holds in memory, or the same read back from the ledger)
and its tables, and write it into the run's folder.

The first screen's per-column changes and samples of changed rows come from the diff the validation computed
(the ledger's diffs table: nothing is scanned again for them); a run with downstream marts shows each mart's child
run (``RUN_ID__mN``) in a section of its own, read from the ledger once the target was published.

The report (``<home>/runs/<run_id>/report.html`` and ``report.md``) is written at the end of every run that
reached validation (from memory; from the ledger after a gate failure or a resumed publish), and again by
``backfill report RUN_ID`` (from the ledger); both give the same files. Its chart shows ``request.report_metric`` (a SQL
aggregate, default ``count(*)``) per partition: before is the target at the version the plan read (time
travel), after is the staged rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import timezone
from decimal import Decimal, localcontext
from pathlib import Path

from pyspark.sql import SparkSession

from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import key_order
from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.intake.request import Strategy
from backfill_lib.intake.schema_guard import SchemaChange, changes_line
from backfill_lib.plan.explain import NO_PINS
from backfill_lib.plan.model import plan_from_summary
from backfill_lib.report.documents import (ReportDocument, RunDocument, partition_rows, run_document, staging_mode_of,
                                          write_summary)
from backfill_lib.report.render import (
    SAMPLE_LIMIT,
    ColumnChange,
    MartSection,
    MetricPoint,
    ReportData,
    SampleRow,
    write_report,
)
from backfill_lib.run.cleanup import staging_exists
from backfill_lib.ledger import Ledger
from backfill_lib.ledger.files import LedgerFiles
from backfill_lib.run.staging import pinned
from backfill_lib.run.staging import staged_rows as read_staged_rows
from backfill_lib.plan.kinds import kind_for
from backfill_lib.validate.reconcile import metric_per_partition


def _pins(pins: list[dict] | None) -> str:
    if pins is None:
        return "not pinned"
    return ", ".join(f"{p['table']} version {p['version']}" for p in pins) or NO_PINS


def _is_row_count(metric: str) -> bool:
    return "".join(metric.split()).lower() in ("count(*)", "count(1)")


def metric_points(spark: SparkSession | None, run: dict, plan: dict, metric: str,
                  staged_rows: dict[str, int | None] | None = None,
                  staging_there: bool | None = None, diffs: dict[str, dict] | None = None) -> tuple[MetricPoint, ...]:
    """``metric`` per partition over the same rows before and after: every row of the partition, on the target
    as the plan saw it and as publishing the run's staging table leaves it (the strategy's
    :meth:`~backfill_lib.plan.kinds.StrategyKind.as_published`; ``staging_there``: whether that table
    exists, if the caller knows; ``None``: asked here when needed).

    A row count (``count(*)``) is not recomputed when both sides are known: before from the plan's Delta-log
    rows, after from ``staged_rows`` (the ledger's staged rows per partition, counted in the staging
    table when each batch was written) and ``diffs`` (the ledger's diff rows by partition), as
    :meth:`~backfill_lib.plan.kinds.StrategyKind.rows_after` counts them. Otherwise both tables are scanned, except
    without a session (``spark`` ``None``: the report read from the ledger's files beside a running run), where
    only the row counts known so far are given and every other value is ``None``.
    """
    planned = plan_from_summary(plan)
    before_rows = plan.get("current_rows") or {}
    keys = [p.key for p in planned.partitions]
    kind = kind_for(planned.strategy, planned.request.publish_mode)
    if _is_row_count(metric) and keys and staged_rows is not None:
        after_rows = {k: kind.rows_after(planned, before_rows.get(k), staged_rows.get(k), (diffs or {}).get(k))
                      for k in keys}
        if spark is None or all(before_rows.get(k) is not None and after_rows[k] is not None for k in keys):
            return tuple(MetricPoint(k, before_rows.get(k), after_rows[k]) for k in sorted(keys, key=key_order))
    if spark is None:
        return tuple(MetricPoint(k, None, None) for k in sorted(keys, key=key_order))
    # in the run's zone, as the run computed everything else (``report_metric`` may use one, e.g. hour(ts))
    with session_time_zone(spark, planned.session_time_zone, f"run {run['run_id']}"):
        before_df = spark.read.option("versionAsOf", run["target_version_seen"]).table(run["target_table"])
        if staging_there is None:
            staging_there = staging_exists(spark, run["staging_table"])
        after_df = read_staged_rows(spark, run["staging_table"]) if staging_there else None
        if plan["request"].get("range") and keys:
            pred = planned.predicate()
            before_df = before_df.where(pred)
            after_df = after_df.where(pred) if after_df is not None else None
        before = metric_per_partition(before_df, planned.partition_keys, metric)
        if after_df is not None:  # over the same rows as before: the range as publishing leaves it
            after_df = kind.as_published(planned, before_df, after_df)
        after = metric_per_partition(after_df, planned.partition_keys, metric) if after_df is not None else {}
    return tuple(MetricPoint(k, before.get(k), after.get(k)) for k in sorted(set(keys) | set(before) | set(after)))


#: the report's line when it was read from the ledger's files, without a Spark session
BESIDE_LINE = ("read from the ledger's files while another process held the home (no Spark session): status, checks "
               "and row counts as the ledger had them (a running run's events reach it up to 30 s late); other "
               "metrics and the tables were not read")


def zone_line(plan: dict) -> str:
    """The Spark session time zone a run (its stored plan summary) ran its SQL in, and that of its hour-partition
    writes; a plan stored before the zone was recorded ran in the settings' zone."""
    zone, written = plan.get("session_time_zone"), plan.get("write_time_zone")
    if not zone:
        return "Spark session time zone not recorded (the settings' time_zone)"
    line = f"Spark session time zone {zone} (the request's time_zone)"
    return line + (f"; hour partitions written in {written}" if written and written != zone else "")


@dataclass(frozen=True)
class RunOutcome:
    """What a run holds in memory when it writes its report, in the shapes the ledger returns them:
    ``run`` (its latest run record, ``plan_json`` included), ``rows`` (staged rows by partition key),
    ``checks`` (its latest validation's checks and the checks after it, in the order recorded) and
    ``diffs`` (by partition key: ``inserted``, ``deleted``, ``updated``, ``unchanged`` rows, and
    ``changed_columns``, ``abs_change`` and ``samples`` as the ledger's JSON text, see
    :func:`backfill_lib.validate.diff.diff_rows`; the JSON ones may be missing or ``None``)."""

    run: dict
    rows: dict[str, int | None]
    checks: tuple[Check, ...]
    diffs: dict[str, dict]


def ledger_outcome(ledger: Ledger | LedgerFiles, run_id: str) -> RunOutcome:
    """A run's :class:`RunOutcome` read back from the ledger, through Spark or from its files (``backfill
    report``, or a resumed run)."""
    return RunOutcome(ledger.run(run_id), ledger.partition_rows(run_id), ledger.recorded_checks(run_id),
                      {d["partition"]: d for d in ledger.diffs(run_id)})


def _change_feed_lines(run: dict, plan: dict, outcome: RunOutcome) -> tuple[str, ...]:
    """The line on the target's Change Data Feed (none for a plan stored before the ledger kept the flag)."""

    if "target_change_data_feed" not in plan:
        return ()
    planned = plan_from_summary(plan)
    if planned.target_change_data_feed and run.get("status") == "unchanged":
        return ("change data feed: on; nothing was published, so no change rows",)
    strategy = kind_for(planned.strategy, planned.request.publish_mode)
    return ("change data feed: " + strategy.change_feed(planned, outcome.rows, outcome.diffs),)


def _json(text: str | None, default):
    return default if not text else json.loads(text)


def column_changes(diffs: dict[str, dict]) -> tuple[ColumnChange, ...]:
    """Per value column (in the diff's column order), over every partition of ``diffs`` (ledger rows): the rows in
    which it changed and, for a numeric column, the exact sum of ``|after - before|``; ``None`` for a column
    that is not numeric or, in a partition where it changed, had no sum there (a decimal past 38 digits, see
    :class:`~backfill_lib.validate.diff.PartitionDiff`)."""
    rows: dict[str, int] = {}
    sums: dict[str, Decimal] = {}
    unknown: set[str] = set()
    for d in diffs.values():
        changed = _json(d.get("changed_columns"), {})
        for column, n in changed.items():
            rows[column] = rows.get(column, 0) + int(n)
        totals = _json(d.get("abs_change"), {})
        unknown |= {c for c, n in changed.items() if int(n) and c not in totals}
        with localcontext(prec=100):  # sums of up to 38 digits each, exact
            for column, total in totals.items():
                sums[column] = sums.get(column, Decimal(0)) + Decimal(total)
    return tuple(ColumnChange(c, n, None if c in unknown else sums.get(c)) for c, n in rows.items())


def sample_rows(diffs: dict[str, dict], limit: int = SAMPLE_LIMIT) -> tuple[SampleRow, ...]:
    """The ``limit`` samples of changed rows with the smallest key hash over every partition of ``diffs`` (ledger
    rows; each partition keeps a few, see :attr:`backfill_lib.validate.diff.PartitionDiff.samples`), in that
    order: deterministic for a run, and spread over its partitions."""
    every = [(x["h"], key, x) for key, d in diffs.items() for x in _json(d.get("samples"), [])]
    return tuple(SampleRow(key, x["change"], x["key"], x["before"], x["after"], h)
                 for h, key, x in sorted(every, key=lambda t: (t[0], t[1]))[:limit])


#: the report data of mart child runs written in this process, by run ID, for their parent's report
_mart_reports: dict[str, ReportData] = {}


def mart_sections(spark: SparkSession | None, settings: Settings, run: dict, plan: dict,
                  files: LedgerFiles | None = None) -> tuple[MartSection, ...]:
    """One :class:`MartSection` per downstream mart of a top-level run (request order), with the report data of
    its child run ``RUN_ID__mN``: none for a run that never published (its marts cannot have run), else read from
    the ledger (or the data the child wrote its own report with in this process, while the ledger still holds the
    same status and version for it)."""
    marts = plan["request"].get("marts") or []
    if not marts or plan.get("parent_run_id"):
        return ()
    children = [(m["table"], f"{run['run_id']}__m{i}") for i, m in enumerate(marts)]
    if run.get("published_version") is None:
        return tuple(MartSection(table, child) for table, child in children)
    ledger = files if spark is None else Ledger(spark, settings.ledger_schema)
    out = []
    for table, child in children:
        record = ledger.find_run(child)
        if record is None:
            out.append(MartSection(table, child))
            continue
        known = _mart_reports.get(child)
        if (known is None or known.status != record["status"]
                or known.published_version != record.get("published_version")):
            known = build_report_data(spark, ledger_outcome(ledger, child), files=files)
        out.append(MartSection(table, child, known))
    return tuple(out)


def _schema_lines(plan: dict) -> tuple[str, ...]:
    """A rebuild's schema changes (the plan's), as ``backfill plan`` lists them; nothing for other strategies."""
    if not kind_for(Strategy(plan["request"]["strategy"])).whole_table:
        return ()
    changes = tuple(SchemaChange(**c) for c in plan.get("schema_changes") or ())
    return (f"schema changes: {changes_line(changes, plan['request'].get('schema_changes') == 'allow')}",)


def build_report_data(spark: SparkSession | None, outcome: RunOutcome, docs: Path | None = None,
                      files: LedgerFiles | None = None) -> ReportData:
    """Everything the report shows, from a run's outcome (see :func:`ledger_outcome`) and, for a metric other
    than a known row count, the tables; without a session (``spark`` ``None``), from the ledger's ``files``
    alone (see :func:`write_run_report`)."""
    run = outcome.run
    plan = json.loads(run["plan_json"])
    request = plan["request"]
    metric = request.get("report_metric") or "count(*)"
    partitions, diffs, checks = outcome.rows, outcome.diffs, outcome.checks
    rows = partition_rows(plan, partitions, diffs, checks)  # the same lines as the run's summary.json
    total = plan["current"]
    held = pinned(run["staging_table"])  # a pinned run's rows, while the run that pinned them reports
    staging_there = held or (run["staging_table"] in files.staging_kept([run["staging_table"]]) if spark is None
                             else staging_exists(spark, run["staging_table"]))  # one catalog call for the line and the chart
    why = f"{plan['staging_reason']}; " if plan.get("staging_reason") else ""  # auto's choice, or a fall-back
    staging_line = (f"staged rows pinned in the run's Spark session ({why}no staging table; written once, by the publish)"
                    if staging_mode_of(run) == "pinned" else
                    f"staging table {run['staging_table']} ({why}"
                    f"{'kept' if staging_there else 'not there: never written, or dropped by cleanup'})")
    lines = (
        f"range {plan['range_start']} .. {plan['range_end_exclusive']} (end exclusive), {plan['partitions']} partitions "
        f"in {len(plan['batches'])} batches",
        f"target data in range before: {total['files']} files, {total['bytes']} bytes, {total['rows']} rows (Delta log)",
        "rows before and after: every row of each partition, in the target as the plan read it (Delta log) and as "
        "publishing leaves it",
        staging_line,
        zone_line(plan),
        f"sources read at (Delta version, pinned for the whole run): {_pins(plan.get('source_versions'))}",
    ) + _schema_lines(plan) + _change_feed_lines(run, plan, outcome) + ((f"message: {run['message']}",) if run.get("message") else ()) + (
        (BESIDE_LINE,) if spark is None else ())
    return ReportData(
        run_id=run["run_id"],
        request_name=run["request_name"],
        owner=run["owner"],
        reason=run["reason"],
        strategy=run["strategy"],
        target_table=run["target_table"],
        target_version_seen=run["target_version_seen"],
        status=run["status"],
        published_version=run.get("published_version"),
        # pyspark returns timestamps as naive datetimes in this process's local time
        rollback_until=(f"{run['rollback_until'].astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC (from the table's "
                        "retention settings)"
                        if run.get("rollback_until") else None),
        plan_lines=lines,
        partitions=tuple(rows),
        checks=checks,
        metric_name=metric,
        metric=metric_points(spark, run, plan, metric, partitions, staging_there, diffs),
        data_docs=docs,
        pre_publish_version=run.get("pre_publish_version"),
        columns=column_changes(diffs),
        samples=sample_rows(diffs),
        # no diff rows, but rows staged: the diff found no key to compare by (or the run stopped before it)
        diffed=bool(diffs) or not partitions,
    )


def outcome_document(settings: Settings, outcome: RunOutcome) -> RunDocument:
    """The run document (``backfill run --json``, ``runs/RUN_ID/summary.json``) of a run's outcome."""
    return run_document(outcome.run, outcome.rows, outcome.checks, outcome.diffs,
                        report_dir(settings, outcome.run["run_id"]))


def report_document(settings: Settings, run_id: str, outcome: RunOutcome) -> ReportDocument:
    """``backfill report RUN_ID --json``: the files and totals of the run document of ``outcome``."""
    run_doc = outcome_document(settings, outcome)
    return ReportDocument(run_id=run_id, status=run_doc.status, report=run_doc.report, totals=run_doc.totals,
                          checks_total=run_doc.checks.total, checks_failed=run_doc.checks.failed)


def report_dir(settings: Settings, run_id: str) -> Path:
    return settings.runs_dir / run_id


def write_run_report(spark: SparkSession | None, settings: Settings, run_id: str,
                     outcome: RunOutcome | None = None, files: LedgerFiles | None = None) -> tuple[Path, Path]:
    """Write ``report.html``, ``report.md`` and ``summary.json`` (:func:`outcome_document`) for ``run_id`` from
    ``outcome``, or from the ledger when it is ``None``; return the paths of the first two.

    With ``spark`` ``None`` everything is read from the ledger's ``files`` (the embedded default's home held by a
    running run): no table is read, so a metric other than a row count known from the ledger is left out, and
    the report says so. A report the run itself wrote while these files were read is newer: it is kept."""
    started = time.time()
    outcome = outcome or ledger_outcome(files if spark is None else Ledger(spark, settings.ledger_schema), run_id)
    folder = report_dir(settings, run_id)
    if spark is None and _written_since(folder, started):
        return folder / "report.html", folder / "report.md"
    write_summary(folder, outcome_document(settings, outcome))
    docs = Path("data_docs/index.html") if (folder / "data_docs" / "index.html").exists() else None
    data = build_report_data(spark, outcome, docs, files)
    plan = json.loads(outcome.run["plan_json"])
    if plan.get("parent_run_id"):
        _mart_reports[run_id] = data
    else:
        data = replace(data, marts=mart_sections(spark, settings, outcome.run, plan, files))
    return write_report(folder, data)


def _written_since(folder: Path, started: float) -> bool:
    """Whether a report in ``folder`` was written after ``started`` (seconds since the epoch)."""
    try:
        return (folder / "report.html").stat().st_mtime > started
    except OSError:
        return False


def report_run(spark: SparkSession, settings: Settings, ledger: Ledger, console, run_id: str,
               outcome: RunOutcome | None = None) -> RunOutcome | None:
    """Write run ``run_id``'s report from ``outcome`` (what the run holds in memory, in the ledger's shapes),
    else from ``ledger``, and say where on ``console``; return the outcome it was written from. A failure to write
    it is said on ``console`` (``None`` returned), never raised over the run's own outcome."""
    try:
        outcome = outcome or ledger_outcome(ledger, run_id)
        html, _ = write_run_report(spark, settings, run_id, outcome)
        Reporter(console, run_id).stage(f"report: {html}")
        return outcome
    except Exception as exc:  # the report must not mask the run's result
        Reporter(console, run_id).stage(f"report not written: {type(exc).__name__}: {exc}")
        return None
