"""The Publish stage: one commit on the target after every gate passed, then its post-publish check.

A resumed run (one a crash may have caught after its commit, whatever the ledger last heard) first looks for
its own commit by run ID in the target's history and commits only if there is none; Delta's idempotent-write
guard (``txnAppId``, ``txnVersion``) refuses a second one anyway.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import SparkSession

from backfill_lib.adapters.pool import in_pool
from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import (
    AbandonedError,
    CancelledError,
    FenceError,
    RolledBackError,
    SourceChangedError,
    failure_message,
    resumable_failure,
)
from backfill_lib.core.faults import crash_point
from backfill_lib.core.progress import Reporter
from backfill_lib.core.retry import with_conflict_retry
from backfill_lib.core.settings import Settings
from backfill_lib.core.staging_mode import PINNED
from backfill_lib.plan.model import BackfillPlan, Implementation
from backfill_lib.plan.source_changes import source_changes
from backfill_lib.plan.source_pins import describe_pins
from backfill_lib.publish.commit import committed_version, publish_commit
from backfill_lib.publish.safety import check_protected, check_rollback_ready, rollback_until
from backfill_lib.publish.rollback import Rollback
from backfill_lib.ledger import Ledger
from backfill_lib.run.stage import Staged, stage
from backfill_lib.validate.diff import diff_rows
from backfill_lib.validate.stage import Validated


@dataclass(frozen=True)
class Committed:
    """A run's commit on its target, checked: the ledger record after it, the version before and the version
    written, the checks made before publishing (sources), and the post-publish checks (all passed)."""

    record: dict
    pre_publish_version: int
    published_version: int
    checks: tuple[Check, ...]
    post: tuple[Check, ...]


def published_tables(plan: BackfillPlan) -> list[str]:
    """Every table ``plan`` publishes to: its target and its marts."""
    return [plan.target_table, *(m.table for m in plan.request.marts)]


class Publish:
    """Publishes validated runs on one session, recording in one ledger; a failed post-publish check is undone
    through ``rollback``."""

    def __init__(self, spark: SparkSession, settings: Settings, ledger: Ledger, rollback: Rollback,
                 implementation: Implementation, cancelled: threading.Event | None = None):
        """``implementation`` gives a plan's strategy, which writes the commit and checks it."""
        self.spark = spark
        self.implementation = implementation
        self.settings = settings
        self.ledger = ledger
        self.rollback = rollback
        #: the runner's cancel flag (``Runner.cancel``), checked once more right before the commit
        self.cancelled = cancelled

    def restaged(self, plan: BackfillPlan, casts, reporter: Reporter) -> Staged | None:
        """What a run that validated (or was publishing) staged, for publishing on resume: the staging table's
        rows; for a pinned run whose commit the target holds, its rows computed again (the sources at their pinned
        versions) for the post-publish check of that commit; ``None`` for a pinned run that made no commit: its
        rows did not outlive the process that pinned them, so it stages again, as a new run would."""
        if plan.staging_mode != PINNED:
            return Staged(plan, casts, self.ledger.partition_rows(plan.run_id))
        if committed_version(self.spark, plan.target_table, plan.commit_run_id, "publish", plan.target_version) is None:
            return None
        return stage(self.spark, self.settings, self.ledger, self.cancelled, plan, casts, reporter, True,
                     self.implementation)

    def commit(self, staged: Staged, validated: Validated | None, record: dict, reporter: Reporter,
               resumed: bool = True) -> Committed:
        """Publish ``staged`` once and check the commit. ``validated`` is this process's validation (``None`` on
        a resume of a validated run: the checks are the ledger's and the post-publish check reads staging itself).
        A commit made in this process is checked from what its write observed and the Delta log; one found by a
        resume is read back.

        Raises
        ------
        PublishError, FenceError, SourceChangedError
            When publishing is refused (protected table, rollback readiness, the fence, a changed source with
            ``on_source_change: refuse``); the run is recorded ``failed``, nothing is published.
        AbandonedError
            When the run was abandoned meanwhile (:meth:`check_not_stopped`); it stays ``abandoned``, nothing is
            published.
        CancelledError
            When the runner was cancelled meanwhile; nothing is published (the runner records ``cancelled``).
        RolledBackError
            When the post-publish check failed; the target was restored.
        """
        plan = staged.plan
        strategy = self.implementation(plan)
        checks = list(validated.checks) if validated else list(self.ledger.recorded_checks(plan.run_id))
        try:
            version, wrote = None, None
            if resumed:
                version = committed_version(self.spark, plan.target_table, plan.commit_run_id, "publish",
                                            plan.target_version)
            if version is None:
                check_protected(self.settings.protected_tables, published_tables(plan), plan.approved_by)
                # Not flushed before the commit: a resume finds this run's commit by run ID in the target's history
                # whatever the ledger last recorded, and Delta's idempotent-write guard (txnAppId, txnVersion)
                # refuses a second one. The event commits with the run's last ones.
                record = self.ledger.record_run(record, "publishing", approved_by=plan.approved_by)
                check_rollback_ready(self.spark, plan.target_table,
                                     {"the version this run was validated against": plan.target_version})
                checks += self.check_sources(plan, reporter)
                crash_point("before_publish")
                self.check_not_stopped(plan, record)
                reporter.stage(f"publishing {len(plan.partitions)} partitions into {plan.target_table} ({strategy.name})")
                if plan.target_change_data_feed:
                    reporter.stage("change data feed: " + strategy.change_feed(
                        plan, staged.rows, None if validated is None else diff_rows(validated.diffs)))
                try:
                    _, version, wrote = with_conflict_retry(
                        lambda: self._publish_in_write_zone(strategy, staged),
                        what=f"publishing {len(plan.partitions)} partitions [{plan.partitions[0].key} .. "
                             f"{plan.partitions[-1].key}] of {plan.target_table}",
                        attempts=self.settings.conflict_attempts, base_seconds=self.settings.retry_base_seconds,
                        max_seconds=self.settings.retry_max_seconds,
                        on_retry=lambda n, exc, delay: reporter.stage(f"publish: commit conflict, attempt {n + 1} in {delay:.1f} s"),
                    )
                except FenceError:
                    # Another process running this run ID (the same run started twice, or resumed while it still
                    # ran) may have committed since the look above: that commit is this run's, not a change.
                    version = committed_version(self.spark, plan.target_table, plan.commit_run_id, "publish",
                                                plan.target_version)
                    if version is None:
                        raise
                    reporter.stage(f"found this run's commit: {plan.target_table} version {version}")
                else:
                    crash_point("after_publish")
            else:
                reporter.stage(f"found this run's commit: {plan.target_table} version {version}")
            pre = version - 1  # the table as it was just before this run's commit, whoever committed before it
        except (AbandonedError, CancelledError):
            raise  # not a failure: the run stays abandoned, or the runner records it cancelled
        except Exception as exc:
            self.ledger.record_run(record, "failed", message=failure_message(exc), resumable=resumable_failure(exc))
            raise
        fingerprints = validated.fingerprints if validated else None
        # Two independent reads at once: the commit's retention horizon (history, properties) and the check.
        with ThreadPoolExecutor(1, thread_name_prefix=f"{plan.run_id}-retention") as pool:
            until = pool.submit(in_pool, self.spark, rollback_until, self.spark, plan.target_table, version)
            try:
                post = strategy.verify(self.spark, plan, version, fingerprints, wrote)
            except Exception as exc:  # the commit stands unchecked: recorded, then undone, never left as it is
                record = self.ledger.record_run(record, "publishing", pre_publish_version=pre,
                                                published_version=version, rollback_until=until.result())
                message = self.rollback.restore_all(
                    plan, [], f"post-publish check could not run: {failure_message(exc)}", reporter)
                raise RolledBackError(f"table {plan.target_table}: {message}") from exc
            record = self.ledger.record_run(record, "publishing", pre_publish_version=pre, published_version=version,
                                            rollback_until=until.result())
        self.ledger.record_checks(plan.run_id, post)
        bad = [c for c in post if not c.success]
        if bad:
            message = self.rollback.restore_all(plan, [], f"post-publish check failed: {bad[0].describe()}", reporter)
            raise RolledBackError(f"table {plan.target_table}: {message}")
        return Committed(record, pre, version, tuple(checks), tuple(post))

    def check_not_stopped(self, plan: BackfillPlan, record: dict) -> None:
        """Right before the commit: refuse when the run was cancelled in this process or abandoned by another
        (``backfill abandon`` while it ran: the ledger is read here because nothing else tells this process).
        One filtered read of the ledger's ``runs`` table, of this run's ``abandoned`` events; an abandon recorded
        after this read and before the commit lands is not seen (the commit then stands and the run records
        ``published`` after it).

        Raises
        ------
        CancelledError
            When :attr:`cancelled` is set; ``backfill resume`` continues the run.
        AbandonedError
            When the ledger holds an ``abandoned`` event of the run; it is recorded ``abandoned`` again, after
            this process's own queued events (``publishing``), so its latest status stays ``abandoned``.
        """
        if self.cancelled is not None and self.cancelled.is_set():
            raise CancelledError(f"run {plan.run_id} cancelled before its commit; nothing published; "
                                 f"continue with: backfill resume {plan.run_id}")
        abandoned = self.ledger.abandoned_event(plan.run_id)
        if abandoned is not None:
            message = abandoned["message"] or "abandoned"
            self.ledger.record_run(record, "abandoned", message=message)
            raise AbandonedError(f"run {plan.run_id} was abandoned while it ran ({message}); nothing published to "
                                 f"{plan.target_table}")

    def _publish_in_write_zone(self, strategy, staged: Staged):
        """The publishing commit (:func:`~backfill_lib.publish.commit.publish_commit`: the fence, the strategy's
        write, the version it made) in the plan's :attr:`~BackfillPlan.write_time_zone`: it writes rows already
        staged (no SQL of the request's is analysed during it), and Delta keeps each hour's own partition value
        only in a zone without repeated wall clocks."""
        plan = staged.plan
        with session_time_zone(self.spark, plan.write_time_zone, f"run {plan.run_id}"):
            return publish_commit(self.spark, plan, staged.casts, strategy.write)

    def check_sources(self, plan: BackfillPlan, reporter: Reporter) -> list[Check]:
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

    def finish(self, plan: BackfillPlan, record: dict, rows: dict[str, int], ended_at) -> dict:
        """Record every planned partition and the run ``published``; return the run's record."""
        self.ledger.record_partitions(
            plan.run_id,
            [{"partition": p.key, "status": "published", "rows": rows.get(p.key), "ended_at": ended_at}
             for p in plan.partitions],
        )
        return self.ledger.record_run(record, "published")
