"""The runner: a thin sequence of the stages, chosen by the run's status in the ledger.

``run`` → Run (staging) → Validate → Publish → Release (marts, monitor); each stage takes the frozen result of
the one before (:class:`~backfill_lib.run.stage.Staged`, :class:`~backfill_lib.validate.stage.Validated`,
:class:`~backfill_lib.publish.stage.Committed`) and nothing goes back: staging writes only the staging table,
validation only reads, publishing is the first and only write to the target, one commit, after every gate.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace

from pyspark.sql import SparkSession
from rich.console import Console

from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.errors import CancelledError, LeaseError, PublishError, RequestError, failure_message
from backfill_lib.core.faults import crash_point
from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.core.staging_mode import PINNED
from backfill_lib.core.table_state import TableState
from backfill_lib.intake.request import same_request
from backfill_lib.ledger import Ledger, run_record
from backfill_lib.plan.model import BackfillPlan, plan_from_summary
from backfill_lib.plan.prepare import mart_plan, prepare, utc_now
from backfill_lib.plan.source_pins import pin_sources
from backfill_lib.preflight import preflight, staging_preflight, with_staging_mode
from backfill_lib.publish.commit import committed_version
from backfill_lib.publish.release import Release
from backfill_lib.publish.results import FINISHED, RunResult
from backfill_lib.publish.rollback import Rollback
from backfill_lib.publish.stage import Publish
from backfill_lib.report.run_report import RunOutcome, ledger_outcome, write_run_report
from backfill_lib.run.leases import Leases, confirmed_refusal
from backfill_lib.run.outcomes import recording_the_end
from backfill_lib.run.source_check import check_source_schema
from backfill_lib.run.stage import Staged, stage
from backfill_lib.run.staging import releasing_pinned
from backfill_lib.strategies import implementation
from backfill_lib.validate.diff import diff_rows
from backfill_lib.validate.stage import Validate, Validated, nothing_changes

__all__ = ["Runner", "RunResult", "prepare", "check_source_schema", "failure_message", "FINISHED"]


class Runner:
    """Runs plans on one SparkSession, recording in one ledger, reporting through one console.

    :meth:`cancel` (safe from a signal handler or another thread) stops a run between batches.
    """

    def __init__(self, spark: SparkSession, settings: Settings, console: Console):
        self.spark = spark
        self.settings = settings
        self.console = console
        self.ledger = Ledger(spark, settings.ledger_schema)
        from backfill_lib.adapters.lineage import attach

        attach(self.ledger, settings.lineage)  # OpenLineage events of every run status, when configured
        self.cancelled = threading.Event()
        #: who approved publishing to protected tables (``--approve``); recorded in the ledger and commits
        self.approved_by: str | None = None
        #: ``--concurrent``: start even when another run holds an overlapping range (the fence still guards)
        self.concurrent = False
        self._mart_plans: dict[tuple[str, int], BackfillPlan] = {}
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
        ``validated``, staging and the report kept) for :meth:`publish_validated` to finish later.

        When the ledger already has ``plan.run_id`` (a run started again with the same run ID), the stored run
        is resumed instead (:meth:`resume`), so the same request and run ID never write twice.

        ``on_durable(run_id)`` is called once the run is in the ledger (its ``planned`` event committed), from the
        ledger's writer thread while the run goes on, or at once for a run the ledger already has; from then on
        ``resume`` finds the run. It is not called when that commit fails (the run then raises the ledger's error).

        Raises
        ------
        RequestError
            When the run ID exists in the ledger for a different request.
        LeaseError
            When another run that is not final holds an overlapping range of the target (see
            :mod:`backfill_lib.core.leases`; not with :attr:`concurrent`), before anything is staged; or when such
            a run recorded its plan first, at the same moment (this run is then recorded ``abandoned``; found
            while the first batch reads its source, before any batch writes).
        GateFailedError
            When an expectation or reconciliation fails; the target is untouched.
        PublishError, FenceError
            When publishing is refused or its post-publish check fails (the target is then restored).
        CancelledError
            When :meth:`cancel` was called; ``resume`` continues the run.
        AbandonedError
            When ``backfill abandon`` recorded the run abandoned while it ran (found right before the commit);
            nothing is published and the run stays ``abandoned``.
        BackfillError
            Any other intake or staging error; the run is recorded ``failed`` with the message.

        A plan whose ``--only`` selection holds no partition (:attr:`BackfillPlan.selection`) writes nothing: no
        table version, no ledger event; the result's status is ``nothing_selected``.
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
        plan = with_staging_mode(self.spark, self.settings, self.console, plan, until, implementation)
        leased = not self.concurrent and plan.parent_run_id is None  # a mart's child runs under its parent's lease
        mark = self.leases.take_turn(plan) if leased else None
        with self.ledger.durable():
            record = self.ledger.record_run(run_record(plan), "planned")
            if on_durable:
                self.ledger.when_committed(self.ledger.recorded(), lambda: on_durable(plan.run_id))
            # Confirmed while the first batch reads its source: each batch waits for it before its first write.
            confirmed = self.leases.confirming(plan, self.ledger.recorded(), mark) if leased else None
            return self._execute(plan, record, until, confirmed)

    def wait_for(self, run_id: str, table: str | None = None) -> str:
        """Wait until another run is final or its lease expired: :meth:`~backfill_lib.run.leases.Leases.wait_for`."""
        return self.leases.wait_for(run_id, table)

    def abandon(self, run_id: str, reason: str) -> str:
        """Release a run that is not final: :meth:`~backfill_lib.run.leases.Leases.abandon`."""
        return self.leases.abandon(run_id, reason)

    def resume(self, run_id: str, until: str | None = None) -> RunResult:
        """Continue ``run_id`` from the ledger with the plan it stored.

        Partitions already ``staged`` are skipped and the others staged again (each write replaces its
        partitions, so a batch caught mid-write is redone, never doubled). A run that had validated goes straight
        to publishing; one caught during publishing first looks for its own commit in the target's history (by
        run ID) and publishes only if there is none. A ``published`` or ``unchanged`` run writes nothing; a
        ``rolling_back`` one finishes its recorded rollback.

        Raises
        ------
        RunNotFoundError
            When the ledger has no such run.
        PublishError
            When the run was rolled back (start a new run instead), or its rollback cannot continue.
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
        if status == "abandoned":
            raise PublishError(f"run {run_id} was abandoned ({record['message']}); start a new run")
        if status == "rolling_back":  # a rollback or automatic restore was killed: finish it, as it would have
            self.rollbacks.continue_recorded(plan, record, reporter)
        reporter.stage(f"resuming from status {status}")
        self.leases.check_resume(plan, record, self.concurrent)
        with self.ledger.durable():
            return self._execute(plan, record, until)

    def _execute(self, plan: BackfillPlan, record: dict, until: str | None,
                 confirmed: Future | None = None) -> RunResult:
        """Run the stages left for ``plan`` with the session in the plan's time zone (the request's), whatever
        the settings' zone: a run, a resume, a mart's child run and the monitor analyse every SQL in it.
        Whatever stops the run leaves it in a final or resumable status. ``confirmed``: a fresh run's lease
        confirmation (:meth:`~backfill_lib.run.leases.Leases.confirming`), awaited before the first write and before any failure is recorded."""
        reporter = Reporter(self.console, plan.run_id)
        approved = self.approved_by or record.get("approved_by") or plan.approved_by
        plan = replace(plan, approved_by=approved) if approved else plan

        def ready() -> None:
            refused = confirmed_refusal(confirmed)
            if refused:
                raise LeaseError(f"{plan.request_path}: {refused}")

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
            result = self._publish_staged(plan, record, casts, until, reporter)
            if result is not None:
                return result
        suite = staging_preflight(self.spark, plan, implementation, self._mart_plan)
        record = self.ledger.record_run(record, "staging")
        rules = len(plan.request.reconciliation) + len(plan.request.metric_rules)
        with ThreadPoolExecutor(max(1, rules), thread_name_prefix=f"{plan.run_id}-source") as early:
            sources = self.validator.read_sources(plan, early)  # the rules' source sides, read while staging runs
            if implementation(plan).stages_in_write_zone and plan.write_time_zone != plan.session_time_zone:
                # Staging in the write zone is seen by every thread of the session: the rules' sources are read
                # in the run's zone first.
                wait([f for side in sources.values() for f in side])
            staged = stage(self.spark, self.settings, self.ledger, self.cancelled, plan, casts, reporter, resumed,
                           implementation, ready)
            ready()  # resolved already when a batch wrote; this guards a plan with no batch to write
            record = self.ledger.record_run(record, "staged")
            self._stop_if_cancelled(plan, "after staging")
            record = self.ledger.record_run(record, "validating")
            validated = self.validator.validate(staged, suite, reporter, sources)
        self.ledger.record_checks(plan.run_id, validated.checks)
        crash_point("after_validate")
        self.validator.gate(plan, record, validated)
        outcome = lambda rec: RunOutcome(rec, staged.rows, validated.checks, diff_rows(validated.diffs))  # noqa: E731
        if nothing_changes(staged, validated, implementation):
            self.ledger.record_partitions(plan.run_id, [{"partition": p.key, "status": "unchanged",
                                                         "rows": staged.rows.get(p.key)} for p in plan.partitions])
            record = self.ledger.record_run(record, "unchanged", message="staged rows equal the target's; no commit")
            reporter.stage(f"staged rows equal {plan.target_table}'s in every partition: nothing to publish")
            self.write_report(plan, outcome(record))
            return RunResult(plan, "unchanged", staged.rows, validated.checks)
        record = self.ledger.record_run(record, "validated")
        if until == "validate":
            reporter.stage(f"validated; review the report, then: backfill publish {plan.run_id}")
            self.write_report(plan, outcome(record))
            return RunResult(plan, "validated", staged.rows, validated.checks)
        self._stop_if_cancelled(plan, "after validation")
        return self._publish(staged, validated, record, reporter, resumed)

    def _publish_staged(self, plan: BackfillPlan, record: dict, casts, until: str | None,
                        reporter: Reporter) -> RunResult | None:
        """Publish what a run that validated (or was publishing) staged; ``None``: stage it again, as a new run
        would (a pinned run's rows did not outlive the process that pinned them, and it made no commit)."""
        if plan.staging_mode == PINNED:
            if committed_version(self.spark, plan.target_table, plan.commit_run_id, "publish",
                                 plan.target_version) is None:
                return None
            # computed again (the sources at their pinned versions) for the post-publish check of the commit found
            staged = stage(self.spark, self.settings, self.ledger, self.cancelled, plan, casts, reporter, True,
                           implementation)
            return self._publish(staged, None, record, reporter, resumed=True)
        staged = Staged(plan, casts, self.ledger.partition_rows(plan.run_id))
        if until == "validate":
            return RunResult(plan, "validated", staged.rows, self.ledger.recorded_checks(plan.run_id))
        return self._publish(staged, None, record, reporter, resumed=True)

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

    def _stop_if_cancelled(self, plan: BackfillPlan, at: str) -> None:
        if self.cancelled.is_set():
            raise CancelledError(f"run {plan.run_id} cancelled {at}; nothing published; "
                                 f"continue with: backfill resume {plan.run_id}")

    def _mart_plan(self, plan: BackfillPlan, index: int) -> BackfillPlan:
        """The child plan of mart ``index``, built once per runner: intake checks it before staging and the
        release runs the same plan."""
        key = (plan.run_id, index)
        if key not in self._mart_plans:
            self._mart_plans[key] = mart_plan(self.spark, self.settings, plan, index)
        return self._mart_plans[key]

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

    def rollback(self, run_id: str, by: str, why: str, force: bool = False) -> str:
        """Restore every table of published run ``run_id``: see :meth:`backfill_lib.publish.rollback.Rollback.rollback`."""
        return self.rollbacks.rollback(run_id, by, why, force, Reporter(self.console, run_id))

    def write_report(self, plan: BackfillPlan, outcome: RunOutcome | None = None) -> None:
        """Write the run's report from ``outcome`` (what the run holds in memory, in the ledger's shapes), else
        from the ledger; a failure to write it is logged, never raised over the run's own outcome."""
        try:
            outcome = outcome or ledger_outcome(self.ledger, plan.run_id)
            self.outcomes[plan.run_id] = outcome
            html, _ = write_run_report(self.spark, self.settings, plan.run_id, outcome)
            Reporter(self.console, plan.run_id).stage(f"report: {html}")
        except Exception as exc:  # the report must not mask the run's result
            Reporter(self.console, plan.run_id).stage(f"report not written: {type(exc).__name__}: {exc}")
