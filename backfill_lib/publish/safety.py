"""Release safety around the publishing commit: protected tables, rollback readiness, how long RESTORE stays
possible, and commits that arrived after a run's own.

Facts about retention come from Delta's table properties (Delta docs, "Table properties reference"):
``delta.deletedFileRetentionDuration`` (default ``interval 1 week``) is how long files a commit removed are
kept before ``VACUUM`` may delete them; ``delta.logRetentionDuration`` (default ``interval 30 days``) is how
long the log keeps a version's entries. RESTORE to a version needs both.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession

from backfill_lib.adapters.delta_log import current_version, history_since, latest_snapshot
from backfill_lib.adapters.log_reader import log_reader
from backfill_lib.core.errors import PublishError
from backfill_lib.core.table_names import same_table_key

DEFAULT_DELETED_FILE_RETENTION = timedelta(days=7)
DEFAULT_LOG_RETENTION = timedelta(days=30)
_UNITS = {"week": 7 * 86400, "day": 86400, "hour": 3600, "minute": 60, "second": 1, "millisecond": 0.001}
_PART = re.compile(r"(\d+)\s*(week|day|hour|minute|second|millisecond)s?", re.IGNORECASE)


def parse_interval(text: str) -> timedelta:
    """A Delta interval property (``interval 1 week``, ``interval 168 hours``, ``7 days``) as a timedelta.

    Raises
    ------
    ValueError
        When no ``<number> <unit>`` part is found.
    """
    parts = _PART.findall(text)
    if not parts:
        raise ValueError(f"not an interval: '{text}'")
    return timedelta(seconds=sum(int(n) * _UNITS[u.lower()] for n, u in parts))


def retention(properties: dict[str, str]) -> timedelta:
    """How long after a commit the version before it can still be restored: the shorter of the table's
    deleted-file and log retention (Delta's defaults when unset)."""
    deleted = properties.get("delta.deletedFileRetentionDuration")
    log = properties.get("delta.logRetentionDuration")
    return min(parse_interval(deleted) if deleted else DEFAULT_DELETED_FILE_RETENTION,
               parse_interval(log) if log else DEFAULT_LOG_RETENTION)


def rollback_until(spark: SparkSession, table: str, version: int) -> datetime:
    """Until when (UTC) RESTORE to ``version - 1`` stays possible: the commit time of ``version`` as
    ``DESCRIBE HISTORY`` reports it, plus the table's :func:`retention`.

    When ``version`` is the newest, its time is the latest snapshot's (Delta's ``Snapshot.timestamp``: the
    commit's in-commit timestamp, else its log file's modification time, as history has it), read in the driver;
    an older version's comes from ``DESCRIBE HISTORY`` (a Spark job, 0.3-0.5 s on a local session)."""
    snapshot = latest_snapshot(spark, table)
    if int(snapshot.version()) == version:
        committed_us = int(snapshot.timestamp()) * 1000
    else:
        committed_us = history_since(spark, table, version)[-1]["timestamp_us"]
    # The properties from the snapshot's metadata, not DESCRIBE DETAIL, which would list every file for its size.
    # (under Spark Connect, DESCRIBE DETAIL's properties, read with the snapshot)
    properties = log_reader(spark).properties(snapshot)
    committed = datetime.fromtimestamp(committed_us // 10**6, tz=timezone.utc) + timedelta(microseconds=committed_us % 10**6)
    return committed + retention(properties)


def _missing_files(spark: SparkSession, table: str, version: int) -> list[str]:
    """Data files of ``version`` that are no longer in storage (only those not in the current version are
    looked up: the current version's files exist by definition, so nothing is listed when ``version`` is the
    current one)."""
    if current_version(spark, table) == version:
        return []
    then = set(spark.read.option("versionAsOf", version).table(table).inputFiles())
    now = set(spark.table(table).inputFiles())
    # Hadoop's FileSystem in the driver; under Spark Connect, Spark's file source
    return log_reader(spark).missing_files(sorted(then - now))


def check_rollback_ready(spark: SparkSession, table: str, versions: dict[str, int]) -> None:
    """Refuse to publish when a version the release may need to restore or compare with has lost data files.

    ``versions`` maps what each version is (for the message) to the version. Reading a version whose files a
    ``VACUUM`` deleted fails, and so would RESTORE to it.

    Raises
    ------
    PublishError
        Naming the table, the version, how many files are gone and one of them.
    """
    for what, version in versions.items():
        try:
            missing = _missing_files(spark, table, version)
        except Exception as exc:  # a version whose log entries expired cannot even be listed
            raise PublishError(f"rollback readiness: table {table} version {version} ({what}) cannot be read: "
                               f"{str(exc).strip().splitlines()[0]}; nothing published") from exc
        if missing:
            name = missing[0].rsplit("/", 1)[-1]
            raise PublishError(
                f"rollback readiness: table {table} version {version} ({what}) can no longer be restored: "
                f"{len(missing)} of its data files are gone (for example {name}; a VACUUM removed them); "
                "nothing published"
            )


def check_protected(protected: tuple[str, ...], tables: list[str], approved_by: str | None) -> None:
    """Refuse to publish to a protected table without an approver.

    Raises
    ------
    PublishError
        Naming the protected table and how to approve.
    """
    # compared as one table is however spelt: delta.`/wh/t/` in the settings protects delta.`/wh/t`
    hit = [t for t in tables if same_table_key(t) in {same_table_key(p) for p in protected}]
    if hit and not (approved_by and approved_by.strip()):
        raise PublishError(f"table {hit[0]} is protected (settings protected_tables): publishing needs "
                           "--approve NAME, naming who approved it; nothing published")

