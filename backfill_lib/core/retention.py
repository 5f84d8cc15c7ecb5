"""Which staging tables ``backfill cleanup`` may drop. Pure.

A run's staging table is kept after the run for review, auditing and resuming. Cleanup drops it only when:

- the run is final (:data:`~backfill_lib.core.leases.RELEASED`: ``published``, ``unchanged``, ``rolled_back``,
  ``abandoned``), so nothing will stage, validate or publish from it again;
- its last event is older than the age asked for (``--older-than``, default the settings' ``cleanup_older_than``);
- for a published run, its rollback window (``rollback_until``: until when RESTORE of the pre-publish version is
  possible) has passed, unless forced: while a rollback is possible, the staged rows are the evidence a reviewer
  compares with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from backfill_lib.core.errors import ConfigError
from backfill_lib.core.leases import RELEASED

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhm])\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_age(text: str, field: str = "--older-than") -> timedelta:
    """``30d``, ``12h`` or ``90m`` as a duration.

    Raises
    ------
    ConfigError
        Naming ``field`` and the text when it is not a number followed by ``d``, ``h`` or ``m``.
    """
    found = _AGE.match(text or "")
    if not found:
        raise ConfigError(f"{field}: '{text}' is not an age such as 30d, 12h or 90m")
    return timedelta(**{_UNITS[found.group(2)]: float(found.group(1))})


@dataclass(frozen=True)
class StagingVerdict:
    """One run's staging table and whether cleanup drops it (``drop``) or why not (``kept_because``)."""

    run_id: str
    status: str
    staging_table: str
    last_event_at: datetime
    drop: bool
    kept_because: str = ""


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def judge_staging(runs: list[dict], now: datetime, older_than: timedelta, force: bool = False) -> list[StagingVerdict]:
    """A verdict for every run of ``runs`` (ledger run records: ``run_id``, ``status``, ``staging_table``,
    ``event_at`` of the latest event and ``rollback_until``, both UTC) that names a staging table, oldest first."""
    out = []
    for r in runs:
        if not r.get("staging_table"):
            continue
        last = _utc(r["event_at"])
        until = _utc(r.get("rollback_until"))
        reason = ""
        if r["status"] not in RELEASED:
            reason = f"run is {r['status']}, not final"
        elif now - last < older_than:
            reason = f"last event {last:%Y-%m-%d %H:%M} UTC is younger than the age"
        elif r["status"] == "published" and until is not None and until > now and not force:
            reason = f"inside its rollback window (until {until:%Y-%m-%d %H:%M} UTC; --force drops it anyway)"
        out.append(StagingVerdict(r["run_id"], r["status"], r["staging_table"], last, not reason, reason))
    return sorted(out, key=lambda v: (v.last_event_at, v.run_id))
