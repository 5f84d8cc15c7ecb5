"""What a run returns once it stops: its status, the versions it saw and wrote, every check, its marts' runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from backfill_lib.core.checks import Check
from backfill_lib.core.errors import PublishError
from backfill_lib.core.progress import Reporter
from backfill_lib.ledger import Ledger
from backfill_lib.plan.model import BackfillPlan

#: Run statuses after which nothing is left to do: resuming such a run writes nothing.
FINISHED = ("published", "unchanged")


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


def resumed_result(ledger: Ledger, plan: BackfillPlan, record, reporter: Reporter) -> RunResult | None:
    """The result of resuming a run in ``record``'s status when nothing is left to do (``published``,
    ``unchanged``: said once, nothing written), else ``None``.

    Raises
    ------
    PublishError
        When the run was rolled back or abandoned: start a new run instead.
    """
    status = record["status"]
    if status in FINISHED:
        reporter.stage(f"run is already {status}; nothing to do")
        return RunResult(plan, status, ledger.partition_rows(plan.run_id), ledger.recorded_checks(plan.run_id),
                         record["pre_publish_version"], record["published_version"])
    if status in ("rolled_back", "abandoned"):
        raise PublishError(f"run {plan.run_id} was {status.replace('_', ' ')} ({record['message']}); start a new run")
    return None
