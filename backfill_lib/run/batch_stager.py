"""Staging a plan's batches: concurrently, retrying commit conflicts, resumable, cancellable between batches.

Each batch writes its rows into its own partition of the run's staging table (``replaceWhere`` on
``_backfill_batch = N`` and its partitions; see :mod:`backfill_lib.run.staging`), so a batch staged twice (a retry, a resume after a crash mid-write) replaces its rows and never appends. The ledger
records ``staging`` before the write and ``staged`` (with rows) after it; a resume skips batches whose
partitions are all ``staged``.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from typing import Callable

from pyspark.sql import SparkSession

from backfill_lib.adapters.pool import POOL
from backfill_lib.core.errors import BackfillError, CancelledError
from backfill_lib.core.faults import crash_point, maybe_conflict
from backfill_lib.core.progress import Reporter
from backfill_lib.core.retry import with_conflict_retry
from backfill_lib.core.settings import Settings
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan, Batch, Implementation
from backfill_lib.plan.source_query import source_frame
from backfill_lib.ledger import LINGER_SECONDS, Ledger
from backfill_lib.run.past import past_source_frame
from backfill_lib.run.staging import StagingTable, aligned, open_staging_table


def _utc() -> datetime:
    return datetime.now(timezone.utc)


def batch_label(plan: BackfillPlan, batch: Batch) -> str:
    """``batch 3 [2024-03-09 .. 2024-03-10] of db.events``: how messages name a batch and its partitions."""
    return f"batch {batch.index} [{batch.keys[0]} .. {batch.keys[-1]}] of {plan.target_table}"


class BatchStager:
    """Stages the batches of one plan; ``cancel`` (from a signal handler or another thread) stops it between
    batches."""

    def __init__(self, spark: SparkSession, settings: Settings, ledger: Ledger, cancelled: threading.Event,
                 implementation: Implementation, ready: Callable[[], None] = lambda: None):
        """``implementation`` gives the plan's strategy, which stages each batch. ``ready`` is called before each
        batch writes its first row (after its source is read and its rows counted) and raises to stop the run
        before anything is written: the runner's lease confirmation."""
        self.spark = spark
        self.settings = settings
        self.ledger = ledger
        self.cancelled = cancelled
        self.ready = ready
        self.implementation = implementation

    def stage(self, plan: BackfillPlan, casts: tuple[ColumnCast, ...], reporter: Reporter,
              done: dict[str, int]) -> dict[str, int]:
        """Stage every batch not already staged (``done``: staged rows by partition key, from the ledger).

        Batches run ``concurrency`` at a time (request, else settings); a ``depends_on_past`` plan's run one at a
        time in order, from the first unstaged one on (:mod:`backfill_lib.run.past`). Returns staged rows by
        partition key for the whole plan.

        Raises
        ------
        CancelledError
            When cancelled: batches in flight finish and are recorded; the others are left for ``resume``.
        BackfillError
            The first batch error (stray rows, duplicate keys, a conflict that did not clear); batches in flight
            finish first, none is started after it.
        """
        rows = {k: done[k] for p in plan.partitions if (k := p.key) in done}
        todo = [b for b in plan.batches if not all(k in done for k in b.keys)]
        if plan.request.depends_on_past and todo:
            # every batch from the first unstaged one on: a later batch read the earlier ones as staged
            todo = list(plan.batches[todo[0].index:])
        skipped = len(plan.partitions) - sum(len(b.keys) for b in todo)
        if skipped:
            reporter.stage(f"resuming: {skipped} partitions already staged, {len(todo)} batches to go")
        concurrency = max(1, min(plan.request.concurrency or self.settings.concurrency, len(todo) or 1))
        if plan.request.depends_on_past:  # batch N reads the staged batch N-1 (run.past)
            concurrency = 1
        # The run and its plan must be in the ledger before any row is staged (so resume can find the run): they
        # commit now, while the first batches read their sources, and each batch waits for them before writing.
        self.ledger.write_now()
        durable_at = self.ledger.recorded()
        staging = None if plan.strategy.whole_table else open_staging_table(self.spark, plan)  # a rebuild creates it
        reporter.start_partitions(len(plan.partitions), "staging", done=skipped, rows=sum(rows.values()))
        try:
            rows.update(self._run_all(plan, casts, reporter, todo, concurrency, staging, durable_at))
        finally:
            reporter.stop_partitions()
        if staging is not None:
            staging.gather()
        return rows

    def _run_all(self, plan, casts, reporter, todo: list[Batch], concurrency: int, staging: StagingTable | None,
                 durable_at: int) -> dict[str, int]:
        staged: dict[str, int] = {}
        finished_batches = 0
        error: BaseException | None = None
        pending = iter(todo)
        with ThreadPoolExecutor(concurrency, thread_name_prefix=f"{plan.run_id}-batch") as pool:
            running: set[Future] = set()
            while True:
                while error is None and not self.cancelled.is_set() and len(running) < concurrency:
                    batch = next(pending, None)
                    if batch is None:
                        break
                    running.add(pool.submit(self._stage_batch, plan, batch, casts, reporter, staging, durable_at))
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for f in finished:
                    try:
                        staged.update(f.result())
                        finished_batches += 1
                    except BaseException as exc:  # kept until in-flight batches end, then raised
                        error = error or exc
        if error is not None:
            raise error
        if self.cancelled.is_set() and finished_batches < len(todo):
            raise CancelledError(
                f"run {plan.run_id} cancelled after staging {finished_batches} of {len(todo)} remaining batches; "
                f"continue with: backfill resume {plan.run_id}"
            )
        return staged

    def _stage_batch(self, plan: BackfillPlan, batch: Batch, casts, reporter: Reporter, staging: StagingTable | None,
                     durable_at: int) -> dict[str, int]:
        with contextlib.suppress(Exception):  # no SparkContext on Spark Connect: run in the default pool
            sc = self.spark.sparkContext
            sc.setLocalProperty("spark.scheduler.pool", POOL)
            sc.setJobGroup(f"{plan.run_id}-batch-{batch.index}", f"{plan.run_id} {batch_label(plan, batch)}")
        strategy = self.implementation(plan)
        started = _utc()
        self._record(plan, batch, "staging", attempt=1, started_at=started)
        bounds = (batch.start, batch.end) if plan.request.range else (None, None)
        if plan.request.depends_on_past:  # the target's references read this run's staged earlier batches
            df = aligned(past_source_frame(self.spark, plan, batch), casts)
        else:
            df = aligned(source_frame(self.spark, plan.request, *bounds, versions=plan.pinned_versions), casts)
        label = batch_label(plan, batch)

        def before_write() -> None:
            self.ready()
            self.ledger.wait_committed(durable_at)
            crash_point("before_stage", batch.index)

        def write() -> dict[str, int]:
            maybe_conflict(batch.keys)
            return strategy.stage(self.spark, plan, batch, df, staging, before_write)

        def on_retry(attempt: int, exc: BaseException, delay: float) -> None:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self._record(plan, batch, "retrying", attempt=attempt + 1, message=f"commit conflict: {first}")
            reporter.stage(f"{label}: commit conflict, attempt {attempt + 1} in {delay:.1f} s")

        try:
            strategy.check_batch(plan, batch, df)
            staged = with_conflict_retry(
                write, what=f"staging {label}", attempts=self.settings.conflict_attempts,
                base_seconds=self.settings.retry_base_seconds, max_seconds=self.settings.retry_max_seconds,
                on_retry=on_retry,
            )
        except BackfillError as exc:
            self._record(plan, batch, "failed", message=str(exc))
            raise
        crash_point("after_stage", batch.index)
        ended = _utc()
        self.ledger.record_partitions(plan.run_id, [
            {"partition": k, "batch": batch.index, "status": "staged", "rows": n, "started_at": started,
             "ended_at": ended}
            for k, n in staged.items()
        ])
        if (ended - started).total_seconds() >= LINGER_SECONDS:
            self.ledger.write_now()  # committed now rather than at the next burst: staging it again would cost more
        reporter.advance(len(batch.keys), sum(staged.values()), f"staged {label}")
        return staged

    def _record(self, plan: BackfillPlan, batch: Batch, status: str, **fields) -> None:
        self.ledger.record_partitions(
            plan.run_id, [{"partition": k, "batch": batch.index, "status": status, **fields} for k in batch.keys]
        )
