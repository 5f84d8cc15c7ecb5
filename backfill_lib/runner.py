"""The runner: executes a plan through run (staging), validate and publish, recording each step in the ledger.

The stages never go back: staging writes only the staging table; validation only reads; publishing is the
first and only write to the target, one commit, after every gate passed.
"""

from __future__ import annotations

import contextlib
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from rich.console import Console

from backfill_lib.adapters.delta_log import live_constraints, read_table_state
from backfill_lib.adapters.pool import in_pool
from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import (
    MESSAGE_LIMIT,
    BackfillError,
    CancelledError,
    GateFailedError,
    IntakeError,
    PublishError,
    RequestError,
    RolledBackError,
    SourceChangedError,
    first_line,
    one_line,
)
from backfill_lib.core.faults import crash_point, monitor_failure
from backfill_lib.core.partitions import quote_ident, range_predicate
from backfill_lib.core.progress import Reporter
from backfill_lib.core.retry import with_conflict_retry
from backfill_lib.core.settings import Settings
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.request import BackfillRequest, Strategy, load_request, mart_order
from backfill_lib.intake.rule_checks import check_rules
from backfill_lib.intake.schema_guard import ColumnCast, align
from backfill_lib.intake.sources import source_frame, source_input
from backfill_lib.plan.model import BackfillPlan, Batch, build_plan, plan_from_summary
from backfill_lib.plan.source_pins import describe_pins, pin_sources, read_table, source_changes
from backfill_lib.publish.commit import committed_version, restore, restore_state
from backfill_lib.publish.release import check_protected, check_rollback_ready, rollback_until
from backfill_lib.report.run_report import RunOutcome, diff_rows, ledger_outcome, write_run_report
from backfill_lib.run.batch_stager import BatchStager
from backfill_lib.run.ledger import Ledger, run_record
from backfill_lib.run.staging import check_reserved_column, staged_rows
from backfill_lib.strategies import strategy_for
from backfill_lib.strategies.base import partition_fingerprints
from backfill_lib.validate.constraints import applicable, constraint_checks
from backfill_lib.validate.diff import diff_by_key
from backfill_lib.validate.diff import evaluate as evaluate_diff
from backfill_lib.validate.gates import row_count_checks
from backfill_lib.validate.key_audit import unique_key_checks
from backfill_lib.validate.metrics import compare as compare_metrics
from backfill_lib.validate.metrics import profile
from backfill_lib.validate.reconcile import reconcile_batch, source_metric
from backfill_lib.validate.suites import SuiteRunner, load_suite


@dataclass(frozen=True)
class RunResult:
    """What a run did: its final status, the versions it saw and wrote, and every check it made."""

    plan: BackfillPlan
    status: str
    rows: dict[str, int] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    pre_publish_version: int | None = None
    published_version: int | None = None
    #: the downstream marts' child runs, in the order they published
    marts: tuple["RunResult", ...] = ()

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success)


def failure_message(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """The one-line message recorded for a failed run: a :class:`BackfillError`'s first line, any other error's
    type and first line (``unexpected Py4JJavaError: ...``), at most ``limit`` characters."""
    text = str(exc) if isinstance(exc, BackfillError) else f"unexpected {type(exc).__name__}: {first_line(exc)}"
    return one_line(text, limit)


def _utc() -> datetime:
    return datetime.now(timezone.utc)


def prepare(
    spark: SparkSession, settings: Settings, request_path: str | Path, run_id: str | None = None
) -> tuple[BackfillPlan, TableState]:
    """Intake and plan: load the request, read the target's state from Delta, build the frozen plan (with
    ``run_id``, or a new one).

    The source SQL is analysed in the request's ``time_zone`` (the session's zone is switched for it and put
    back after), as every later stage runs it (:attr:`BackfillPlan.session_time_zone`).

    Raises
    ------
    IntakeError
        When the Spark session cannot take the request's ``time_zone``, naming both zones; nothing is written.
    """
    request = load_request(request_path)
    bounds = request.bounds() or (None, None)
    with session_time_zone(spark, request.time_zone, str(request_path)), \
            ThreadPoolExecutor(2, thread_name_prefix="prepare") as pool:  # two independent reads of metadata
        state_read = pool.submit(in_pool, spark, read_table_state, spark, request.target.table)
        inputs = pool.submit(in_pool, spark, _pinned_input, spark, request, bounds)
        state = state_read.result()
        pins, found = inputs.result()
    check_rules(spark, request, str(request_path))  # in `backfill plan` too: a bad rule never reaches staging
    plan = build_plan(
        request,
        state,
        request_path=str(request_path),
        staging_schema=settings.staging_schema,
        batch_size=settings.batch_size,
        batch_bytes=settings.batch_bytes,
        now=_utc(),
        source_input=found,
        run_id=run_id,
    )
    return replace(plan, source_versions=pins), state


def _pinned_input(spark: SparkSession, request, bounds) -> tuple:
    """Pin the request's Delta sources at their current versions, then size the source input at those versions."""
    pins = pin_sources(spark, request)
    versions = {s.table: s.version for s in pins}
    return pins, source_input(spark, source_frame(spark, request, *bounds, versions=versions))


def check_source_schema(spark: SparkSession, plan: BackfillPlan) -> tuple[ColumnCast, ...]:
    """Intake against the live source: analyse the source SQL (no data read), check every rule's tables, columns
    and expressions (:func:`~backfill_lib.intake.rule_checks.check_rules`), and align the source to the target.

    A rebuild may change the schema, so its source only has to provide the partition column (of the grain's
    type) and the keys; its columns are taken as they are.
    """
    bounds = (plan.batches[0].start, plan.batches[0].end) if plan.request.range else (None, None)
    frame = source_frame(spark, plan.request, *bounds, versions=plan.pinned_versions)
    schema = frame.schema
    check_rules(spark, plan.request, plan.request_path, frame)
    columns = tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields)
    where = str(plan.request.source.sql)
    if plan.strategy is not Strategy.REBUILD:
        check_reserved_column(plan.target_table, plan.target_columns, where, columns)
        return align(columns, plan.target_columns, where, plan.request.keys)
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


def _same_request(stored: dict, request: BackfillRequest) -> bool:
    """Whether ``stored`` (a request as the ledger's plan JSON holds it) is ``request``: compared as models, so a
    field added since with its default (``publish_mode``, ``on_source_change``) does not make a run's own request
    look like another one."""
    try:
        return BackfillRequest.model_validate(stored) == request
    except ValueError:  # pydantic's ValidationError: a stored field this version no longer knows
        return False


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


def _tables_of(plan: BackfillPlan) -> list[str]:
    """Every table ``plan`` publishes to: its target and its marts."""
    return [plan.target_table, *(m.table for m in plan.request.marts)]


def _suite_parameters(plan: BackfillPlan, batch: Batch) -> dict[str, object]:
    parts = plan.partitions
    return {
        "run_id": plan.run_id,
        "range_start": parts[0].partition.start,
        "range_last": parts[-1].partition.start,
        "batch_start": batch.partitions[0].partition.start,
        "batch_last": batch.partitions[-1].partition.start,
    }


def _validation_scope(plan: BackfillPlan) -> tuple[Batch, bool]:
    """What validation covers: every planned partition as one unit, and whether whole tables are compared (a
    rebuild) rather than the range."""
    return Batch(0, plan.partitions), plan.strategy is Strategy.REBUILD


def _metric_source(spark: SparkSession, plan: BackfillPlan, scope: Batch, rule, whole: bool) -> dict:
    """A metric rule's metrics of its source per partition over ``scope`` (the whole source when ``whole``); reads
    only the source, like :func:`~backfill_lib.validate.reconcile.source_metric`."""
    source = read_table(spark, plan, rule.source.table)  # at the version the run pinned
    if not whole:
        source = source.where(range_predicate(rule.source.partition_column, scope.start, scope.end))
    return profile(source, plan.partition_keys.of(rule.source.partition_column), rule.metrics, where=rule.source.table)


#: Run statuses after which nothing is left to do: resuming such a run writes nothing.
FINISHED = ("published", "unchanged")


def _rollback_step(table: str, run_id: str, restore_to: int, published_version: int) -> dict:
    """One RESTORE of a rollback plan (the ledger's ``rollback_plan``): ``table`` back to version
    ``restore_to``; ``run_id`` (the run, or its mart's child run) published it as ``published_version``."""
    return {"table": table, "run_id": run_id, "restore_to": int(restore_to), "published_version": int(published_version)}


class Runner:
    """Runs plans on one SparkSession, recording in one ledger, reporting through one console.

    :meth:`cancel` (safe from a signal handler or another thread) stops a run between batches.
    """

    def __init__(self, spark: SparkSession, settings: Settings, console: Console):
        self.spark = spark
        self.settings = settings
        self.console = console
        self.ledger = Ledger(spark, settings.ledger_schema)
        self.cancelled = threading.Event()
        #: who approved publishing to protected tables (``--approve``); recorded in the ledger and commits
        self.approved_by: str | None = None
        self._mart_plans: dict[tuple[str, int], BackfillPlan] = {}

    def cancel(self) -> None:
        """Ask the run to stop: batches in flight finish, no new batch starts, the run ends ``cancelled``."""
        self.cancelled.set()

    def run(self, plan: BackfillPlan, state: TableState | None = None, until: str | None = None,
            on_durable=None) -> RunResult:
        """Stage, validate and publish ``plan``; with ``until="validate"`` stop after validation (status
        ``validated``, staging and the report kept) for :meth:`publish_validated` to finish later.

        When the ledger already has ``plan.run_id`` (a run started again with the same run ID), the stored run
        is resumed instead (:meth:`resume`), so the same request and run ID never write twice.

        ``on_durable(run_id)`` is called once the run is in the ledger (its ``planned`` event committed), from the
        ledger's writer thread while the run goes on (the first commit overlaps reading the first batches'
        sources), or at once for a run the ledger already has; from then on ``resume`` finds the run. It is not
        called when that commit fails (the run then raises the ledger's error).

        Raises
        ------
        RequestError
            When the run ID exists in the ledger for a different request.
        GateFailedError
            When an expectation or reconciliation fails; the target is untouched.
        PublishError, FenceError
            When publishing is refused or its post-publish check fails (the target is then restored).
        CancelledError
            When :meth:`cancel` was called; ``resume`` continues the run.
        BackfillError
            Any other intake or staging error; the run is recorded ``failed`` with the message.
        """
        self.ledger.ensure()
        # A run ID the plan minted cannot be in the ledger yet: only a given one is looked up.
        known = not plan.run_id_minted and self.ledger.has_run(plan.run_id)
        existing = self.ledger.find_run(plan.run_id) if known else None
        if existing is not None:
            if not _same_request(json.loads(existing["plan_json"])["request"], plan.request):
                raise RequestError(f"{plan.request_path}: run ID {plan.run_id} already belongs to another request "
                                   f"({existing['request_name']}); choose a new run ID")
            if on_durable:
                on_durable(plan.run_id)
            return self.resume(plan.run_id, until=until)
        if plan.source_versions is None:  # a plan not from prepare (a mart's child run): its sources as of now
            plan = replace(plan, source_versions=pin_sources(self.spark, plan.request))
        with self._durable():
            record = self.ledger.record_run(run_record(plan), "planned")
            if on_durable:
                self.ledger.when_committed(self.ledger.recorded(), lambda: on_durable(plan.run_id))
            return self._execute(plan, record, until)

    @contextlib.contextmanager
    def _durable(self):
        """Every ledger event of the block is committed when it ends, however it ends (a ledger error does not
        replace the run's own)."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.ledger.flush()
            raise
        self.ledger.flush()

    def resume(self, run_id: str, until: str | None = None) -> RunResult:
        """Continue ``run_id`` from the ledger with the plan it stored.

        Partitions already ``staged`` are skipped and the others staged again (each write replaces its
        partitions, so a batch caught mid-write is redone, never doubled). A run that had validated goes straight
        to publishing; one caught during publishing first looks for its own commit in the target's history (by
        run ID) and publishes only if there is none. A ``published`` or ``unchanged`` run writes nothing.

        Raises
        ------
        RunNotFoundError
            When the ledger has no such run.
        PublishError
            When the run was rolled back (start a new run instead).
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        plan = plan_from_summary(json.loads(record["plan_json"]))
        status = record["status"]
        reporter = Reporter(self.console, run_id)
        if status in FINISHED:
            reporter.stage(f"run is already {status}; nothing to do")
            return RunResult(plan, status, self.ledger.partition_rows(run_id), self.ledger.recorded_checks(run_id),
                             record["pre_publish_version"], record["published_version"])
        if status == "rolled_back":
            raise PublishError(f"run {run_id} was rolled back ({record['message']}); start a new run")
        if status == "rolling_back":  # a rollback or automatic restore was killed: finish it, as it would have
            intent = json.loads(record["rollback_plan"])
            blockers = self._rollback_blockers(plan, intent)
            if blockers:
                raise PublishError(f"run {run_id} is rolling back, refused to continue: {'; '.join(blockers)}; "
                                   f"RESTORE would undo them too (backfill rollback {run_id} --force restores anyway)")
            reporter.stage(f"continuing the rollback recorded before: {record['message']}")
            with self._durable():
                message = self._finish_rollback(plan, record, intent, reporter)
            raise RolledBackError(f"run {run_id} rolled back: {message}")
        reporter.stage(f"resuming from status {status}")
        with self._durable():
            return self._execute(plan, record, until)

    def _execute(self, plan: BackfillPlan, record: dict, until: str | None) -> RunResult:
        """:meth:`_execute_in_zone` with the session in the plan's time zone (the request's), whatever the
        settings' zone: a run, a resume, a mart's child run and the monitor analyse every SQL in it."""
        with session_time_zone(self.spark, plan.session_time_zone, f"run {plan.run_id}"):
            return self._execute_in_zone(plan, record, until)

    def _execute_in_zone(self, plan: BackfillPlan, record: dict, until: str | None) -> RunResult:
        reporter = Reporter(self.console, plan.run_id)
        # A run still "planned" has staged nothing, so it cannot have committed; any other may have (the events
        # after the plan are written behind), so publishing first looks for this run's commit.
        resumed = record["status"] != "planned"
        approved = self.approved_by or record.get("approved_by") or plan.approved_by
        plan = replace(plan, approved_by=approved) if approved else plan
        try:
            check_protected(self.settings.protected_tables, _tables_of(plan), plan.approved_by)
            casts = check_source_schema(self.spark, plan)
            if record["status"] in ("validated", "publishing"):
                if until == "validate":
                    return RunResult(plan, "validated", self.ledger.partition_rows(plan.run_id),
                                     self.ledger.recorded_checks(plan.run_id))
                return self._publish(plan, record, casts, self.ledger.partition_rows(plan.run_id),
                                     list(self.ledger.recorded_checks(plan.run_id)), reporter, resumed=True)
            suite = load_suite(plan.request.expectations) if plan.request.expectations else None
            for i in range(len(plan.request.marts)):  # intake of every mart before anything is written
                check_source_schema(self.spark, self._mart_plan(plan, i))
            record = self.ledger.record_run(record, "staging")
            rules = len(plan.request.reconciliation) + len(plan.request.metric_rules)
            with ThreadPoolExecutor(max(1, rules), thread_name_prefix=f"{plan.run_id}-source") as early:
                sources = self._read_sources(plan, early)  # the rules' source sides, read while staging runs
                if plan.strategy is Strategy.REBUILD and plan.write_time_zone != plan.session_time_zone:
                    # A rebuild stages in the write zone (its staging table is partitioned like the target), which
                    # every thread of the session sees: the rules' sources are read in the run's zone first.
                    wait([f for side in sources.values() for f in side])
                stager = BatchStager(self.spark, self.settings, self.ledger, self.cancelled)
                done = self.ledger.staged_rows(plan.run_id) if resumed else {}  # a fresh run staged nothing yet
                rows = stager.stage(plan, casts, reporter, done)
                record = self.ledger.record_run(record, "staged")
                self._stop_if_cancelled(plan, "after staging")
                record = self.ledger.record_run(record, "validating")
                validated, diffs, fingerprints = self._validate(plan, suite, reporter, sources)
            checks = self._gate_row_counts(plan, rows) + validated
            self.ledger.record_checks(plan.run_id, checks)
            crash_point("after_validate")
            failures = [c for c in checks if not c.success]
            if failures:
                self._fail_gate(plan, record, failures)
            if _nothing_changes(plan, casts, rows, diffs):
                self.ledger.record_partitions(plan.run_id, [{"partition": p.key, "status": "unchanged", "rows": rows.get(p.key)}
                                                            for p in plan.partitions])
                record = self.ledger.record_run(record, "unchanged", message="staged rows equal the target's; no commit")
                reporter.stage(f"staged rows equal {plan.target_table}'s in every partition: nothing to publish")
                self.write_report(plan, RunOutcome(record, rows, tuple(checks), diff_rows(diffs)))
                return RunResult(plan, "unchanged", rows, tuple(checks))
            record = self.ledger.record_run(record, "validated")
            if until == "validate":
                reporter.stage(f"validated; review the report, then: backfill publish {plan.run_id}")
                self.write_report(plan, RunOutcome(record, rows, tuple(checks), diff_rows(diffs)))
                return RunResult(plan, "validated", rows, tuple(checks))
            self._stop_if_cancelled(plan, "after validation")
            return self._publish(plan, record, casts, rows, checks, reporter, diffs, fingerprints, resumed)
        except GateFailedError:
            self.write_report(plan)
            raise
        except RolledBackError:
            raise
        except CancelledError as exc:
            self.ledger.record_run(record, "cancelled", message=str(exc))
            reporter.stage(str(exc))
            raise
        except Exception as exc:  # a Spark or Python error too: the run never stays in a non-final status
            self.ledger.record_run(record, "failed", message=failure_message(exc))
            raise

    def _stop_if_cancelled(self, plan: BackfillPlan, where: str) -> None:
        if self.cancelled.is_set():
            raise CancelledError(f"run {plan.run_id} cancelled {where}; nothing published; "
                                 f"continue with: backfill resume {plan.run_id}")

    def publish_validated(self, run_id: str) -> RunResult:
        """Publish a run stopped after validation, if its gates passed and the target's range has not changed.

        Raises
        ------
        PublishError
            When the run is not in status ``validated`` (or ``publishing``, an interrupted publish).
        FenceError
            When a commit changed the run's partitions after the plan read them.
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        if record["status"] not in ("validated", "publishing"):
            raise PublishError(f"run {run_id} is {record['status']}; only a validated run can be published")
        return self.resume(run_id)

    def _publish(self, plan: BackfillPlan, record: dict, casts, rows: dict[str, int], checks: list[Check],
                 reporter: Reporter, diffs: list | None = None, fingerprints: dict | None = None,
                 resumed: bool = True) -> RunResult:
        """Publish once: a ``resumed`` run (one a crash may have caught after its commit, whatever the ledger
        last heard) first looks for its own commit by run ID, and commits only if there is none.
        A top-level run then releases its marts and monitors every table it published, rolling all of them back
        on any failure. ``diffs`` are this process's validation diffs (``None`` on a resume: the report then
        reads the ledger); ``fingerprints`` the staged rows' checksums validation computed (``None``: the
        post-publish check reads staging itself). A commit made in this process is checked from what its write
        observed and the Delta log; one found by a resume is read back."""
        strategy = strategy_for(plan.strategy, plan.request.publish_mode)
        try:
            version, wrote = None, None
            if resumed:
                version = committed_version(self.spark, plan.target_table, plan.commit_run_id, "publish", plan.target_version)
            if version is None:
                check_protected(self.settings.protected_tables, _tables_of(plan), plan.approved_by)
                # Not flushed before the commit: a resume finds this run's commit by run ID in the target's history
                # whatever the ledger last recorded, and Delta's idempotent-write guard (txnAppId, txnVersion)
                # refuses a second one. The event commits with the run's last ones.
                record = self.ledger.record_run(record, "publishing", approved_by=plan.approved_by)
                check_rollback_ready(self.spark, plan.target_table,
                                     {"the version this run was validated against": plan.target_version})
                checks = checks + self._check_sources(plan, reporter)
                crash_point("before_publish")
                reporter.stage(f"publishing {len(plan.partitions)} partitions into {plan.target_table} ({strategy.name})")
                if plan.target_change_data_feed:
                    reporter.stage("change data feed: " + strategy.change_feed(
                        plan, rows, None if diffs is None else diff_rows(diffs)))
                _, version, wrote = with_conflict_retry(
                    lambda: self._publish_commit(strategy, plan, casts),
                    what=f"publishing {len(plan.partitions)} partitions [{plan.partitions[0].key} .. "
                         f"{plan.partitions[-1].key}] of {plan.target_table}",
                    attempts=self.settings.conflict_attempts, base_seconds=self.settings.retry_base_seconds,
                    max_seconds=self.settings.retry_max_seconds,
                    on_retry=lambda n, exc, delay: reporter.stage(f"publish: commit conflict, attempt {n + 1} in {delay:.1f} s"),
                )
                crash_point("after_publish")
            else:
                reporter.stage(f"found this run's commit: {plan.target_table} version {version}")
            pre = version - 1  # the table as it was just before this run's commit, whoever committed before it
        except Exception as exc:
            self.ledger.record_run(record, "failed", message=failure_message(exc))
            raise
        # Two independent reads at once: the commit's retention horizon (history, properties) and the check.
        with ThreadPoolExecutor(1, thread_name_prefix=f"{plan.run_id}-retention") as pool:
            until = pool.submit(in_pool, self.spark, rollback_until, self.spark, plan.target_table, version)
            post = strategy.verify(self.spark, plan, version, fingerprints, wrote)
            record = self.ledger.record_run(record, "publishing", pre_publish_version=pre, published_version=version,
                                            rollback_until=until.result())
        self.ledger.record_checks(plan.run_id, post)
        bad = [c for c in post if not c.success]
        if bad:
            message = self._restore_all(plan, [], f"post-publish check failed: {bad[0].describe()}", reporter)
            raise RolledBackError(f"table {plan.target_table}: {message}")
        marts: tuple[RunResult, ...] = ()
        if plan.parent_run_id is None:
            marts, monitored = self._release(plan, record, reporter, post)
            post = post + monitored
        self.ledger.record_partitions(
            plan.run_id,
            [{"partition": p.key, "status": "published", "rows": rows.get(p.key), "ended_at": _utc()} for p in plan.partitions],
        )
        record = self.ledger.record_run(record, "published")
        reporter.stage(f"published {plan.target_table} version {version} (was {pre})")
        self.write_report(plan, None if diffs is None else RunOutcome(record, rows, tuple(checks + post), diff_rows(diffs)))
        return RunResult(plan, "published", rows, tuple(checks + post), pre, version, marts)

    def _publish_commit(self, strategy, plan: BackfillPlan, casts):
        """``strategy.publish`` in the plan's :attr:`~BackfillPlan.write_time_zone`: it writes rows already
        staged (no SQL of the request's is analysed during it), and Delta keeps each hour's own partition value
        only in a zone without repeated wall clocks."""
        with session_time_zone(self.spark, plan.write_time_zone, f"run {plan.run_id}"):
            return strategy.publish(self.spark, plan, casts)

    def _check_sources(self, plan: BackfillPlan, reporter: Reporter) -> list[Check]:
        """Right before publishing: whether a pinned source changed in the range since the run read it (checks
        ``source_snapshot``, recorded). A change is reported (the pinned, reconciled rows are published) or, with
        ``on_source_change: refuse``, refused.

        Raises
        ------
        SourceChangedError
            With ``on_source_change: refuse``, when a source changed; nothing is published.
        """
        checks = source_changes(self.spark, plan)
        self.ledger.record_checks(plan.run_id, checks)
        changed = [c for c in checks if not c.success]
        if not changed:
            if checks:
                reporter.stage(f"sources unchanged since the run read them: {describe_pins(plan.source_versions)}")
            return checks
        if plan.request.on_source_change == "refuse":
            more = f" (and {len(changed) - 1} more sources)" if len(changed) > 1 else ""
            raise SourceChangedError(f"publish of {plan.target_table} refused (on_source_change: refuse), nothing "
                                     f"published: {changed[0].message}{more}; start a new run to read the "
                                     "sources as they are now")
        reporter.stage(f"warning: {'; '.join(c.message for c in changed)}; publishing the rows read at the pinned "
                       "versions (on_source_change: report)")
        return checks

    def _mart_plan(self, plan: BackfillPlan, index: int) -> BackfillPlan:
        """The child plan that recomputes mart ``index`` (request order) for the partitions covering the range.
        Built once per runner: intake checks it before staging and the release runs the same plan."""
        key = (plan.run_id, index)
        if key not in self._mart_plans:
            self._mart_plans[key] = self._build_mart_plan(plan, index)
        return self._mart_plans[key]

    def _build_mart_plan(self, plan: BackfillPlan, index: int) -> BackfillPlan:
        mart = plan.request.marts[index]
        request = plan.request.mart_request(mart)
        state = read_table_state(self.spark, mart.table)
        child = build_plan(
            request, state, request_path=plan.request_path, staging_schema=self.settings.staging_schema,
            batch_size=self.settings.batch_size, batch_bytes=self.settings.batch_bytes, now=_utc(),
            run_id=f"{plan.run_id}__m{index}",
            source_input=source_input(self.spark, source_frame(self.spark, request, *request.bounds())),
        )
        return replace(child, parent_run_id=plan.run_id, approved_by=plan.approved_by)

    def _release(self, plan: BackfillPlan, record: dict, reporter: Reporter,
                 post: list[Check]) -> tuple[tuple[RunResult, ...], list[Check]]:
        """Recompute the marts in dependency order (child runs ``RUN_ID__mN``), then monitor every published
        table; on any failure RESTORE every table this run published, newest first, and raise
        :class:`RolledBackError` (the run ends ``rolled_back``)."""
        order = {m.table: i for i, m in enumerate(plan.request.marts)}
        results: list[RunResult] = []
        try:
            for mart in mart_order(plan.request.marts):
                reporter.stage(f"mart {mart.table}: recomputing the partitions that cover the range")
                result = self.run(self._mart_plan(plan, order[mart.table]))
                results.append(result)
            monitored = self._monitor(plan, results, post)
            self.ledger.record_checks(plan.run_id, monitored)
            failed = [c for c in monitored if not c.success]
            if failed:
                raise PublishError(f"monitor: {failed[0].describe()}")
        except Exception as exc:  # a Spark error in a mart too: what this run published is restored
            message = self._restore_all(plan, results, f"release failed: {failure_message(exc)}", reporter)
            raise RolledBackError(f"run {plan.run_id} rolled back: {message}") from exc
        return tuple(results), monitored

    def _monitor(self, plan: BackfillPlan, marts: list[RunResult], post: list[Check]) -> list[Check]:
        """After everything published: every published table's suite holds on its published range (plus any
        failure injected by ``BACKFILL_FAIL_MONITOR``).

        Where a replacing strategy (recompute, rebuild) published rows that the post-publish check proved equal
        to the validated staged rows (row counts per partition and checksums), the suite already passed on those
        very rows and is not run again; a patch's MERGE result was never validated whole, so its suite runs on
        the published range."""
        checks: list[Check] = []
        published = [(plan, post)] + [(r.plan, [c for c in r.checks if c.kind == "post_publish"])
                                      for r in marts if r.status == "published"]
        for p, verified in published:
            injected = monitor_failure(p.target_table)
            if injected:
                checks.append(Check("monitor", "injected_failure", False, None, None, message=f"{p.target_table}: {injected}"))
            if not p.request.expectations:
                continue
            if strategy_for(p.strategy).replaces_partitions and verified and all(c.success for c in verified):
                checks.append(Check("monitor", f"{p.target_table}: suite {Path(p.request.expectations).name}", True,
                                    message="published rows equal the validated staged rows (post-publish row counts "
                                            "and checksums), on which the suite passed"))
                continue
            runner = SuiteRunner(load_suite(p.request.expectations), p.partition_keys)
            df = self.spark.table(p.target_table)
            df = df.where(p.predicate()) if p.request.range else df
            for c in runner.validate(df, _suite_parameters(p, Batch(0, p.partitions))):
                checks.append(replace(c, kind="monitor", name=f"{p.target_table}: {c.name}"))
        return checks

    def _restore_all(self, plan: BackfillPlan, marts: list[RunResult], why: str, reporter: Reporter,
                     action: str = "restore", **extra: str) -> str:
        """RESTORE the marts this run published (newest first), then the target, to their pre-publish versions;
        mark them all ``rolled_back``; return what was restored. The plan of RESTOREs is recorded first
        (:meth:`_record_rollback`), so a rerun after a crash finishes it (:meth:`_finish_rollback`)."""
        current = self.ledger.run(plan.run_id)
        steps = [_rollback_step(r.plan.target_table, r.plan.run_id, r.pre_publish_version, r.published_version)
                 for r in reversed(marts) if r.status == "published"]
        steps.append(_rollback_step(plan.target_table, plan.run_id, current["pre_publish_version"],
                                    current["published_version"]))
        intent = {"action": action, "why": why, "extra": extra, "tables": steps}
        return self._finish_rollback(plan, self._record_rollback(current, intent), intent, reporter)

    def _record_rollback(self, record: dict, intent: dict) -> dict:
        """Record ``intent`` (status ``rolling_back``, column ``rollback_plan``) and wait until it is committed:
        no RESTORE runs before the ledger knows the whole plan."""
        planned = ", ".join(f"{t['table']} to version {t['restore_to']}" for t in intent["tables"])
        record = self.ledger.record_run(record, "rolling_back", rollback_plan=json.dumps(intent),
                                        message=f"{intent['why']}; restoring {planned}")
        self.ledger.flush()
        return record

    def _finish_rollback(self, plan: BackfillPlan, record: dict, intent: dict, reporter: Reporter) -> str:
        """Carry out a recorded rollback plan, table by table in its order: a table this run already restored
        (its own RESTORE commit, found by run ID in the table's history) or already back at the content of the
        version to restore is done; any other gets one RESTORE. Marks the marts' child runs and then the run
        ``rolled_back``; returns what was restored."""
        action, extra = intent["action"], intent.get("extra") or {}
        done = []
        for i, step in enumerate(intent["tables"]):
            if i:
                crash_point("between_restores", i)
            table, to = step["table"], step["restore_to"]
            child = None if step["run_id"] == plan.run_id else self.ledger.run(step["run_id"])
            state, version, _ = restore_state(self.spark, table, plan.commit_run_id, step["published_version"], to)
            if state == "todo":
                step_plan = plan if child is None else plan_from_summary(json.loads(child["plan_json"]))
                version = restore(self.spark, step_plan, table, to, action, **extra)
                done.append(f"{table} to version {to}")
            elif state == "restored":
                done.append(f"{table} to version {to} (already restored as version {version})")
            else:
                done.append(f"{table} to version {to} (already at its content)")
            if child is not None and child["status"] != "rolled_back":
                self.ledger.record_run(child, "rolled_back", message=f"{intent['why']}; restored version {to}"
                                       + ("" if version is None else f" as {version}"))
        message = f"{intent['why']}; restored {', '.join(done)}"
        self.ledger.record_run(record, "rolled_back", message=message)
        reporter.stage(message)
        self.write_report(plan)
        return message

    def _rollback_blockers(self, plan: BackfillPlan, intent: dict) -> list[str]:
        """Tables of ``intent`` still to restore that have commits after the run's own, which a RESTORE would
        undo too (this rollback's own RESTOREs are not among them)."""
        blockers = []
        for step in intent["tables"]:
            state, _, later = restore_state(self.spark, step["table"], plan.commit_run_id, step["published_version"],
                                            step["restore_to"])
            if state == "todo" and later:
                blockers.append(f"table {step['table']} has versions {', '.join(map(str, later))} after this run's "
                                f"version {step['published_version']}")
        return blockers

    def rollback(self, run_id: str, by: str, why: str, force: bool = False) -> str:
        """Restore every table of published run ``run_id`` (marts newest first, then the target) to its
        pre-publish version, recording ``by`` and ``why`` in the ledger and in the RESTORE commits; return the
        line to show.

        Idempotent and resumable: the plan (tables and versions) is recorded (status ``rolling_back``) before the
        first RESTORE; a run found ``rolling_back`` (a rollback or automatic restore that was killed) continues
        its recorded plan, and a table this run already restored gets no second RESTORE. A run already
        ``rolled_back`` is left as it is (the line says so).

        Raises
        ------
        PublishError
            When the run is neither ``published`` nor rolling or rolled back, or (without ``force``) a table
            still to restore has commits after the run's, which a RESTORE would silently undo; the message names
            the table and those versions.
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        status = record["status"]
        if status == "rolled_back":
            return f"run {run_id} was already rolled back; nothing to restore ({record['message']})"
        if status not in ("published", "rolling_back"):
            raise PublishError(f"run {run_id} is {status}; only a published run can be rolled back")
        plan = plan_from_summary(json.loads(record["plan_json"]))
        if status == "rolling_back":
            intent = json.loads(record["rollback_plan"])
        else:
            steps = []
            order = {m.table: i for i, m in enumerate(plan.request.marts)}
            for mart in reversed(mart_order(plan.request.marts)):
                child = self.ledger.find_run(f"{run_id}__m{order[mart.table]}")
                if child and child["status"] == "published":
                    steps.append(_rollback_step(mart.table, child["run_id"], child["pre_publish_version"],
                                                child["published_version"]))
            steps.append(_rollback_step(plan.target_table, run_id, record["pre_publish_version"],
                                        record["published_version"]))
            intent = {"action": "rollback", "why": f"rolled back by {by}: {why}",
                      "extra": {"rolled_back_by": by, "rollback_reason": why}, "tables": steps}
        blockers = self._rollback_blockers(plan, intent)
        if blockers and not force:
            raise PublishError(f"rollback of run {run_id} refused: {'; '.join(blockers)}; RESTORE would undo them too "
                               "(rerun with --force to restore anyway)")
        reporter = Reporter(self.console, run_id)
        with self._durable(), session_time_zone(self.spark, plan.session_time_zone, f"run {run_id}"):
            if status == "rolling_back":
                reporter.stage(f"continuing the rollback recorded before: {record['message']}")
            else:
                record = self._record_rollback(record, intent)
            return f"run {run_id}: rolled back; {self._finish_rollback(plan, record, intent, reporter)}"

    def _gate_row_counts(self, plan: BackfillPlan, rows: dict[str, int]) -> list[Check]:
        if not strategy_for(plan.strategy).replaces_partitions:
            return []
        current = {p.key: p.current.rows for p in plan.partitions}
        return row_count_checks(current, rows, plan.request.gates)

    def _read_sources(self, plan: BackfillPlan, pool: ThreadPoolExecutor) -> dict[str, list[Future]]:
        """Start reading the source side of every reconciliation rule and metric rule over the whole range.

        They read only the sources, never staging, so they run in ``pool`` while the batches stage instead of
        lengthening validation (on the 2-core benchmark, validation took 2.8-3.4 s wall instead of about 4.2 s,
        and staging a little longer, since both share the cores)."""
        scope, whole = _validation_scope(plan)
        return {
            "reconciliation": [pool.submit(in_pool, self.spark, source_metric, self.spark, plan, scope, rule, whole)
                               for rule in plan.request.reconciliation],
            "metric_rules": [pool.submit(in_pool, self.spark, _metric_source, self.spark, plan, scope, rule, whole)
                             for rule in plan.request.metric_rules],
        }

    def _validate(self, plan: BackfillPlan, suite, reporter: Reporter,
                  sources: dict[str, list[Future]]) -> tuple[list[Check], list, dict | None]:
        """Audit the staged rows of the whole range at once (write-audit-publish): one GX validation, one
        aggregation per reconciliation or metric rule (against its source side, read by :meth:`_read_sources`),
        one diff, one ``groupBy`` of the declared keys (each key once, null-safe: :mod:`~backfill_lib.validate.key_audit`)
        and one aggregation of the target's CHECK and NOT NULL constraints (:mod:`~backfill_lib.validate.constraints`);
        every check still names its partition (or the keys at fault). Returns the checks, the diffs, and (for
        strategies that replace partitions) the staged rows' per-partition checksums, computed alongside for the
        post-publish check.

        Once over the range rather than per batch, because each validation costs a fixed few seconds (GX's
        checkpoint, one Spark job per rule) that batches would multiply.
        """
        results_dir = self.settings.runs_dir / plan.run_id
        runner = SuiteRunner(suite, plan.partition_keys, results_dir) if suite else None
        scope, whole = _validation_scope(plan)
        staged = staged_rows(self.spark, plan.staging_table)
        if not whole:
            staged = staged.where(plan.predicate())
        # Every audit reads the staged rows: one scan of the staging table's files, cached, serves them all.
        staged = staged.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return self._audit(plan, runner, scope, whole, staged, reporter, sources)
        finally:
            staged.unpersist()

    def _audit(self, plan: BackfillPlan, runner: SuiteRunner | None, scope: Batch, whole: bool, staged,
               reporter: Reporter, sources: dict[str, list[Future]]) -> tuple[list[Check], list, dict | None]:
        # Independent read-only audits all run at once (the FAIR pool shares the cluster between them): on small
        # ranges each is mostly fixed Spark latency, which overlaps; one waiting for a thread would only add its own.
        # + 4: diff, checksums, keys, constraints
        audit_count = bool(runner) + len(plan.request.reconciliation) + len(plan.request.metric_rules) + 4
        with ThreadPoolExecutor(audit_count, thread_name_prefix=f"{plan.run_id}-audit") as pool:
            def submit(fn, *args):
                return pool.submit(in_pool, self.spark, fn, *args)

            audits = []
            if runner:
                audits.append(submit(runner.validate, staged, _suite_parameters(plan, scope)))
            for rule, source in zip(plan.request.reconciliation, sources["reconciliation"]):
                audits.append(submit(lambda r, f: reconcile_batch(self.spark, plan, scope, r, whole, f.result(), staged),
                                     rule, source))
            for rule, source in zip(plan.request.metric_rules, sources["metric_rules"]):
                audits.append(submit(self._metric_rule, plan, scope, rule, staged, whole, source))
            audits.append(submit(unique_key_checks, staged, plan.request.keys, plan.staging_table))
            audits.append(submit(self._constraints, plan, staged))
            diffed = submit(self._diff, plan, staged, whole)
            summed = (submit(partition_fingerprints, staged, plan.partition_keys)
                      if strategy_for(plan.strategy).replaces_partitions else None)
            checks: list[Check] = [c for a in audits for c in a.result()]
            diffs = diffed.result()
            fingerprints = summed.result() if summed else None
        if plan.request.diff_gate is not None:
            checks += evaluate_diff(diffs, plan.request.diff_gate)
        batch_of = {k: b.index for b in plan.batches for k in b.keys}
        checks = [replace(c, batch=batch_of.get(c.partition)) for c in checks]
        self.ledger.record_diffs(plan.run_id, diffs.values())
        passed = sum(c.success for c in checks)
        reporter.stage(f"validated: {passed} of {len(checks)} checks passed")
        return checks, list(diffs.values()), fingerprints

    def _constraints(self, plan: BackfillPlan, staged) -> list[Check]:
        """The target's CHECK and NOT NULL constraints (as the target holds them now: those its publishing commit
        will meet) that apply to ``plan``'s strategy, evaluated on the staged rows."""
        constraints = live_constraints(self.spark, plan.target_table)
        return constraint_checks(staged, applicable(constraints, plan.strategy, plan.request.keys),
                                 plan.partition_keys, plan.staging_table)

    def _metric_rule(self, plan: BackfillPlan, batch: Batch, rule, staged, whole: bool, source: Future) -> list[Check]:
        """``rule``'s metrics of the staged rows against its source side (``source``, from :meth:`_read_sources`)."""
        stg = profile(staged, plan.partition_keys, rule.metrics, where=plan.staging_table)
        src = source.result()
        keys = sorted(set(src) | set(stg)) if whole else list(batch.keys)
        return compare_metrics(src, stg, rule.metrics, keys, rule.name, batch.index)

    def _diff(self, plan: BackfillPlan, staged, whole: bool) -> dict:
        """Staged rows against the target's rows as the plan read them (time travel to its version), by key, over
        the range (the whole table when ``whole``); a patch compares only the keys it stages."""
        current = self.spark.read.option("versionAsOf", plan.target_version).table(plan.target_table)
        if not whole:
            current = current.where(plan.predicate())
        if plan.strategy is Strategy.PATCH and not plan.request.delete_missing:
            keys = [quote_ident(k) for k in plan.request.keys]  # quoted: a name may hold a dot
            on = [current[k].eqNullSafe(staged[k]) for k in keys]
            current = current.join(staged.select(*keys), on, "left_semi")
        shared = [c for c in current.columns if c in staged.columns]
        if any(k not in shared for k in plan.request.keys):
            return {}  # a rebuild that renamed a key: nothing to compare by key
        corrected = plan.request.diff_gate.allowed_changed_columns if plan.request.diff_gate else ()
        shared = [quote_ident(c) for c in shared]
        return diff_by_key(staged.select(*shared), current.select(*shared), plan.request.keys, plan.partition_keys,
                           corrected_columns=corrected)

    def write_report(self, plan: BackfillPlan, outcome: RunOutcome | None = None) -> None:
        """Write the run's report from ``outcome`` (what the run holds in memory, in the ledger's shapes), else
        from the ledger; a failure to write it is logged, never raised over the run's own outcome."""
        try:
            outcome = outcome or ledger_outcome(self.ledger, plan.run_id)
            html, _ = write_run_report(self.spark, self.settings, plan.run_id, outcome)
            Reporter(self.console, plan.run_id).stage(f"report: {html}")
        except Exception as exc:  # the report must not mask the run's result
            Reporter(self.console, plan.run_id).stage(f"report not written: {type(exc).__name__}: {exc}")

    def _fail_gate(self, plan: BackfillPlan, record: dict, failures: list[Check]) -> None:
        by_partition: dict[str, list[Check]] = {}
        for c in failures:
            by_partition.setdefault(c.partition or ("the range" if c.batch is None else f"batch {c.batch}"), []).append(c)
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
