"""Leases: one backfill at a time per range of a table, taken, confirmed and given up through the ledger.

A run takes its turn before it stages (:meth:`Leases.take_turn`: refused when a run that is not final holds an
overlapping range), records its plan, and confirms its lease while its first batch reads the source
(:meth:`Leases.confirming`: two runs that passed their turns at once are ordered by the commits of their plans).
A resumed run whose lease lapsed or was released checks the range again (:meth:`Leases.check_resume`).
``backfill run --after`` waits for another run (:meth:`Leases.wait_for`) and ``backfill abandon`` releases one
(:meth:`Leases.abandon`). The rules themselves (what overlaps, what holds, who was first) are pure, in
:mod:`backfill_lib.core.leases`.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from rich.console import Console

from backfill_lib.core.errors import LeaseError, PublishError
from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.ledger import Ledger
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.plan.prepare import utc_now


class RunElsewhere(str):
    """A lease confirmation's refusal of a run whose run ID another process started at the same moment, and
    runs: the refused one records nothing more under that ID (an ``abandoned`` event would stop the other)."""


def confirmed_refusal(confirmed: Future | None, raise_failed_read: bool = True) -> str | None:
    """The refusal a lease confirmation (:meth:`Leases.confirming`) resolved to, waiting for it; ``None`` when
    it confirmed the lease or there is none. A failed ledger read is raised, or (``raise_failed_read=False``,
    where another error is on its way out already) taken as no refusal."""
    if confirmed is None or (not raise_failed_read and confirmed.exception() is not None):
        return None
    return confirmed.result()


def lease_ready(confirmed: Future | None, plan: BackfillPlan):
    """The check a run makes before its first write: raise the :class:`LeaseError` of a lease confirmation that
    refused (:func:`confirmed_refusal`, waiting for it), naming the request."""

    def ready() -> None:
        refused = confirmed_refusal(confirmed)
        if refused:
            raise LeaseError(f"{plan.request_path}: {refused}")

    return ready


class Leases:
    """The lease steps of the runs one runner starts, reading and recording through ``ledger``."""

    def __init__(self, settings: Settings, ledger: Ledger, console: Console):
        self.settings = settings
        self.ledger = ledger
        self.console = console

    def lease(self, plan: BackfillPlan, planned_seq: int):
        from backfill_lib.core.leases import in_instants, make_lease

        r = plan.request
        return make_lease(plan.run_id, plan.target_table, r.owner, "planned",
                          whole=r.strategy.whole_table or r.range is None, start=plan.range_start,
                          end=plan.range_end, time_zone=r.time_zone, planned_seq=planned_seq,
                          last_event_at=utc_now(), wall_clock=not in_instants(dict(r.target), plan.range_type),
                          location=plan.target_location)

    def wait_for(self, run_id: str, table: str | None = None) -> str:
        """Wait until ``run_id`` is final or its lease expired (``--after``; checked every
        ``settings.lease_poll_seconds``, :func:`~backfill_lib.core.leases.wait_is_over`), before the caller plans:
        a plan made earlier would meet the fence once that run publishes. Returns the run's status then.

        ``run_id`` may be a run of another table than ``table`` (the caller's target, when given): the wait then
        orders the caller after it and says so once (:func:`~backfill_lib.core.leases.after_note`).

        Raises
        ------
        RunNotFoundError
            When the ledger has no such run.
        """
        import time

        from backfill_lib.core.leases import after_note, wait_is_over

        self.ledger.ensure()
        said = None
        other = self.ledger.run(run_id)
        note = after_note(run_id, other["target_table"] or "", table) if table else None
        if note:
            Reporter(self.console, run_id).stage(note)
        while True:
            held = [lease for lease in self.ledger.leases(other["target_table"] or "") if lease.run_id == run_id]
            if wait_is_over(other["status"], held[0] if held else None, utc_now(), self.settings.lease_hours):
                return self.ledger.run(run_id)["status"]  # read again: the two reads above may straddle an event
            if other["status"] != said:
                Reporter(self.console, run_id).stage(f"waiting for run {run_id} ({other['status']}) to be final")
                said = other["status"]
            time.sleep(self.settings.lease_poll_seconds)
            other = self.ledger.run(run_id)

    def take_turn(self, plan: BackfillPlan) -> tuple[int, int] | None:
        """Refuse ``plan`` if another run holds an overlapping range of its target; else return the ledger's
        ``runs`` table mark (:meth:`~backfill_lib.ledger.writer.EventWriter.commit_mark`) taken before the
        read, for :meth:`confirm`."""
        import time

        from backfill_lib.core.leases import holding, refusal

        hours = self.settings.lease_hours
        mine = self.lease(plan, time.time_ns())
        self.ledger.flush()
        mark = self.ledger.commit_mark("runs")
        held = holding(self.ledger.leases(plan.target_table, flush=False, location=plan.target_location), mine,
                       utc_now(), hours)
        if held:
            raise LeaseError(f"{plan.request_path}: {refusal(mine, held, hours)}")
        self.ledger.watch_from(plan.run_id, mark)  # the abandon check before the commit reads only after others wrote
        return mark

    def confirming(self, plan: BackfillPlan, planned_seq: int, mark: tuple[int, int] | None) -> Future:
        """Start :meth:`confirm` in a thread; the future's result is its refusal (``None``: confirmed).
        The runner awaits it before the run's first write and before recording how the run ended."""
        confirmed: Future = Future()

        def confirm() -> None:
            try:
                confirmed.set_result(self.confirm(plan, planned_seq, mark))
            except BaseException as exc:  # a failed ledger read: the run's own thread raises it
                confirmed.set_exception(exc)

        threading.Thread(target=confirm, name=f"{plan.run_id}-lease", daemon=True).start()
        return confirmed

    def confirm(self, plan: BackfillPlan, planned_seq: int, mark: tuple[int, int] | None) -> str | None:
        """Once the ``planned`` event (``planned_seq``) is committed: when an overlapping run's plan reached the
        ledger first (both passed :meth:`take_turn` at once; :func:`~backfill_lib.core.leases.committed_before`
        orders them by commit version), or when another process recorded a plan of the same run ID first, the
        refusal that withdraws this one; else ``None``.
        When nothing but this run's own events reached the ``runs`` table since :meth:`take_turn`'s read
        (``mark``), no plan can have been recorded before this one unseen, and the ledger is not read again."""
        from backfill_lib.core.leases import committed_before, holding, refusal

        # The plan commits with the run's first staging events, in the burst staging starts
        # (BatchStager.stage calls write_now): one ledger commit fewer than committing the plan alone first.
        self.ledger.wait_committed(planned_seq, hurry=False)
        if self.ledger.only_commits_of("runs", mark, plan.run_id):
            return None
        if self.ledger.planned_elsewhere_first(mark, plan.run_id):
            return RunElsewhere(f"run ID {plan.run_id} was started by another process at the same moment, and its "
                                f"plan reached the ledger first: that process runs it (`backfill status "
                                f"{plan.run_id}`); this one wrote nothing")
        leases = self.ledger.leases(plan.target_table, flush=False, location=plan.target_location)
        own = next((lease for lease in leases if lease.run_id == plan.run_id), None)
        if own is None:
            return None
        held = holding(leases, own, utc_now(), self.settings.lease_hours)
        earlier = committed_before(held, own, self.ledger.planned_commits(mark)) if held else []
        return refusal(own, earlier, self.settings.lease_hours) if earlier else None

    def abandon(self, run_id: str, reason: str) -> str:
        """Record ``run_id`` ``abandoned`` with ``reason``, releasing its lease; return what was done. Staging is
        kept (``backfill cleanup`` drops it). The event is committed before this returns; a run still going in
        another process finds it right before its commit and stops there, publishing nothing
        (:class:`~backfill_lib.core.errors.AbandonedError`).

        Raises
        ------
        PublishError
            When the run is final already, or is ``publishing`` or ``rolling_back`` (it may have committed:
            ``backfill resume`` finishes it, checking the target's history).
        """
        from backfill_lib.core.leases import RELEASED

        self.ledger.ensure()
        record = self.ledger.run(run_id)
        status = record["status"]
        if status in RELEASED:
            raise PublishError(f"run {run_id} is {status} already; nothing to abandon")
        if status in ("publishing", "rolling_back"):
            raise PublishError(f"run {run_id} is {status}: it may have written the target; `backfill resume "
                               f"{run_id}` finishes it (it looks for its own commit first)")
        # Committed before returning (durable flushes at once, no lingering): a live run's publisher reads the
        # ledger for this event right before its commit (Publish.check_not_stopped).
        with self.ledger.durable():
            self.ledger.record_run(record, "abandoned", message=f"abandoned: {reason}")
        return f"run {run_id} ({status}) abandoned: {reason}; its range of {record['target_table']} is free"

    def check_resume(self, plan: BackfillPlan, record: dict, concurrent: bool) -> None:
        """Refuse to resume ``plan`` when its lease lapsed (no event for ``lease_hours``) or was released (a
        failure that would repeat) and another run that is not final now holds an overlapping range of its
        target: that run may have started since, and the two would write the same partitions. A run whose lease
        stands goes on without a read; so does a mart's child run (its parent's lease) and a runner with
        ``concurrent``. The check reads once, with no confirmation after it: a new run passing its turn in
        the same moment is not seen.

        Raises
        ------
        LeaseError
            Naming this run, why its lease no longer holds, and the run that holds the range.
        """
        from backfill_lib.core.leases import holding, lease_of

        hours = self.settings.lease_hours
        mine = lease_of({**record, "planned_seq": record.get("planned_seq") or record["seq"]})
        lapsed = mine.expired(utc_now(), hours)
        if concurrent or plan.parent_run_id is not None or (mine.held and not lapsed):
            return
        held = holding(self.ledger.leases(plan.target_table, location=plan.target_location), mine, utc_now(), hours)
        if held:
            first = held[0]
            why = f"lapsed (no event for {hours:g} hours)" if lapsed else f"was released when it {mine.status}"
            raise LeaseError(
                f"run {plan.run_id}: its lease of table {mine.table} {why} and run {first.run_id} (owner "
                f"{first.owner}, status {first.status}) now holds {first.span()}, which overlaps this run's "
                f"{mine.span()}; finish that run (`backfill resume {first.run_id}`) or release it (`backfill "
                f"abandon {first.run_id} --reason TEXT`) before resuming this one")
