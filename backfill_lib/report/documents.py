"""The machine-readable output of ``backfill ... --json`` and of ``runs/RUN_ID/summary.json``. Pure (no pyspark).

Every document is one JSON object with ``schema_version`` (:data:`SCHEMA_VERSION`) and ``kind`` (``plan``,
``run``, ``status``, ``history``, ``report`` or ``error``); the models below are its definition, and the JSON
Schema shipped in the wheel (``backfill_lib/schemas/backfill-output-v1.schema.json``) is generated from them.
Regenerate it after changing a model with::

    python -m backfill_lib.report.documents > backfill_lib/schemas/backfill-output-v1.schema.json

Versioning: adding a field (or a value of ``status``) keeps :data:`SCHEMA_VERSION`, so readers must ignore fields
they do not know; removing or renaming a field, or changing its type or meaning, bumps it (and the file name).

Times are ISO 8601 strings in UTC (``2026-12-02T04:05:06+00:00``); ranges are given both as the request writes
them (inclusive local dates ``start`` .. ``end_inclusive`` in ``time_zone``) and as the half-open bounds the run
uses (``start_bound`` <= partition < ``end_exclusive``). Row counts are ``null`` when unknown.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from backfill_lib.core.checks import Check
from backfill_lib.plan.explain import staging_table_of_any_run
from backfill_lib.plan.model import BackfillPlan, plan_from_summary
from backfill_lib.report.render import PartitionRow
from backfill_lib.plan.kinds import kind_for

#: bumped only by a removal, rename or change of meaning (module docstring)
SCHEMA_VERSION = 1
#: the schema's file inside the package, and its ``$id``
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / f"backfill-output-v{SCHEMA_VERSION}.schema.json"
SCHEMA_ID = f"https://delta-backfill.invalid/schemas/backfill-output-v{SCHEMA_VERSION}.schema.json"


class _Model(BaseModel):
    # the schema describes documents as printed, where every field is present (``null`` when unknown)
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class _Document(_Model):
    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Version of this schema (see the documentation, --json output).")


# --- plan ---------------------------------------------------------------------------------------------------------

class PlanRange(_Model):
    """The range: inclusive local dates as the request writes them, and the half-open bounds the run uses
    (both ``null`` for a whole-table rebuild without a range)."""

    start: str | None = Field(description="First day (inclusive), as the request writes it, local to time_zone.")
    end_inclusive: str | None = Field(description="Last day (inclusive), as the request writes it.")
    start_bound: str | None = Field(description="Half-open lower bound: first partition's start (inclusive).")
    end_exclusive: str | None = Field(description="Half-open upper bound: end of the last partition (exclusive).")
    time_zone: str = Field(description="The request's time zone (IANA), in which days and hours are local.")
    grain: str = Field(description="Partition grain: day, month or hour.")
    session_time_zone: str = Field(description="Spark session time zone every SQL of the run runs in.")
    write_time_zone: str = Field(description="Session time zone of the run's writes (UTC for hour partitions).")


class PlanTarget(_Model):
    table: str
    version: int = Field(description="The target version the plan read (the publish fence compares against it).")
    location: str
    partition_column: str
    partition_spec: list[str]
    change_data_feed: bool


class PlanPartition(_Model):
    """A partition the plan touches, with the target's current data in it (Delta log)."""

    key: str
    batch: int
    files: int
    bytes: int
    rows: int | None


class Totals(_Model):
    files: int
    bytes: int
    rows: int | None


class PlanBatch(_Model):
    index: int
    partitions: list[str]


class SourcePin(_Model):
    table: str
    version: int


class PlanDocument(_Document):
    """``backfill plan --json``: the dry run. Writes nothing; ``plan_id`` is not the ID a later run gets."""

    kind: Literal["plan"] = "plan"
    plan_id: str
    planned_at: str = Field(description="When the plan was built (UTC, ISO 8601).")
    request: str = Field(description="The request's name.")
    request_path: str
    owner: str
    reason: str
    target: PlanTarget
    strategy: str
    publish_mode: str
    strategy_description: str
    range: PlanRange
    where: str | None = Field(description="target.where as written, or null (every row of the range).")
    partitions: list[PlanPartition]
    totals: Totals
    batches: list[PlanBatch]
    publish_statement: str | None = Field(description="The publishing statement in full; null without partitions.")
    staging_table: str = Field(
        description="The staging table a run of this plan stages into (durable, or pinned with --until validate), "
                    "named with <run ID>: `backfill run` plans again under a run ID of its own.")
    staging: Literal["durable", "pinned"] = Field(
        description="Where staged rows wait for the publish commit: the staging table (durable) or the run's Spark "
                    "session (pinned; a run with --until validate, a rebuild, depends_on_past or Spark Connect "
                    "stages durably whatever was asked).")
    source_versions: list[SourcePin] | None = Field(
        description="Delta sources and the versions the run reads them at; null when not pinned yet.")
    marts: list[str] = Field(description="Downstream marts recomputed after the target publishes, in order.")


def plan_document(plan: BackfillPlan) -> PlanDocument:
    """The :class:`PlanDocument` of ``plan`` (what :func:`backfill_lib.plan.explain.explain` prints)."""
    from backfill_lib.intake.request import mart_order

    r = plan.request
    strategy = kind_for(r.strategy, r.publish_mode)
    parts = plan.partitions
    batch_of = {p.key: b.index for b in plan.batches for p in b.partitions}
    total = plan.total
    return PlanDocument(
        plan_id=plan.run_id,
        planned_at=utc_text(plan.planned_at),
        request=r.name,
        request_path=plan.request_path,
        owner=r.owner,
        reason=r.reason,
        target=PlanTarget(table=plan.target_table, version=plan.target_version, location=plan.target_location,
                          partition_column=plan.partition_column, partition_spec=list(plan.partition_spec),
                          change_data_feed=plan.target_change_data_feed),
        strategy=r.strategy.value,
        publish_mode=r.publish_mode.value,
        strategy_description=strategy.describe(plan),
        range=PlanRange(
            start=r.range.start.isoformat() if r.range else None,
            end_inclusive=r.range.end.isoformat() if r.range else None,
            start_bound=None if plan.range_start is None else str(plan.range_start),
            end_exclusive=None if plan.range_end is None else str(plan.range_end),
            time_zone=r.time_zone, grain=r.target.grain.value, session_time_zone=plan.session_time_zone,
            write_time_zone=plan.write_time_zone),
        where=None if plan.where is None else plan.where.text,
        partitions=[PlanPartition(key=p.key, batch=batch_of[p.key], files=p.current.files, bytes=p.current.bytes,
                                  rows=p.current.rows) for p in parts],
        totals=Totals(files=total.files, bytes=total.bytes, rows=total.rows),
        batches=[PlanBatch(index=b.index, partitions=list(b.keys)) for b in plan.batches],
        publish_statement=strategy.publish_statement(plan) if parts or strategy.whole_table else None,
        staging_table=staging_table_of_any_run(plan),
        staging=plan.staging_mode,
        source_versions=(None if plan.source_versions is None
                         else [SourcePin(table=s.table, version=s.version) for s in plan.source_versions]),
        marts=[m.table for m in mart_order(r.marts)],
    )


# --- run ----------------------------------------------------------------------------------------------------------

class Versions(_Model):
    target_seen: int | None = Field(description="The target version the plan read.")
    pre_publish: int | None = Field(description="The version publishing replaced (RESTORE target of a rollback).")
    published: int | None = Field(description="The version the run's commit made; null when not published.")


class RunPartition(_Model):
    """One partition: its rows before (Delta log, as planned) and after (as publishing leaves it), both over every
    row of the partition; the diff; the gate."""

    partition: str
    rows_before: int | None
    rows_after: int | None
    inserted: int | None
    deleted: int | None
    updated: int | None
    unchanged: int | None
    gate: Literal["passed", "failed", "not_validated"] = Field(
        description="failed when a failed check names the partition; not_validated while the run has recorded no "
                    "check (running, or stopped before validation)")


class RunTotals(_Model):
    partitions: int
    rows_before: int | None = Field(description="Sum of rows_before; null if any is unknown.")
    rows_after: int | None = Field(description="Sum of rows_after; null if any is unknown.")


class CheckItem(_Model):
    kind: str
    name: str
    success: bool
    partition: str | None
    batch: int | None
    observed: str | None
    expected: str | None
    message: str | None


class Checks(_Model):
    total: int
    passed: int
    failed: int
    items: list[CheckItem] = Field(description="Every check, failed ones first, each group in recorded order.")


class ReportFiles(_Model):
    html: str
    markdown: str
    summary: str = Field(description="runs/RUN_ID/summary.json: this run document as written with the report.")


class RunDocument(_Document):
    """``backfill run --json`` and ``runs/RUN_ID/summary.json``: a run as it stopped."""

    kind: Literal["run"] = "run"
    run_id: str
    status: str = Field(description="published, unchanged, validated, failed, rolled_back, ... (ledger status).")
    request: str
    owner: str | None
    reason: str | None
    strategy: str | None
    target_table: str | None
    staging_table: str | None = Field(description="The run's staging table; null for a pinned run (none).")
    staging: Literal["durable", "pinned"] = Field(
        description="Where the run's staged rows waited: its staging table (durable) or its Spark session (pinned).")
    versions: Versions
    rollback_until: str | None = Field(
        description="Until when (UTC, ISO 8601) RESTORE to versions.pre_publish stays possible; null if unknown.")
    approved_by: str | None
    message: str | None
    partitions: list[RunPartition]
    totals: RunTotals
    checks: Checks
    report: ReportFiles


def utc_text(value: datetime | str | None) -> str | None:
    """``value`` in the one time format of every document: ISO 8601 in UTC to the second
    (``2026-12-04T19:01:44+00:00``). A naive datetime (pyspark returns timestamps so) is this process's local
    time; a string is read as ISO 8601 (a plan's ``planned_at``). ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(timezone.utc).isoformat(timespec="seconds")


def partition_rows(plan_json: dict, rows: dict[str, int | None], diffs: dict[str, dict],
                   checks: tuple[Check, ...]) -> tuple[PartitionRow, ...]:
    """The report's partition lines, in key order: rows before and rows after over the same scope, every row of
    the partition (before: the plan's Delta-log rows; after: as publishing leaves it, asked of the strategy,
    :meth:`~backfill_lib.plan.kinds.StrategyKind.rows_after`, from ``rows``, the staged rows, and the
    diff), the diff counts and the gate (``failed`` when a failed check names the partition, ``not_validated``
    when ``checks`` is empty: the run has not validated)."""
    failed = {c.partition for c in checks if not c.success}
    before_rows = plan_json.get("current_rows", {})
    planned = plan_from_summary(plan_json)
    kind = kind_for(planned.strategy, planned.request.publish_mode)
    out = []
    for key in sorted(set(rows) | set(diffs) | set(before_rows)):
        d = diffs.get(key, {})
        after = kind.rows_after(planned, before_rows.get(key), rows.get(key), diffs.get(key))
        out.append(PartitionRow(key, before_rows.get(key), after, d.get("inserted"), d.get("deleted"),
                                d.get("updated"), d.get("unchanged"),
                                "failed" if key in failed else "passed" if checks else "not_validated"))
    return tuple(out)


def planned_partitions_of(run: dict) -> int | None:
    """How many partitions the plan of ``run`` (a ledger record with its ``plan_json``) covers, or ``None``."""
    return json.loads(run.get("plan_json") or "{}").get("partitions")


def staging_mode_of(run: dict) -> Literal["durable", "pinned"]:
    """Where ``run`` (a ledger record with its ``plan_json``) staged its rows: ``durable`` or ``pinned``; a run
    recorded before pinned staging existed, or with no plan, staged durably."""
    return json.loads(run.get("plan_json") or "{}").get("staging_mode") or "durable"


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(values)


def run_document(run: dict, rows: dict[str, int | None], checks: tuple[Check, ...], diffs: dict[str, dict],
                 folder: Path) -> RunDocument:
    """The :class:`RunDocument` of a run's outcome (``run``: its latest ledger record, ``plan_json`` included;
    the shapes of :class:`backfill_lib.report.run_report.RunOutcome`); ``folder`` is its report folder."""
    plan_json = json.loads(run["plan_json"])
    lines = partition_rows(plan_json, rows, diffs, checks)
    ordered = [c for c in checks if not c.success] + [c for c in checks if c.success]
    passed = sum(c.success for c in checks)
    return RunDocument(
        run_id=run["run_id"],
        status=run["status"],
        request=run["request_name"] or plan_json["request"]["name"],
        owner=run.get("owner"),
        reason=run.get("reason"),
        strategy=run.get("strategy"),
        target_table=run.get("target_table"),
        staging_table=(None if (mode := plan_json.get("staging_mode") or "durable") == "pinned"
                       else run.get("staging_table")),
        staging=mode,
        versions=Versions(target_seen=run.get("target_version_seen"), pre_publish=run.get("pre_publish_version"),
                          published=run.get("published_version")),
        rollback_until=utc_text(run.get("rollback_until")),
        approved_by=run.get("approved_by"),
        message=run.get("message"),
        partitions=[RunPartition(**asdict(r)) for r in lines],
        totals=RunTotals(partitions=len(lines), rows_before=_sum([r.rows_before for r in lines]),
                         rows_after=_sum([r.rows_after for r in lines])),
        checks=Checks(total=len(checks), passed=passed, failed=len(checks) - passed,
                      items=[CheckItem(**asdict(c)) for c in ordered]),
        report=ReportFiles(html=str(folder / "report.html"), markdown=str(folder / "report.md"),
                           summary=str(folder / SUMMARY_FILE)),
    )


#: the run document's file in the run's report folder
SUMMARY_FILE = "summary.json"


def write_summary(folder: Path, document: RunDocument) -> Path:
    """Write ``document`` as ``folder/summary.json`` (replacing it; written whole, then renamed into place, so a
    reader never sees half of it); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SUMMARY_FILE
    partial = folder / f".{SUMMARY_FILE}.partial"
    partial.write_text(to_json(document), encoding="utf-8")
    partial.replace(path)
    return path


# --- status, history, report, error -------------------------------------------------------------------------------

class RunListItem(_Model):
    run_id: str
    status: str
    request: str | None
    target_table: str | None
    owner: str | None
    published_version: int | None
    staging_kept: bool
    updated_at: str | None = Field(description="Time of the run's latest event (UTC).")


class PartitionStatus(_Model):
    partition: str
    batch: int | None
    status: str
    rows: int | None
    attempt: int | None
    started_at: str | None = Field(description="When the partition's latest attempt started (UTC, ISO 8601).")
    ended_at: str | None = Field(description="When it ended (UTC, ISO 8601); null while it runs.")
    message: str | None


class RunDetail(_Model):
    run_id: str
    status: str
    request: str | None
    target_table: str | None
    owner: str | None
    reason: str | None
    staging_table: str | None = Field(description="The run's staging table; null for a pinned run (none).")
    staging: Literal["durable", "pinned"] = Field(
        description="Where the run's staged rows waited: its staging table (durable) or its Spark session (pinned: "
                    "no staging table; a stopped run resumes by recomputing).")
    staging_kept: bool
    versions: Versions
    rollback_until: str | None
    approved_by: str | None
    message: str | None
    planned_partitions: int | None = Field(
        description="How many partitions the run's plan covers; null for a run recorded without its plan.")
    partitions: list[PartitionStatus] = Field(
        description="The partitions the run has recorded a step for so far, each with its latest step.")


class StatusDocument(_Document):
    """``backfill status --json``: the latest runs (``runs``), or one run (``run``); the other is null."""

    kind: Literal["status"] = "status"
    runs: list[RunListItem] | None
    run: RunDetail | None


class HistoryVersion(_Model):
    version: int
    committed: str = Field(description="Commit time (UTC, ISO 8601).")
    operation: str
    action: str = Field(description="publish, restore (automatic) or rollback.")
    run_id: str
    run_status: str | None
    strategy: str | None
    owner: str | None
    reason: str | None
    approved_by: str | None
    detail: str | None


class HistoryDocument(_Document):
    """``backfill history TABLE --json``: the table's versions written by backfills, newest first."""

    kind: Literal["history"] = "history"
    table: str
    versions: list[HistoryVersion]


def history_document(table: str, versions: list) -> HistoryDocument:
    """``backfill history --json`` of ``versions`` (:class:`~backfill_lib.publish.history.BackfillVersion`)."""
    return HistoryDocument(table=table, versions=[HistoryVersion(
        version=v.version, committed=utc_text(v.committed_at), operation=v.operation, action=v.action, run_id=v.run_id,
        run_status=v.status, strategy=v.strategy, owner=v.owner, reason=v.reason, approved_by=v.approved_by,
        detail=v.detail) for v in versions])


class ReportDocument(_Document):
    """``backfill report RUN_ID --json``: the files written and the run's totals (as in its run document)."""

    kind: Literal["report"] = "report"
    run_id: str
    status: str
    report: ReportFiles
    totals: RunTotals
    checks_total: int
    checks_failed: int


class ErrorDocument(_Document):
    """Printed instead of the command's document when it fails; ``exit_code`` is the process's exit code."""

    kind: Literal["error"] = "error"
    error_class: str = Field(description="BackfillError subclass (IntakeError, GateFailedError, ...), a click "
                                         "usage error (UsageError, NoSuchOption, ...) or the unexpected exception.")
    message: str
    exit_code: int
    run_id: str | None = Field(None, description="The run, when the ledger had it before the error.")


Document = Annotated[Union[PlanDocument, RunDocument, StatusDocument, HistoryDocument, ReportDocument, ErrorDocument],
                     Field(discriminator="kind")]


def to_json(document: BaseModel) -> str:
    """The document as printed and written: indented JSON, one trailing newline."""
    return json.dumps(document.model_dump(mode="json"), indent=2) + "\n"


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of every document, generated from the models."""
    schema = TypeAdapter(Document).json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": f"delta-backfill --json output, schema version {SCHEMA_VERSION}", **schema}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(schema_text())
