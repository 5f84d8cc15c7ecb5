"""Publishing a recompute: the fence, one atomic replaceWhere commit, the post-publish check, RESTORE.

Every commit the run makes carries ``userMetadata`` (JSON: run_id, request, owner, reason, strategy), so
``DESCRIBE HISTORY`` shows which table versions came from which backfill.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.errors import FenceError, PublishError
from backfill_lib.ledger import Check
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
    now = partition_stats(spark, plan.target_location, plan.partition_column)
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


def publish_recompute(spark: SparkSession, plan: BackfillPlan) -> tuple[int, int]:
    """Replace exactly the planned partitions of the target with the staged rows, in one commit.

    Returns ``(pre_publish_version, published_version)``.
    """
    pre = check_fence(spark, plan)
    predicate = plan.predicate()
    staged = spark.table(plan.staging_table).where(predicate)
    target_columns = spark.table(plan.target_table).columns
    (
        staged.select(*target_columns)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .option("userMetadata", commit_metadata(plan, "publish"))
        .saveAsTable(plan.target_table)
    )
    return pre, find_version(spark, plan.target_table, plan.run_id, "publish", pre)


def _fingerprints(spark: SparkSession, table: str, plan: BackfillPlan, version: int | None) -> dict[str, tuple]:
    df = spark.read.option("versionAsOf", version).table(table) if version is not None else spark.table(table)
    df = df.where(plan.predicate())
    cols = [F.col(c) for c in df.columns]
    rows = (
        df.groupBy(F.col(plan.partition_column).cast("string").alias("p"))
        .agg(F.count("*").alias("n"), F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("h"))
        .collect()
    )
    return {r["p"]: (int(r["n"]), r["h"]) for r in rows}


def verify_published(spark: SparkSession, plan: BackfillPlan, version: int) -> list[Check]:
    """Per planned partition: row count and an order-independent checksum of the published version versus staging.

    The checksum is the sum over rows of ``xxhash64`` of all columns, as ``decimal(38,0)``.
    """
    published = _fingerprints(spark, plan.target_table, plan, version)
    staged = _fingerprints(spark, plan.staging_table, plan, None)
    checks = []
    for p in plan.partitions:
        a, b = published.get(p.key, (0, None)), staged.get(p.key, (0, None))
        ok = a == b
        checks.append(
            Check(
                "post_publish",
                "rows_and_checksum_equal_staging",
                ok,
                p.key,
                None,
                f"{a[0]} rows, checksum {a[1]}",
                f"{b[0]} rows, checksum {b[1]}",
                None if ok else f"published {a[0]} rows (checksum {a[1]}), staged {b[0]} rows (checksum {b[1]})",
            )
        )
    return checks


def restore(spark: SparkSession, plan: BackfillPlan, table: str, version: int) -> int:
    """``RESTORE TABLE table TO VERSION AS OF version`` with the run's metadata; return the new version."""
    before = current_version(spark, table)
    with user_metadata(spark, commit_metadata(plan, "restore")):
        spark.sql(f"RESTORE TABLE {table} TO VERSION AS OF {int(version)}")
    return find_version(spark, table, plan.run_id, "restore", before)
