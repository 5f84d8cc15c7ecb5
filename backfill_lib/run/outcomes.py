"""How a run that stops records it: whatever ends a run leaves it in a final or resumable status in the ledger."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from backfill_lib.core.errors import (
    AbandonedError,
    CancelledError,
    GateFailedError,
    LeaseError,
    RolledBackError,
    failure_message,
    resumable_failure,
)
from backfill_lib.core.progress import Reporter
from backfill_lib.ledger import Ledger
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.run.leases import RunElsewhere, confirmed_refusal


@contextlib.contextmanager
def recording_the_end(ledger: Ledger, plan: BackfillPlan, record: dict, reporter: Reporter,
                      confirmed: Future | None, on_gate_failed: Callable[[], None]) -> Iterator[None]:
    """Record how the run in the ``with`` block stops, then let its error through.

    A lease confirmation that refused (``confirmed``, a fresh run's; the run was withdrawn at start, whatever else
    stopped it meanwhile, since nothing was written) is the run's error and ``abandoned`` its last event (none for
    a run ID another process runs: :class:`~backfill_lib.run.leases.RunElsewhere`). A failed
    gate has its report written (``on_gate_failed``); a rolled back or abandoned run is recorded already; a
    cancelled one is ``cancelled`` (resumable); any other error, a Spark or Python one too, ``failed``, with
    whether a retry may pass (:func:`~backfill_lib.core.errors.resumable_failure`).
    """
    last = lambda: ledger.last_recorded(plan.run_id) or record  # noqa: E731
    try:
        try:
            yield
        except BaseException:
            ledger.write_now()  # a run stopped before staging: the confirmation waits for this commit
            refused = confirmed_refusal(confirmed, raise_failed_read=False)
            if refused:
                if not isinstance(refused, RunElsewhere):
                    ledger.record_run(last(), "abandoned", message=f"withdrawn at start: {refused}")
                raise LeaseError(f"{plan.request_path}: {refused}") from None
            raise
    except LeaseError:
        raise  # withdrawn by the lease confirmation: recorded above
    except GateFailedError:
        on_gate_failed()
        raise
    except (RolledBackError, AbandonedError):
        raise  # recorded already: rolled back, or abandoned (by `backfill abandon`, found before the commit)
    except CancelledError as exc:
        ledger.record_run(last(), "cancelled", message=str(exc))
        reporter.stage(str(exc))
        raise
    except Exception as exc:
        ledger.record_run(last(), "failed", message=failure_message(exc), resumable=resumable_failure(exc))
        raise


def stop_if_cancelled(cancelled, plan: BackfillPlan, at: str) -> None:
    """Raise :class:`CancelledError` when ``cancelled`` (the runner's event) is set: the run stops ``at`` (words),
    nothing published, resumable."""
    if cancelled.is_set():
        raise CancelledError(f"run {plan.run_id} cancelled {at}; nothing published; "
                             f"continue with: backfill resume {plan.run_id}")
