"""The runner: a thin sequence of the stages, chosen by the run's status in the ledger.

``run`` → Run (staging) → Validate → Publish → Release (marts, monitor); each stage takes the frozen result of
the one before (:class:`~backfill_lib.run.stage.Staged`, :class:`~backfill_lib.validate.stage.Validated`,
:class:`~backfill_lib.publish.stage.Committed`) and nothing goes back: staging writes only the staging table,
validation only reads, publishing is the first and only write to the target, one commit, after every gate.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from dataclasses import replace

from pyspark.sql import SparkSession
from rich.console import Console

from backfill_lib.adapters.gx_import import import_early
from backfill_lib.adapters.lineage import attach
from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.errors import PublishError, RequestError
from backfill_lib.core.faults import crash_point
from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.core.staging_mode import PINNED
from backfill_lib.core.table_state import TableState
from backfill_lib.intake.request import same_request
from backfill_lib.ledger import Ledger, run_record
from backfill_lib.plan.model import BackfillPlan, plan_from_summary
from backfill_lib.plan.prepare import MartPlans, utc_now
from backfill_lib.plan.prepare import prepare as plan_prepare
from backfill_lib.plan.source_pins import pin_sources
from backfill_lib.preflight import preflight, staging_preflight, with_staging_mode
from backfill_lib.publish.release import Release
from backfill_lib.publish.results import RunResult, resumed_result
from backfill_lib.publish.rollback import Rollback
from backfill_lib.publish.stage import Publish
from backfill_lib.report.run_report import RunOutcome, report_run
from backfill_lib.run.leases import Leases, lease_ready
from backfill_lib.run.outcomes import recording_the_end, stop_if_cancelled
from backfill_lib.run.stage import Staged, stage
from backfill_lib.run.staging import releasing_pinned
from backfill_lib.strategies import implementation
from backfill_lib.validate.diff import diff_rows
from backfill_lib.validate.stage import Validate, Validated, nothing_changes

__all__ = ["Runner", "RunResult", "prepare"]


def prepare(spark: SparkSession, settings: Settings, request_path, run_id: str | None = None):
    """:func:`backfill_lib.plan.prepare.prepare` (same arguments, result and errors) for a run that goes on to
    validate: GX's import starts beside it (:func:`~backfill_lib.adapters.gx_import.import_early`)."""
    import_early()
    return plan_prepare(spark, settings, request_path, run_id)


class Runner:
    """Runs plans on one SparkSession, recording in one ledger, reporting through one console; :meth:`cancel`
    (safe from a signal handler or another thread) stops a run between batches."""

    def __init__(self, spark: SparkSession, settings: Settings, console: Console):
        self.spark = spark
        self.settings = settings
        self.console = console
        self.ledger = Ledger(spark, settings.ledger_schema)
        attach(self.ledger, settings.lineage)  # OpenLineage events of every run status, when configured
        self.cancelled = threading.Event()
        #: who approved publishing to protected tables (``--approve``); recorded in the ledger and commits
        self.approved_by: str | None = None
        #: ``--concurrent``: start even when another run holds an overlapping range (the fence still guards)
        self.concurrent = False
        self._mart_plan = MartPlans(spark, settings)
        #: the outcome each run reported last, by run ID (``backfill run --json`` prints its document)
        self.outcomes: dict[str, RunOutcome] = {}
        self.validator = Validate(spark, settings, self.ledger, implementation)
        self.rollbacks = Rollback(spark, self.ledger, self.write_report)
        self.publisher = Publish(spark, settings, self.ledger, self.rollbacks, implementation, self.cancelled)
        self.leases = Leases(settings, self.ledger, console)
        self.releaser = Release(spark, self.ledger, self.rollbacks, self._mart_plan, lambda child: self.run(child),
                                implementation)

    def cancel(self) -> None:
        """Ask the run to stop: batches in flight finish, no new batch starts, the run ends ``cancelled``."""
        self.cancelled.set()

    def run(self, plan: BackfillPlan, state: TableState | None = None, until: str | None = None,
            on_durable=None) -> RunResult:
        """Stage, validate and publish ``plan``; with ``until="validate"`` stop after validation (status
        ``validated``, staging and the report kept) for :meth:`publish_validated` to finish later. A run ID the
        ledger has already is resumed (:meth:`resume`): the same request and run ID never write twice. A plan
        whose ``--only`` selection holds no partition writes nothing (status ``nothing_selected``).

        ``on_durable(run_id)`` is called once the run is in the ledger (its ``planned`` event committed; from the
        ledger's writer thread, or at once for a run the ledger has); from then on ``resume`` finds the run.

        Raises
        ------
        RequestError
            The run ID belongs to a different request.
        LeaseError
            Another run that is not final holds an overlapping range of the target (not with :attr:`concurrent`),
            found before anything is staged; or recorded its plan first at the same moment (this run is then
            recorded ``abandoned``, before any batch writes).
        GateFailedError
            An expectation or reconciliation failed; the target is untouched.
        PublishError, FenceError
            Publishing was refused, or its post-publish check failed (the target is then restored).
        CancelledError
            :meth:`cancel` was called; ``resume`` continues the run.
        AbandonedError
            ``backfill abandon`` released the run while it ran (found right before the commit); nothing published.
        BackfillError
            Any other intake or staging error; the run is recorded ``failed`` with the message.
        """
        if plan.selection is not None and not plan.partitions:
            return RunResult(plan, "nothing_selected")  # the CLI says so (empty_selection_message)
        self.ledger.ensure()
        # A run ID the plan minted cannot be in the ledger yet: only a given one is looked up.
        known = not plan.run_id_minted and self.ledger.has_run(plan.run_id)
        existing = self.ledger.find_run(plan.run_id) if known else None
        if existing is not None:
            if not same_request(json.loads(existing["plan_json"])["request"], plan.request):
                raise RequestError(f"{plan.request_path}: run ID {plan.run_id} already belongs to another request "
                                   f"({existing['request_name']}); choose a new run ID")
            if on_durable:
                on_durable(plan.run_id)
            return self.resume(plan.run_id, until=until)
        if plan.source_versions is None:  # a plan not from prepare (a mart's child run): its sources as of now
            plan = replace(plan, source_versions=pin_sources(self.spark, plan.request))
        plan = with_staging_mode(self.spark, self.settings, self.console, plan, until)
        leased = not self.concurrent and plan.parent_run_id is None  # a mart's child runs under its parent's lease
        mark = self.leases.take_turn(plan) if leased else None
        with self.ledger.durable():
            record = self.ledger.record_run(run_record(plan), "planned")
            if on_durable:
                self.ledger.when_committed(self.ledger.recorded(), lambda: on_durable(plan.run_id))
            # Confirmed while the first batch reads its source: each batch waits for it before its first write.
            confirmed = self.leases.confirming(plan, self.ledger.recorded(), mark) if leased else None
            return self._execute(plan, record, until, confirmed)

    def resume(self, run_id: str, until: str | None = None) -> RunResult:
        """Continue ``run_id`` from the ledger with the plan it stored: partitions already ``staged`` are skipped,
        the others staged again (a write replaces its partitions: a batch caught mid-write is redone, never
        doubled); a validated run goes straight to publishing, and one caught publishing looks for its own commit
        (by run ID) first. A ``published`` or ``unchanged`` run writes nothing; a ``rolling_back`` one finishes
        its recorded rollback first.

        Raises
        ------
        RunNotFoundError
            The ledger has no such run.
        PublishError
            The run was rolled back or abandoned (start a new run instead), or its rollback cannot continue.
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        plan = plan_from_summary(json.loads(record["plan_json"]))
        reporter = Reporter(self.console, run_id)
        done = resumed_result(self.ledger, plan, record, reporter)
        if done is not None:
            return done
        if record["status"] == "rolling_back":  # a rollback or automatic restore was killed: finish it first
            self.rollbacks.continue_recorded(plan, record, reporter)
        reporter.stage(f"resuming from status {record['status']}")
        self.leases.check_resume(plan, record, self.concurrent)
        with self.ledger.durable():
            return self._execute(plan, record, until)

    def _execute(self, plan: BackfillPlan, record: dict, until: str | None,
                 confirmed: Future | None = None) -> RunResult:
        """Run the stages left for ``plan`` in the plan's session time zone (the request's); whatever stops the run
        leaves it final or resumable. ``confirmed``: a fresh run's lease confirmation
        (:meth:`~backfill_lib.run.leases.Leases.confirming`), awaited before the first write and any failure."""
        reporter = Reporter(self.console, plan.run_id)
        approved = self.approved_by or record.get("approved_by") or plan.approved_by
        plan = replace(plan, approved_by=approved) if approved else plan
        ready = lease_ready(confirmed, plan)
        with session_time_zone(self.spark, plan.session_time_zone, f"run {plan.run_id}"), \
                releasing_pinned(plan.staging_table), \
                recording_the_end(self.ledger, plan, record, reporter, confirmed, lambda: self.write_report(plan)):
            return self._stages(plan, record, until, reporter, ready)

    def _stages(self, plan: BackfillPlan, record: dict, until: str | None, reporter: Reporter,
                ready=lambda: None) -> RunResult:
        # A run still "planned" has staged nothing, so it cannot have committed; any other may have (the events
        # after the plan are written behind), so publishing first looks for this run's commit.
        resumed = record["status"] != "planned"
        casts = preflight(self.spark, self.settings, plan, implementation, reporter)
        if record["status"] in ("validated", "publishing"):
            staged = self.publisher.restaged(plan, casts, reporter)  # None: a pinned run stages again
            if staged is not None and until == "validate" and plan.staging_mode != PINNED:
                return RunResult(plan, "validated", staged.rows, self.ledger.recorded_checks(plan.run_id))
            if staged is not None:
                return self._publish(staged, None, record, reporter, resumed=True)
        suite = staging_preflight(self.spark, plan, implementation, self._mart_plan)
        record = self.ledger.record_run(record, "staging")
        with self.validator.source_reads(plan) as sources:  # the rules' source sides, read while staging runs
            staged = stage(self.spark, self.settings, self.ledger, self.cancelled, plan, casts, reporter, resumed,
                           implementation, ready)
            ready()  # resolved already when a batch wrote; this guards a plan with no batch to write
            record = self.ledger.record_run(record, "staged")
            stop_if_cancelled(self.cancelled, plan, "after staging")
            record = self.ledger.record_run(record, "validating")
            validated = self.validator.validate(staged, suite, reporter, sources)
        self.ledger.record_checks(plan.run_id, validated.checks)
        crash_point("after_validate")
        self.validator.gate(plan, record, validated)
        outcome = lambda rec: RunOutcome(rec, staged.rows, validated.checks, diff_rows(validated.diffs))  # noqa: E731
        if nothing_changes(staged, validated, implementation):
            self.write_report(plan, outcome(record := self.validator.record_unchanged(staged, record, reporter)))
            return RunResult(plan, "unchanged", staged.rows, validated.checks)
        record = self.ledger.record_run(record, "validated")
        if until == "validate":
            reporter.stage(f"validated; review the report, then: backfill publish {plan.run_id}")
            self.write_report(plan, outcome(record))
            return RunResult(plan, "validated", staged.rows, validated.checks)
        stop_if_cancelled(self.cancelled, plan, "after validation")
        return self._publish(staged, validated, record, reporter, resumed)

    def _publish(self, staged: Staged, validated: Validated | None, record: dict, reporter: Reporter,
                 resumed: bool) -> RunResult:
        """Publish, then (a top-level run) release the marts and monitor; record the run ``published``."""
        plan = staged.plan
        committed = self.publisher.commit(staged, validated, record, reporter, resumed)
        marts, monitored = (), ()
        if plan.parent_run_id is None:
            marts, monitored = self.releaser.release(plan, reporter, committed.post)
        checks = committed.checks + committed.post + monitored
        record = self.publisher.finish(plan, committed.record, staged.rows, utc_now())
        reporter.stage(f"published {plan.target_table} version {committed.published_version} "
                       f"(was {committed.pre_publish_version})")
        self.write_report(plan, None if validated is None else
                          RunOutcome(record, staged.rows, checks, diff_rows(validated.diffs)))
        return RunResult(plan, "published", staged.rows, checks, committed.pre_publish_version,
                         committed.published_version, marts)

    def publish_validated(self, run_id: str) -> RunResult:
        """Publish a run stopped after validation, if its gates passed and the target's range has not changed.
        Raises :class:`PublishError` when the run is not ``validated`` (or ``publishing``: an interrupted
        publish), :class:`FenceError` when a commit changed the run's partitions after the plan read them."""
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        if record["status"] not in ("validated", "publishing"):
            raise PublishError(f"run {run_id} is {record['status']}; only a validated run can be published")
        return self.resume(run_id)

    def rollback(self, run_id: str, by: str, why: str, force: bool = False) -> str:
        """Restore every table of published run ``run_id``: see :meth:`backfill_lib.publish.rollback.Rollback.rollback`."""
        return self.rollbacks.rollback(run_id, by, why, force, Reporter(self.console, run_id))

    def write_report(self, plan: BackfillPlan, outcome: RunOutcome | None = None) -> None:
        """Write the run's report (:func:`~backfill_lib.report.run_report.report_run`; a failure is said, never
        raised) and keep the outcome it was written from for ``backfill run --json``."""
        try:
            self.validator.docs_built(plan.run_id)  # the report links them
        except Exception as exc:  # GX's own; the report must not mask the run's result
            Reporter(self.console, plan.run_id).stage(f"GX Data Docs not built: {type(exc).__name__}: {exc}")
        written = report_run(self.spark, self.settings, self.ledger, self.console, plan.run_id, outcome)
        if written is not None:
            self.outcomes[plan.run_id] = written
