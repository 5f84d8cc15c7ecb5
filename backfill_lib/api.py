"""The Python API for notebooks and schedulers: plan a backfill (the dry run) or run one, as the CLI does.

Both take a request file and return frozen results; errors are the :class:`~backfill_lib.core.errors.BackfillError`
hierarchy the CLI turns into exit codes. A notebook on a cluster passes its own ``spark`` session; without one,
the session of :func:`~backfill_lib.adapters.session.get_spark` is used (the active one, else the embedded local
default).
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from backfill_lib.core.settings import Settings, load_settings
from backfill_lib.plan.model import BackfillPlan


def _session(settings: Settings, spark):
    if spark is not None:
        return spark
    from backfill_lib.adapters.platform_probe import check_platform

    check_platform()
    from backfill_lib.adapters.session import get_spark

    return get_spark(settings)


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
    plan, _ = prepare_selected(_session(settings, spark), settings, request_path, only, run_id=run_id)
    return plan


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
    ``LeaseError`` (another run holds an overlapping range; ``after``: wait for that run ID first; ``concurrent``:
    run beside it).
    """
    from backfill_lib.plan.selection import prepare_selected
    from backfill_lib.runner import Runner

    settings = settings or load_settings()
    session = _session(settings, spark)
    runner = Runner(session, settings, console or Console(file=io.StringIO()))
    runner.approved_by = approved_by
    runner.concurrent = concurrent
    if after is not None:
        runner.wait_for(after)
    plan, state = prepare_selected(session, settings, request_path, only, run_id=run_id)
    return runner.run(plan, state, until=until)
