"""What a run returns once it stops: its status, the versions it saw and wrote, every check, its marts' runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from backfill_lib.core.checks import Check
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
