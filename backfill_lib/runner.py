"""The runner: executes a plan through run (staging), validate and publish, recording each step in the ledger.

The stages never go back: staging writes only the staging table; validation only reads; publishing is the
first and only write to the target, one commit, after every gate passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console

from backfill_lib.diff import diff_by_key
from backfill_lib.diff import evaluate as evaluate_diff
from backfill_lib.errors import BackfillError, GateFailedError, IntakeError, PublishError, RolledBackError
from backfill_lib.gates import row_count_checks
from backfill_lib.ledger import Check, Ledger, run_record
from backfill_lib.metrics import compare as compare_metrics
from backfill_lib.metrics import profile
from backfill_lib.partitions import range_predicate
from backfill_lib.plan import BackfillPlan, Batch, build_plan, plan_from_summary
from backfill_lib.progress import Reporter
from backfill_lib.publish import restore
from backfill_lib.reconcile import reconcile_batch
from backfill_lib.request import Strategy, load_request
from backfill_lib.run_report import write_run_report
from backfill_lib.schema_guard import ColumnCast, align
from backfill_lib.settings import Settings
from backfill_lib.sources import source_frame, source_input
from backfill_lib.staging import aligned, ensure_staging_table
from backfill_lib.strategies import strategy_for
from backfill_lib.tables import Column, TableState, read_table_state
from backfill_lib.validation import SuiteRunner, load_suite


@dataclass(frozen=True)
class RunResult:
    """What a run did: its final status, the versions it saw and wrote, and every check it made."""

    plan: BackfillPlan
    status: str
    rows: dict[str, int] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    pre_publish_version: int | None = None
    published_version: int | None = None

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success)


def _utc() -> datetime:
    return datetime.now(timezone.utc)


def prepare(spark: SparkSession, settings: Settings, request_path: str | Path) -> tuple[BackfillPlan, TableState]:
    """Intake and plan: load the request, read the target's state from Delta, build the frozen plan."""
    request = load_request(request_path)
    state = read_table_state(spark, request.target.table)
    bounds = request.bounds() or (None, None)
    plan = build_plan(
        request,
        state,
        request_path=str(request_path),
        staging_schema=settings.staging_schema,
        batch_size=settings.batch_size,
        now=_utc(),
        source_input=source_input(spark, source_frame(spark, request, *bounds)),
    )
    return plan, state


def check_source_schema(spark: SparkSession, plan: BackfillPlan, state: TableState) -> tuple[ColumnCast, ...]:
    """Intake against the live source: analyse the source SQL (no data read) and align it to the target.

    A rebuild may change the schema, so its source only has to provide the partition column (of the grain's
    type) and the keys; its columns are taken as they are.
    """
    bounds = (plan.batches[0].start, plan.batches[0].end) if plan.request.range else (None, None)
    schema = source_frame(spark, plan.request, *bounds).schema
    columns = tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields)
    where = str(plan.request.source.sql)
    if plan.strategy is not Strategy.REBUILD:
        return align(columns, state.columns, where, plan.request.keys)
    by_name = {c.name: c for c in columns}
    grain = plan.request.target.grain
    part = by_name.get(plan.partition_column)
    if part is None or part.type != grain.spark_type:
        found = "missing" if part is None else part.type.upper()
        raise IntakeError(f"{where}: partition column {plan.partition_column} is {found}, grain {grain.value} needs "
                          f"{grain.spark_type.upper()}")
    for key in plan.request.keys:
        if key not in by_name:
            raise IntakeError(f"{where}: key column {key} is missing from the source (field keys)")
    return tuple(ColumnCast(c.name, c.type, False) for c in columns)


def _nothing_changes(plan: BackfillPlan, casts, rows: dict[str, int], diffs) -> bool:
    """True when publishing would rewrite rows identical to the target's: every planned partition's diff has no
    insert, delete or update (or the partition is empty on both sides). Rebuilds always publish (a rebuild may
    change the schema or table properties), as do runs that add a column."""
    if plan.strategy is Strategy.REBUILD or any(c.new for c in casts):
        return False
    by_key = {d.partition: d for d in diffs}
    for p in plan.partitions:
        d = by_key.get(p.key)
        if d is None:
            if rows.get(p.key, 0) or p.current.rows:
                return False
        elif d.inserted or d.deleted or d.updated:
            return False
    return True


def _suite_parameters(plan: BackfillPlan, batch: Batch) -> dict[str, object]:
    parts = plan.partitions
    return {
        "run_id": plan.run_id,
        "range_start": parts[0].partition.start,
        "range_last": parts[-1].partition.start,
        "batch_start": batch.partitions[0].partition.start,
        "batch_last": batch.partitions[-1].partition.start,
    }


class Runner:
    """Runs plans on one SparkSession, recording in one ledger, reporting through one console."""

    def __init__(self, spark: SparkSession, settings: Settings, console: Console):
        self.spark = spark
        self.settings = settings
        self.console = console
        self.ledger = Ledger(spark, settings.ledger_schema)

    def run(self, plan: BackfillPlan, state: TableState, until: str | None = None) -> RunResult:
        """Stage, validate and publish ``plan``; with ``until="validate"`` stop after validation (status
        ``validated``, staging and the report kept) for :meth:`publish_validated` to finish later.

        Raises
        ------
        GateFailedError
            When an expectation or reconciliation fails; the target is untouched.
        PublishError, FenceError
            When publishing is refused or its post-publish check fails (the target is then restored).
        BackfillError
            Any other intake or staging error; the run is recorded ``failed`` with the message.
        """
        reporter = Reporter(self.console, plan.run_id)
        self.ledger.ensure()
        record = self.ledger.record_run(run_record(plan), "planned")
        try:
            casts = check_source_schema(self.spark, plan, state)
            suite = load_suite(plan.request.expectations) if plan.request.expectations else None
            record = self.ledger.record_run(record, "staging")
            rows = self._stage(plan, casts, reporter)
            record = self.ledger.record_run(record, "staged")
            validated, diffs = self._validate(plan, suite, reporter)
            checks = self._gate_row_counts(plan, rows) + validated
            self.ledger.record_checks(plan.run_id, checks)
            failures = [c for c in checks if not c.success]
            if failures:
                self._fail_gate(plan, record, failures)
            if _nothing_changes(plan, casts, rows, diffs):
                self.ledger.record_partitions(plan.run_id, [{"partition": p.key, "status": "unchanged", "rows": rows.get(p.key)}
                                                            for p in plan.partitions])
                self.ledger.record_run(record, "unchanged", message="staged rows equal the target's; no commit")
                reporter.stage(f"staged rows equal {plan.target_table}'s in every partition: nothing to publish")
                self.write_report(plan)
                return RunResult(plan, "unchanged", rows, tuple(checks))
            record = self.ledger.record_run(record, "validated")
            if until == "validate":
                reporter.stage(f"validated; review the report, then: backfill publish {plan.run_id}")
                self.write_report(plan)
                return RunResult(plan, "validated", rows, tuple(checks))
            return self._publish(plan, record, casts, rows, checks, reporter)
        except GateFailedError:
            self.write_report(plan)
            raise
        except RolledBackError:
            raise
        except BackfillError as exc:
            self.ledger.record_run(record, "failed", message=str(exc))
            raise

    def publish_validated(self, run_id: str) -> RunResult:
        """Publish a run stopped after validation, if its gates passed and the target's range has not changed.

        Raises
        ------
        PublishError
            When the run is not in status ``validated``.
        FenceError
            When a commit changed the run's partitions after the plan read them.
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        if record["status"] != "validated":
            raise PublishError(f"run {run_id} is {record['status']}; only a validated run can be published")
        plan = plan_from_summary(json.loads(record["plan_json"]))
        staged = tuple(Column(f.name, f.dataType.simpleString(), f.nullable)
                       for f in self.spark.table(plan.staging_table).schema.fields)
        if plan.strategy is Strategy.REBUILD:
            casts = tuple(ColumnCast(c.name, c.type, False) for c in staged)
        else:
            casts = align(staged, plan.target_columns, plan.staging_table, plan.request.keys)
        rows = {p["partition"]: p["rows"] for p in self.ledger.partitions(run_id)}
        checks = [Check(c["kind"], c["name"], c["success"], c["partition"], c["batch"], c["observed"], c["expected"],
                        c["message"]) for c in self.ledger.checks(run_id)]
        try:
            return self._publish(plan, record, casts, rows, checks, Reporter(self.console, run_id))
        except RolledBackError:
            raise
        except BackfillError as exc:
            self.ledger.record_run(record, "failed", message=str(exc))
            raise

    def _publish(self, plan: BackfillPlan, record: dict, casts, rows: dict[str, int], checks: list[Check],
                 reporter: Reporter) -> RunResult:
        strategy = strategy_for(plan.strategy)
        reporter.stage(f"publishing {len(plan.partitions)} partitions into {plan.target_table} ({strategy.name})")
        pre, version = strategy.publish(self.spark, plan, casts)
        record = self.ledger.record_run(record, "publishing", pre_publish_version=pre, published_version=version)
        post = strategy.verify(self.spark, plan, version)
        self.ledger.record_checks(plan.run_id, post)
        bad = [c for c in post if not c.success]
        if bad:
            restored = restore(self.spark, plan, plan.target_table, pre)
            message = f"post-publish check failed, restored version {pre} as version {restored}: {bad[0].describe()}"
            self.ledger.record_run(record, "rolled_back", message=message)
            raise RolledBackError(f"table {plan.target_table}: {message}")
        self.ledger.record_partitions(
            plan.run_id,
            [{"partition": p.key, "status": "published", "rows": rows.get(p.key), "ended_at": _utc()} for p in plan.partitions],
        )
        self.ledger.record_run(record, "published")
        reporter.stage(f"published {plan.target_table} version {version} (was {pre})")
        self.write_report(plan)
        return RunResult(plan, "published", rows, tuple(checks + post), pre, version)

    def _gate_row_counts(self, plan: BackfillPlan, rows: dict[str, int]) -> list[Check]:
        if not strategy_for(plan.strategy).replaces_partitions:
            return []
        current = {p.key: p.current.rows for p in plan.partitions}
        return row_count_checks(current, rows, plan.request.gates)

    def _stage(self, plan: BackfillPlan, casts: tuple[ColumnCast, ...], reporter: Reporter) -> dict[str, int]:
        strategy = strategy_for(plan.strategy)
        if plan.strategy is not Strategy.REBUILD:
            ensure_staging_table(self.spark, plan, tuple(Column(c.name, c.type) for c in casts))
        rows: dict[str, int] = {}
        reporter.start_partitions(len(plan.partitions), "staging")
        try:
            for batch in plan.batches:
                started = _utc()
                self.ledger.record_partitions(
                    plan.run_id,
                    [{"partition": k, "batch": batch.index, "status": "staging", "attempt": 1, "started_at": started} for k in batch.keys],
                )
                bounds = (batch.start, batch.end) if plan.request.range else (None, None)
                df = aligned(source_frame(self.spark, plan.request, *bounds), casts)
                try:
                    strategy.check_batch(plan, batch, df)
                    staged = strategy.stage(self.spark, plan, batch, df)
                except BackfillError as exc:
                    self.ledger.record_partitions(
                        plan.run_id,
                        [{"partition": k, "batch": batch.index, "status": "failed", "message": str(exc)} for k in batch.keys],
                    )
                    raise
                ended = _utc()
                self.ledger.record_partitions(
                    plan.run_id,
                    [
                        {"partition": k, "batch": batch.index, "status": "staged", "rows": n, "attempt": 1,
                         "started_at": started, "ended_at": ended}
                        for k, n in staged.items()
                    ],
                )
                rows.update(staged)
                reporter.advance(len(batch.keys), sum(staged.values()), f"staged batch {batch.index}")
        finally:
            reporter.stop_partitions()
        return rows

    def _validate(self, plan: BackfillPlan, suite, reporter: Reporter) -> list[Check]:
        results_dir = self.settings.runs_dir / plan.run_id
        runner = SuiteRunner(suite, plan.partition_column, results_dir) if suite else None
        whole = plan.strategy is Strategy.REBUILD
        checks: list[Check] = []
        diffs = []
        for batch in plan.batches:
            staged = self.spark.table(plan.staging_table)
            current = self.spark.read.option("versionAsOf", plan.target_version).table(plan.target_table)
            if not whole:
                staged = staged.where(plan.batch_predicate(batch))
                current = current.where(plan.batch_predicate(batch))
            if runner:
                checks += runner.validate(staged, _suite_parameters(plan, batch), batch.index)
            for rule in plan.request.reconciliation:
                checks += reconcile_batch(self.spark, plan, batch, rule, whole_table=whole)
            for rule in plan.request.metric_rules:
                checks += self._metric_rule(plan, batch, rule, staged, whole)
            batch_diffs = self._diff(plan, staged, current)
            diffs += batch_diffs.values()
            if plan.request.diff_gate is not None:
                checks += evaluate_diff(batch_diffs, plan.request.diff_gate, batch.index)
        self.ledger.record_diffs(plan.run_id, diffs)
        passed = sum(c.success for c in checks)
        reporter.stage(f"validated: {passed} of {len(checks)} checks passed")
        return checks, diffs

    def _metric_rule(self, plan: BackfillPlan, batch: Batch, rule, staged, whole: bool) -> list[Check]:
        source = self.spark.table(rule.source.table)
        if not whole:
            source = source.where(range_predicate(rule.source.partition_column, batch.start, batch.end))
        src = profile(source, plan.partition_keys.of(rule.source.partition_column), rule.metrics,
                      where=rule.source.table)
        stg = profile(staged, plan.partition_keys, rule.metrics, where=plan.staging_table)
        keys = sorted(set(src) | set(stg)) if whole else list(batch.keys)
        return compare_metrics(src, stg, rule.metrics, keys, rule.name, batch.index)

    def _diff(self, plan: BackfillPlan, staged, current) -> dict:
        """Staged rows against the target's rows by key; a patch compares only the keys it stages."""
        if plan.strategy is Strategy.PATCH and not plan.request.delete_missing:
            on = [current[k].eqNullSafe(staged[k]) for k in plan.request.keys]
            current = current.join(staged.select(*plan.request.keys), on, "left_semi")
        shared = [c for c in current.columns if c in staged.columns]
        if any(k not in shared for k in plan.request.keys):
            return {}  # a rebuild that renamed a key: nothing to compare by key
        corrected = plan.request.diff_gate.allowed_changed_columns if plan.request.diff_gate else ()
        return diff_by_key(staged.select(*shared), current.select(*shared), plan.request.keys, plan.partition_keys,
                           corrected_columns=corrected)

    def write_report(self, plan: BackfillPlan) -> None:
        """Write the run's report; a failure to write it is logged, never raised over the run's own outcome."""
        try:
            html, _ = write_run_report(self.spark, self.settings, plan.run_id)
            Reporter(self.console, plan.run_id).stage(f"report: {html}")
        except Exception as exc:  # the report must not mask the run's result
            Reporter(self.console, plan.run_id).stage(f"report not written: {type(exc).__name__}: {exc}")

    def _fail_gate(self, plan: BackfillPlan, record: dict, failures: list[Check]) -> None:
        by_partition: dict[str, list[Check]] = {}
        for c in failures:
            by_partition.setdefault(c.partition or f"batch {c.batch}", []).append(c)
        keys = {p.key for p in plan.partitions}
        self.ledger.record_partitions(
            plan.run_id,
            [
                {"partition": k, "status": "failed", "message": "; ".join(c.describe() for c in cs)}
                for k, cs in by_partition.items()
                if k in keys
            ],
        )
        message = f"{len(failures)} failed checks on {len(by_partition)} partitions; first: {failures[0].describe()}"
        self.ledger.record_run(record, "failed", message=message)
        raise GateFailedError(
            f"validation gate failed for {plan.target_table}, nothing published: {message}", failures=tuple(failures)
        )
