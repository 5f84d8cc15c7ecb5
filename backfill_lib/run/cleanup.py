"""``backfill cleanup``: drop the staging tables of final runs past an age, and record each drop in the ledger.

Which tables go is decided by :func:`backfill_lib.core.retention.judge_staging` (pure); this module reads the
ledger, checks which of those tables still exist, drops them and records it."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from backfill_lib.core.retention import StagingVerdict, judge_staging
from backfill_lib.run.ledger import Ledger


def staging_verdicts(spark: SparkSession, ledger: Ledger, now: datetime, older_than: timedelta,
                     force: bool = False) -> list[StagingVerdict]:
    """The verdict on every run's staging table that still exists (oldest first)."""
    ledger.ensure()
    runs = [r.asDict() for r in ledger.runs().drop("plan_json").collect()]
    return [v for v in judge_staging(runs, now, older_than, force) if spark.catalog.tableExists(v.staging_table)]


def drop_staging(spark: SparkSession, ledger: Ledger, verdicts: list[StagingVerdict]) -> list[StagingVerdict]:
    """Drop the staging tables of ``verdicts`` that are to be dropped, recording each in its run's events (same
    status, a message saying so); return those dropped."""
    dropped = []
    with ledger.durable():
        for v in verdicts:
            if not v.drop:
                continue
            spark.sql(f"DROP TABLE IF EXISTS {v.staging_table}")
            record = {k: val for k, val in ledger.run(v.run_id).items() if k not in ("seq", "event_at")}
            note = f"cleanup dropped staging table {v.staging_table}"
            message = f"{record['message']}; {note}" if record.get("message") else note
            ledger.record_run(record, v.status, message=message)
            dropped.append(v)
    return dropped


def staging_exists(spark: SparkSession, name: str | None) -> bool:
    """Whether a run's staging table ``name`` is still there (``backfill status``, the report)."""
    return bool(name) and spark.catalog.tableExists(name)
