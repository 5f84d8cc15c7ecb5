"""``backfill cleanup``: drop the staging tables of final runs past an age, and record each drop in the ledger.

Which tables go is decided by :func:`backfill_lib.core.retention.judge_staging` (pure); this module reads the
ledger, checks which of those tables still exist, drops them and records it."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.retention import StagingVerdict, judge_staging
from backfill_lib.core.table_names import split_table_name
from backfill_lib.ledger import Ledger


def staging_verdicts(spark: SparkSession, ledger: Ledger, now: datetime, older_than: timedelta,
                     force: bool = False) -> list[StagingVerdict]:
    """The verdict on every run's staging table that still exists (oldest first)."""
    ledger.ensure()
    runs = [r.asDict() for r in ledger.runs().drop("plan_json").collect()]
    return [v for v in judge_staging(runs, now, older_than, force) if spark.catalog.tableExists(v.staging_table)]


def drop_staging(spark: SparkSession, ledger: Ledger, verdicts: list[StagingVerdict]) -> list[StagingVerdict]:
    """Drop the staging tables of ``verdicts`` that are to be dropped, recording each in its run's events (same
    status, a message saying so); return those dropped."""
    chosen = [v for v in verdicts if v.drop]
    if not chosen:
        return []
    # one read of the runs' latest records, not one per table (plan_json is written with ``planned`` only)
    latest = ledger.runs().drop("plan_json").where(F.col("run_id").isin(*{v.run_id for v in chosen})).collect()
    records = {r["run_id"]: {k: val for k, val in r.asDict().items() if k not in ("seq", "event_at")} for r in latest}
    dropped = []
    with ledger.durable():
        for v in chosen:
            spark.sql(f"DROP TABLE IF EXISTS {v.staging_table}")
            record = records[v.run_id]
            note = f"cleanup dropped staging table {v.staging_table}"
            message = f"{record['message']}; {note}" if record.get("message") else note
            ledger.record_run(record, v.status, message=message)
            dropped.append(v)
    return dropped


def staging_exists(spark: SparkSession, name: str | None) -> bool:
    """Whether a run's staging table ``name`` is still there (``backfill status``, the report)."""
    return bool(name) and spark.catalog.tableExists(name)


def staging_kept(spark: SparkSession, names: list[str | None]) -> set[str]:
    """Which of the staging tables ``names`` (``[catalog.]schema.table``; ``None`` for none) are still there, with
    one ``SHOW TABLES IN`` per schema rather than one catalog call per table (``backfill status``'s list). Names
    are compared case-insensitively, as the catalog does; a schema that is gone holds none of them."""
    by_schema: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    found = set()
    for name in {n for n in names if n}:
        parts = split_table_name(name)
        if parts is None or len(parts) < 2:  # no schema to list: ask for the table itself
            if spark.catalog.tableExists(name):
                found.add(name)
            continue
        by_schema.setdefault(tuple(parts[:-1]), []).append((name, parts[-1].lower()))
    for schema, members in by_schema.items():
        try:
            rows = spark.sql(f"SHOW TABLES IN {'.'.join(quote_ident(p) for p in schema)}").collect()
        except AnalysisException:  # no such schema
            continue
        listed = {r["tableName"].lower() for r in rows if not r["isTemporary"]}
        found.update(name for name, table in members if table in listed)
    return found
