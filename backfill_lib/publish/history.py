"""Lineage: which versions of a table came from backfills, from Delta's history joined with the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.ledger import Ledger


@dataclass(frozen=True)
class BackfillVersion:
    """One version of a table written by a backfill: ``action`` is ``publish``, ``restore`` (automatic, after a
    failed check) or ``rollback`` (``backfill rollback``); ``timestamp`` is the commit time as ``history`` prints it
    (``yyyy-MM-dd HH:mm:ss`` and the offset of the session's time zone), ``committed_at`` the same instant as an
    aware UTC datetime (from the commit's epoch microseconds, so no zone is guessed); ``status`` is the run's
    latest status in the ledger (``None`` when the ledger does not know the run)."""

    version: int
    timestamp: str
    operation: str
    action: str
    run_id: str
    owner: str | None
    reason: str | None
    strategy: str | None
    approved_by: str | None
    status: str | None
    detail: str | None
    committed_at: datetime | None = None


def backfill_versions(spark: SparkSession, ledger: Ledger, table: str) -> list[BackfillVersion]:
    """Versions of ``table`` whose ``userMetadata`` names a backfill run (``DESCRIBE HISTORY``), newest first.

    Raises
    ------
    pyspark.errors.AnalysisException
        When ``table`` does not exist or is not a Delta table (the CLI turns it into an error naming it).
    """
    from backfill_lib.adapters.log_reader import log_reader

    entries = log_reader(spark).history(table)  # DeltaTable's history; under Spark Connect, Delta's SQL
    history = (entries
               .select("version", F.date_format("timestamp", "yyyy-MM-dd HH:mm:ssXXX").alias("ts"),
                       F.unix_micros("timestamp").alias("us"), "operation", "userMetadata")
               .where(F.col("userMetadata").isNotNull()).orderBy(F.col("version").desc()).collect())
    ledger.ensure()
    tagged = [(row, meta) for row, meta in ((row, _meta(row["userMetadata"])) for row in history)
              if isinstance(meta, dict) and "run_id" in meta]
    status = ledger.statuses(meta["run_id"] for _, meta in tagged if isinstance(meta["run_id"], str))
    out = []
    for row, meta in tagged:
        detail = ", ".join(f"{k} {meta[k]}" for k in ("mart_run_id", "rolled_back_by", "rollback_reason") if meta.get(k)) or None
        out.append(BackfillVersion(
            int(row["version"]), row["ts"], row["operation"], meta.get("action", ""), meta["run_id"],
            meta.get("owner"), meta.get("reason"), meta.get("strategy"), meta.get("approved_by"),
            status.get(meta["run_id"]), detail,
            datetime.fromtimestamp(row["us"] / 1_000_000, timezone.utc) if row["us"] is not None else None,
        ))
    return out



def _meta(text: str):
    """A commit's ``userMetadata`` parsed as JSON, ``None`` when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None
