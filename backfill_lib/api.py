"""The Python API for notebooks and schedulers, and the one code path of the ``backfill`` command.

:func:`plan_backfill` (the dry run) and :func:`run_backfill` take a request file and return frozen results;
:class:`Backfills` does the work of every command that runs, resumes, publishes, rolls back or abandons a run,
and the module's other functions read what ``status``, ``history``, ``report`` and ``cleanup`` show. They return
documents and results; the CLI (:mod:`backfill_lib.cli`) only parses, renders and turns errors into exit codes.
Errors are the :class:`~backfill_lib.core.errors.BackfillError` hierarchy. A notebook on a cluster passes its own
``spark`` session; without one, the session of :func:`~backfill_lib.adapters.session.get_spark` is used (the
active one, else the embedded local default).
"""

from __future__ import annotations

import io
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

from rich.console import Console

from backfill_lib.core.settings import Settings, load_settings
from backfill_lib.plan.model import BackfillPlan


def session(settings: Settings, spark=None, *, short_lived: bool = False, quiet: bool = False):
    """``spark``, else the session of :func:`~backfill_lib.adapters.session.get_spark` (``short_lived`` for the
    commands that only read metadata: a local JVM compiles for a fast start). The platform is checked before
    pyspark is imported: a missing or foreign PySpark is named, not a traceback. ``quiet``: silence pyspark's
    logging of analysis errors (the CLI reports each error once, as one line). ``spark`` may also be a function
    that makes the session, called when it is needed (after the checks that need no Spark)."""
    if callable(spark):
        return spark()
    if spark is not None:
        return spark
    from backfill_lib.adapters.platform_probe import check_platform

    check_platform()
    from backfill_lib.adapters.session import get_spark, quiet_spark_query_errors

    if quiet:
        quiet_spark_query_errors()
    return get_spark(settings, short_lived=short_lived)


def plan_backfill(request_path: str | Path, *, settings: Settings | None = None, spark=None,
                  run_id: str | None = None, only: str | None = None) -> BackfillPlan:
    """Intake and plan ``request_path`` without writing anything: the frozen plan ``backfill plan`` prints
    (:func:`~backfill_lib.plan.explain.explain` renders it) and ``run_backfill`` would execute.

    ``only`` (``"missing"``, ``"failed"`` or ``"changed"``, as ``--only``): the plan holds only the partitions of
    the range so selected, each with its reason (:attr:`BackfillPlan.selection`, see
    :mod:`backfill_lib.core.selection`); refused with ``IntakeError`` for a rebuild.

    ``settings`` default to :func:`~backfill_lib.core.settings.load_settings` (``$BACKFILL_SETTINGS`` or
    ``conf/settings.yml``). Raises :class:`~backfill_lib.core.errors.RequestError` or
    :class:`~backfill_lib.core.errors.IntakeError` naming the file, field, table or column at fault.
    """
    from backfill_lib.plan.selection import prepare_selected

    settings = settings or load_settings()
    plan, _ = prepare_selected(session(settings, spark), settings, request_path, only, run_id=run_id)
    return plan


class Backfills:
    """One :class:`~backfill_lib.runner.Runner` on a session: what ``run``, ``resume``, ``publish``, ``rollback``
    and ``abandon`` do, for the CLI and for :func:`run_backfill` alike. Progress goes to ``console`` (default:
    none shown); ``approved_by`` approves publishing to a protected table; ``concurrent`` runs beside another run
    that holds an overlapping range. :meth:`cancel` asks a run in flight to stop between batches."""

    def __init__(self, settings: Settings | None = None, spark=None, console: Console | None = None, *,
                 approved_by: str | None = None, concurrent: bool = False):
        from backfill_lib.runner import Runner

        self.settings = settings or load_settings()
        self.runner = Runner(session(self.settings, spark), self.settings, console or Console(file=io.StringIO()))
        self.runner.approved_by = approved_by
        self.runner.concurrent = concurrent

    @property
    def cancelled(self):
        """The :class:`threading.Event` set once :meth:`cancel` was asked."""
        return self.runner.cancelled

    def cancel(self) -> None:
        self.runner.cancel()

    @contextmanager
    def cancel_on_signals(self, run_id: str, say: Callable[[str], None]):
        """While in this context, in the main thread: SIGINT (Ctrl-C) or SIGTERM asks for :meth:`cancel` (the
        batches in flight finish, then the run stops, resumable) and ``say``s one line telling how to continue;
        a second signal stops at once (``KeyboardInterrupt``). The previous handlers come back afterwards. In any
        other thread it does nothing (Python delivers signals to the main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum, _frame):
            if self.cancelled.is_set():
                raise KeyboardInterrupt
            self.cancel()
            say(f"[{run_id}] {signal.Signals(signum).name}: finishing the batches in flight, then stopping "
                f"(again to stop at once); continue later with: backfill resume {run_id}")

        previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def prepare(self, request_path: str | Path, *, run_id: str | None = None, after: str | None = None,
                only: str | None = None):
        """Intake and plan ``request_path`` (with ``only``, its selected partitions); ``after``: first wait until
        that run is final (a run of another table too, with a note saying it frees no range of this target).
        Returns ``(plan, state)`` for :meth:`execute`."""
        from backfill_lib.adapters.gx_import import import_early
        from backfill_lib.intake.request import load_request
        from backfill_lib.plan.selection import prepare_selected

        import_early()  # the run validates after the plan: GX's import goes on beside it
        if after is not None:
            self.runner.leases.wait_for(after, load_request(request_path).target.table)
        return prepare_selected(self.runner.spark, self.settings, request_path, only, run_id=run_id)

    def execute(self, plan: BackfillPlan, state, *, until: str | None = None,
                on_durable: Callable[[str], None] | None = None):
        """Run ``plan`` (from :meth:`prepare`); ``on_durable(run_id)`` once the run is in the ledger."""
        return self.runner.run(plan, state, until=until, on_durable=on_durable)

    def resume(self, run_id: str, until: str | None = None):
        from backfill_lib.adapters.gx_import import import_early

        import_early()
        return self.runner.resume(run_id, until=until)

    def publish(self, run_id: str):
        """Publish a run stopped with ``until="validate"``."""
        return self.runner.publish_validated(run_id)

    def rollback(self, run_id: str, by: str, reason: str, force: bool = False) -> str:
        return self.runner.rollback(run_id, by, reason, force=force)

    def abandon(self, run_id: str, reason: str) -> str:
        return self.runner.leases.abandon(run_id, reason)

    def document(self, result):
        """``run --json``: the run's :meth:`run_document`, or, when nothing was selected (no run was recorded),
        the (empty) plan's :class:`~backfill_lib.report.documents.PlanDocument`."""
        if result.status == "nothing_selected":
            from backfill_lib.report.documents import plan_document

            return plan_document(result.plan)
        return self.run_document(result.plan.run_id)

    def run_document(self, run_id: str):
        """The run's :class:`~backfill_lib.report.documents.RunDocument`: from the outcome its report was written
        from (the same as its summary.json), or from the ledger when no report was written (a resumed run that
        had finished already)."""
        from backfill_lib.report.run_report import ledger_outcome, outcome_document

        outcome = self.runner.outcomes.get(run_id) or ledger_outcome(self.runner.ledger, run_id)
        return outcome_document(self.settings, outcome)


def run_backfill(request_path: str | Path, *, settings: Settings | None = None, spark=None,
                 run_id: str | None = None, until: str | None = None, approved_by: str | None = None,
                 console: Console | None = None, after: str | None = None, concurrent: bool = False,
                 only: str | None = None):
    """Run ``request_path`` through every stage (or, with ``until="validate"``, stop after validation) and
    return the :class:`~backfill_lib.publish.results.RunResult` (status, versions, checks, marts' runs).

    ``only`` (as ``--only``, see :func:`plan_backfill`) runs only the selected partitions; when none is selected
    nothing is written (no table version, no ledger event) and the status is ``nothing_selected``.

    A ``run_id`` the ledger already has for the same request resumes that run. Progress goes to ``console``
    (default: none shown). Raises what :meth:`backfill_lib.runner.Runner.run` raises: ``GateFailedError``
    (nothing published), ``PublishError``/``FenceError``, ``RolledBackError`` (restored), ``AbandonedError``
    (abandoned while it ran, nothing published), ``CancelledError``,
    ``LeaseError`` (another run holds an overlapping range; ``after``: wait for that run ID first, as
    ``--after``; ``concurrent``: run beside it).
    """
    backfills = Backfills(settings, spark, console, approved_by=approved_by, concurrent=concurrent)
    plan, state = backfills.prepare(request_path, run_id=run_id, after=after, only=only)
    return backfills.execute(plan, state, until=until)


def _ledger(settings: Settings, spark):
    from backfill_lib.ledger import Ledger

    return Ledger(spark, settings.ledger_schema)


def status_source(settings: Settings, spark=None, *, by_path: bool = True):
    """Where ``status`` reads the ledger: its files (:func:`~backfill_lib.ledger.files.ledger_files`: the embedded
    default, no JVM, answers beside a running run) unless ``by_path`` is false, a session is handed in or the
    catalog is another; else the ledger through Spark (``spark``: a session, or a function that makes one)."""
    if by_path and (spark is None or callable(spark)):
        from backfill_lib.ledger.files import ledger_files

        files = ledger_files(settings)
        if files is not None:
            return files
    from backfill_lib.report.status import CatalogStatus

    ledger = _ledger(settings, session(settings, spark))
    ledger.ensure()
    return CatalogStatus(ledger)


def status(run_id: str | None = None, *, settings: Settings | None = None, spark=None):
    """``backfill status``: the latest runs (:class:`~backfill_lib.report.status.RunList`), or ``run_id``'s
    record and partitions (:class:`~backfill_lib.report.status.RunStatus`); read as :func:`status_source` says.
    Raises :class:`~backfill_lib.core.errors.RunNotFoundError` for a run the ledger does not have."""
    from backfill_lib.report.status import run_list, run_status

    return _read_status(settings, spark, lambda source: run_list(source) if run_id is None
                        else run_status(source, run_id))


def status_document(run_id: str | None = None, *, settings: Settings | None = None, spark=None):
    """``backfill status --json``: :class:`~backfill_lib.report.documents.StatusDocument`."""
    from backfill_lib.report.status import status_document as document

    return _read_status(settings, spark, lambda source: document(source, run_id))


def _read_status(settings: Settings | None, spark, read):
    """``read(source)`` on :func:`status_source`'s source; again through Spark when the ledger's files could not
    be read by path."""
    from backfill_lib.ledger.files import LedgerFilesUnreadable

    settings = settings or load_settings()
    try:
        return read(status_source(settings, spark))
    except LedgerFilesUnreadable:
        return read(status_source(settings, spark, by_path=False))


def history_table(table: str) -> str:
    """``table`` in its canonical spelling (sales.`order-lines`); ``IntakeError`` for a bad name (no Spark)."""
    from backfill_lib.core.errors import IntakeError
    from backfill_lib.core.table_names import check_table_name

    try:
        return check_table_name(table.strip())
    except ValueError as exc:
        raise IntakeError(f"backfill history: {exc}") from None


def history(table: str, *, settings: Settings | None = None, spark=None) -> list:
    """``backfill history``: the :class:`~backfill_lib.publish.history.BackfillVersion` of ``table`` written by
    backfills, newest first; ``IntakeError`` when it is no Delta table."""
    from pyspark.errors import AnalysisException

    from backfill_lib.core.errors import IntakeError
    from backfill_lib.publish.history import backfill_versions

    table = history_table(table)
    settings = settings or load_settings()
    spark = session(settings, spark)
    try:
        return backfill_versions(spark, _ledger(settings, spark), table)
    except AnalysisException as exc:
        raise IntakeError(f"table {table}: {str(exc).strip().splitlines()[0]}") from exc


def history_document(table: str, *, settings: Settings | None = None, spark=None):
    """``backfill history --json``: :class:`~backfill_lib.report.documents.HistoryDocument`."""
    from backfill_lib.report.documents import history_document as document

    table = history_table(table)
    return document(table, history(table, settings=settings, spark=spark))


def _report_ledger(settings: Settings, spark, run_id: str):
    from backfill_lib.core.errors import RunNotFoundError

    ledger = _ledger(settings, spark)
    if not spark.catalog.tableExists(ledger.table("runs")):  # read-only: the ledger is not created for a report
        raise RunNotFoundError(f"run {run_id} not found: ledger {ledger.table('runs')} does not exist yet (no run "
                               "was recorded)")
    return ledger


def _report_reader(settings: Settings, spark):
    """Where ``report`` reads: ``(None, files)``, the ledger's files and no session, when another live process
    holds the embedded default's home (a run watched from a second terminal: its Derby metastore admits one
    process); else ``(session, None)`` (``spark``: a session, or a function that makes one)."""
    if spark is None or callable(spark):
        from backfill_lib.ledger.files import ledger_files

        files = ledger_files(settings)
        from backfill_lib.adapters.session import has_session, refuse_a_home_in_use

        if files is not None and not has_session():  # this process's own session holds the home: use it
            from backfill_lib.core.errors import HomeInUseError

            try:
                refuse_a_home_in_use(settings)
            except HomeInUseError:
                return None, files
    return session(settings, spark), None


def write_report(run_id: str, *, settings: Settings | None = None, spark=None) -> tuple[Path, Path]:
    """``backfill report``: write the run's HTML report and Markdown summary; return their paths."""
    from backfill_lib.report.run_report import write_run_report

    settings = settings or load_settings()
    spark, files = _report_reader(settings, spark)
    if files is not None:
        return write_run_report(None, settings, run_id, files=files)
    _report_ledger(settings, spark, run_id)
    return write_run_report(spark, settings, run_id)


def report_document(run_id: str, *, settings: Settings | None = None, spark=None):
    """``backfill report --json``: write the report, return its
    :class:`~backfill_lib.report.documents.ReportDocument`."""
    from backfill_lib.report.run_report import ledger_outcome, report_document as document, write_run_report

    settings = settings or load_settings()
    spark, files = _report_reader(settings, spark)
    outcome = ledger_outcome(files if files is not None else _report_ledger(settings, spark, run_id), run_id)
    write_run_report(spark, settings, run_id, outcome, files)
    return document(settings, run_id, outcome)


@dataclass(frozen=True)
class Cleanup:
    """What ``backfill cleanup`` did: ``chosen`` dropped (or, ``dry_run``, would be), ``kept`` not, each a
    :class:`~backfill_lib.core.retention.StagingVerdict`."""

    chosen: list
    kept: list
    dry_run: bool


def cleanup(older_than: str | None = None, *, dry_run: bool = False, force: bool = False,
            settings: Settings | None = None, spark=None) -> Cleanup:
    """Drop the staging tables of final runs whose last event is older than ``older_than`` (``30d``, ``12h``;
    default: settings ``cleanup_older_than``); ``force``: also inside a published run's rollback window."""
    from backfill_lib.core.retention import parse_age
    from backfill_lib.plan.prepare import utc_now
    from backfill_lib.run.cleanup import drop_staging, staging_verdicts

    settings = settings or load_settings()
    age: timedelta = parse_age(older_than if older_than is not None else settings.cleanup_older_than)
    spark = session(settings, spark)
    ledger = _ledger(settings, spark)
    verdicts = staging_verdicts(spark, ledger, utc_now(), age, force)
    chosen = [v for v in verdicts if v.drop]
    if not dry_run:
        chosen = drop_staging(spark, ledger, chosen)
    return Cleanup(chosen, [v for v in verdicts if not v.drop], dry_run)
