"""Publishing, shared by every strategy: the fence, commit metadata, finding the run's commit, RESTORE.

Every commit the run makes carries ``userMetadata`` (JSON: run_id, request, owner, reason, strategy), so
``DESCRIBE HISTORY`` shows which table versions came from which backfill.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.errors import FenceError, PublishError
from backfill_lib.plan import BackfillPlan
from backfill_lib.tables import PartitionStats, current_version, partition_stats

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def commit_metadata(plan: BackfillPlan, action: str) -> str:
    """The ``userMetadata`` JSON string stored in every commit the run makes."""
    r = plan.request
    return json.dumps(
        {
            "run_id": plan.run_id,
            "request": r.name,
            "owner": r.owner,
            "reason": r.reason,
            "strategy": r.strategy.value,
            "action": action,
        },
        sort_keys=True,
    )


@contextmanager
def user_metadata(spark: SparkSession, value: str):
    """Set ``userMetadata`` for commits issued through SQL (RESTORE), restoring the previous value after."""
    previous = spark.conf.get(USER_METADATA_CONF, None)
    spark.conf.set(USER_METADATA_CONF, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(USER_METADATA_CONF)
        else:
            spark.conf.set(USER_METADATA_CONF, previous)


def check_fence(spark: SparkSession, plan: BackfillPlan) -> int:
    """Refuse to publish when a commit changed the range's data files since the plan read the target.

    Compares each planned partition's file-set fingerprint from the Delta log now with the plan's. Commits
    that touched only other partitions pass. Returns the target's current version.

    Raises
    ------
    FenceError
        Naming the versions and the first changed partitions.
    """
    now_version = current_version(spark, plan.target_table)
    if now_version == plan.target_version:
        return now_version
    if plan.request.strategy.value == "rebuild":  # a rebuild replaces every partition: any commit is in range
        raise FenceError(
            f"table {plan.target_table} changed since the plan read version {plan.target_version} "
            f"(now version {now_version}); a rebuild replaces the whole table, so nothing was published"
        )
    from backfill_lib.plan import stats_by_key

    request = plan.request
    now = stats_by_key(partition_stats(spark, plan.target_location, plan.partition_column),
                       request.target.grain, request.time_zone)
    empty = PartitionStats()
    changed = [p.key for p in plan.partitions if now.get(p.key, empty).fingerprint != p.current.fingerprint]
    if changed:
        listed = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise FenceError(
            f"table {plan.target_table} changed in range since the plan read version {plan.target_version} "
            f"(now version {now_version}): partitions {listed}; nothing published"
        )
    return now_version


def find_version(spark: SparkSession, table: str, run_id: str, action: str, after: int) -> int:
    """The version of ``table`` newer than ``after`` whose ``userMetadata`` records ``run_id`` and ``action``."""
    from delta.tables import DeltaTable

    history = DeltaTable.forName(spark, table).history().where(F.col("version") > after)
    for row in history.orderBy(F.col("version").desc()).collect():
        meta = row["userMetadata"]
        if meta:
            try:
                parsed = json.loads(meta)
            except json.JSONDecodeError:
                continue
            if parsed.get("run_id") == run_id and parsed.get("action") == action:
                return int(row["version"])
    raise PublishError(f"table {table}: no commit of run {run_id} ({action}) found after version {after}")


def restore(spark: SparkSession, plan: BackfillPlan, table: str, version: int) -> int:
    """``RESTORE TABLE table TO VERSION AS OF version`` with the run's metadata; return the new version."""
    before = current_version(spark, table)
    with user_metadata(spark, commit_metadata(plan, "restore")):
        spark.sql(f"RESTORE TABLE {table} TO VERSION AS OF {int(version)}")
    return find_version(spark, table, plan.run_id, "restore", before)
