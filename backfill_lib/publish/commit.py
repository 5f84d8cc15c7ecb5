"""Publishing, shared by every strategy: the fence, commit metadata, finding the run's commit, RESTORE.

Every commit the run makes carries ``userMetadata`` (JSON: run_id, request, owner, reason, strategy), so
``DESCRIBE HISTORY`` shows which table versions came from which backfill.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import contextmanager
from decimal import Decimal
from typing import NamedTuple

from pyspark.sql import SparkSession

from backfill_lib.adapters.delta_log import (
    commit_actions,
    current_version,
    data_column_files,
    latest_snapshot,
    partition_stats,
    user_metadata_since,
)
from backfill_lib.adapters.log_reader import log_reader
from backfill_lib.core.errors import FenceError, PublishError
from backfill_lib.core.table_state import PartitionStats
from backfill_lib.plan.model import BackfillPlan

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: Delta's auto compaction for every write of the session; "false" overrides a table's
#: ``delta.autoOptimize.autoCompact``
AUTO_COMPACT_CONF = "spark.databricks.delta.autoCompact.enabled"


class Written(NamedTuple):
    """The rows a publishing commit wrote, as observed during the write: their count and their checksum (the
    sum of the row hash over all columns in name order, ``decimal(38,0)``; ``None`` for no rows)."""

    rows: int
    checksum: Decimal | None


class Published(NamedTuple):
    """A strategy's publishing commit: the target's version before it, the version it made, and what it wrote
    (``None`` when the strategy does not observe its write)."""

    pre_publish_version: int
    version: int
    written: Written | None = None


#: a strategy's write of its publishing commit: ``write(spark, plan, casts, pre)`` makes the one commit on the target
#: (fenced at version ``pre``) and returns what it wrote, observed (``None`` when it does not observe it)
Write = Callable[[SparkSession, BackfillPlan, tuple, int], "Written | None"]


def publish_commit(spark: SparkSession, plan: BackfillPlan, casts: tuple, write: Write) -> Published:
    """The publishing commit, the same for every strategy: the fence (:func:`check_fence`: the version the write
    starts from, or :class:`FenceError`), the strategy's ``write``, then the version its commit made, found by the
    run ID in the target's history (:func:`find_version`). No strategy can publish without the fence."""
    pre = check_fence(spark, plan)
    wrote = write(spark, plan, casts, pre)
    return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre), wrote)


def commit_metadata(plan: BackfillPlan, action: str, **extra: str) -> str:
    """The ``userMetadata`` JSON string stored in every commit the run makes: run_id (the parent run's for a
    mart, whose own child run ID is ``mart_run_id``), request, owner, reason, strategy, action (``publish``,
    ``restore``, ``rollback``), approved_by when given, and ``extra``."""
    r = plan.request
    meta = {"run_id": plan.commit_run_id, "request": r.name, "owner": r.owner, "reason": r.reason,
            "strategy": r.strategy.value, "action": action, **extra}
    if plan.parent_run_id:
        meta["mart_run_id"] = plan.run_id
    if plan.approved_by:
        meta["approved_by"] = plan.approved_by
    return json.dumps(meta, sort_keys=True)


@contextmanager
def session_confs(spark: SparkSession, confs: dict[str, str]):
    """Set the session confs ``confs`` for the block, then put back each previous value (or unset it). No ledger
    commit runs meanwhile (:data:`~backfill_lib.adapters.session.COMMIT_CONFS`): the block must not wait for
    the ledger."""
    from backfill_lib.adapters.session import COMMIT_CONFS

    with COMMIT_CONFS.confs_set():
        previous = {k: spark.conf.get(k, None) for k in confs}
        for k, v in confs.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in previous.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)


def user_metadata(spark: SparkSession, value: str):
    """Set ``userMetadata`` for commits issued through SQL (RESTORE), restoring the previous value after; Delta's
    auto compaction is off meanwhile, so no OPTIMIZE of it takes ``value`` (see :func:`idempotent_commit`)."""
    return session_confs(spark, {USER_METADATA_CONF: value, AUTO_COMPACT_CONF: "false"})


TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
#: The ``txnVersion`` of a run's publishing commit: Delta skips a write whose app ID already committed it.
PUBLISH_TXN_VERSION = 1


def txn_app_id(plan: BackfillPlan) -> str:
    """The Delta idempotent-write application ID of the run's publishing commit."""
    return f"delta-backfill:{plan.run_id}"


@contextmanager
def idempotent_commit(spark: SparkSession, plan: BackfillPlan):
    """For SQL and MERGE commits: set ``userMetadata`` and Delta's idempotent-write ``txnAppId`` /
    ``txnVersion`` session confs (delta-io/delta#1555), so the same run's publish can commit at most once.
    DataFrame writes pass the same values as writer options instead (:func:`publish_options`).

    Delta's auto compaction is off meanwhile (:data:`AUTO_COMPACT_CONF`): on a target with
    ``delta.autoOptimize.autoCompact`` its OPTIMIZE, committed right after the publish, took the session's
    ``userMetadata`` too, so the run's own commit was found to be the OPTIMIZE and a rollback restored the
    publish's result. The target's next write compacts instead."""
    with session_confs(spark, {USER_METADATA_CONF: commit_metadata(plan, "publish"), TXN_APP_ID_CONF: txn_app_id(plan),
                               TXN_VERSION_CONF: str(PUBLISH_TXN_VERSION), AUTO_COMPACT_CONF: "false"}):
        yield


def publish_options(plan: BackfillPlan) -> dict[str, str]:
    """Writer options of a DataFrame publishing commit: metadata and the idempotent-write guard."""
    return {"userMetadata": commit_metadata(plan, "publish"), "txnAppId": txn_app_id(plan),
            "txnVersion": str(PUBLISH_TXN_VERSION)}


def check_fence(spark: SparkSession, plan: BackfillPlan) -> int:
    """Refuse to publish when a commit changed the range's data files since the plan read the target.

    Commits that change no rows pass: every ``add`` and ``remove`` action of theirs has ``dataChange = false``
    (Delta protocol, "Add File and Remove File": ``OPTIMIZE``, Z-ordering, auto compaction, purges), or they have
    none (a property or comment set). When only such commits came since the plan, the range holds the rows the
    plan read. Otherwise each planned partition's file-set fingerprint from the Delta log now is compared with the
    plan's (within ``target.where``, as the plan read them; for a range on a data column, the files whose min/max
    statistics overlap the partition): commits that touched only other partitions pass; a range a compaction
    rewrote beside a row-changing commit elsewhere is refused too (its files differ from the plan's). Returns the
    target's current version.

    Raises
    ------
    FenceError
        Naming the versions and the first changed partitions.
    """
    snapshot = latest_snapshot(spark, plan.target_table)  # the version and the files compared, from one snapshot
    now_version = int(snapshot.version())
    if now_version == plan.target_version:
        return now_version
    changed_rows = row_changes(spark, snapshot, plan.target_version + 1, now_version)
    if changed_rows is not None and not any(changed_rows.values()):  # compactions and the like: the same rows
        return now_version
    if plan.strategy.whole_table:  # a rebuild replaces every partition: any commit is in range
        raise FenceError(
            f"table {plan.target_table} changed since the plan read version {plan.target_version} "
            f"(now version {now_version}){_committed_by(spark, plan)}; a rebuild replaces the whole table, so "
            "nothing was published"
        )
    now = _range_stats(spark, plan, snapshot)
    empty = PartitionStats()
    changed = [p.key for p in plan.partitions if now.get(p.key, empty).fingerprint != p.current.fingerprint]
    if changed:
        listed = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise FenceError(
            f"table {plan.target_table} changed in range since the plan read version {plan.target_version} "
            f"(now version {now_version}): partitions {listed}{_committed_by(spark, plan)}; nothing published"
        )
    return now_version


def _range_stats(spark: SparkSession, plan: BackfillPlan, snapshot) -> dict[str, PartitionStats]:
    """The stats of the planned partitions in ``snapshot``, keyed and read as the plan read them: from partition
    values, or (a range on a data column) from the files whose min/max statistics overlap each partition."""
    from backfill_lib.plan.model import stats_by_key

    request = plan.request
    where = None if plan.where is None else plan.where.sql
    if plan.range_in_data:
        from backfill_lib.core.file_ranges import overlap_stats

        files = data_column_files(spark, snapshot, plan.partition_column, plan.range_type,
                                  (plan.range_start, plan.range_end), where=where)
        return overlap_stats([p.partition for p in plan.partitions], files, request.target.grain,
                             request.time_zone, plan.range_type == "timestamp")
    return stats_by_key(partition_stats(spark, plan.target_table, plan.partition_keys, snapshot, where=where),
                        request.target.grain, request.time_zone, plan.partition_format, keyed=bool(plan.date_parts),
                        wall_clock=plan.wall_clock)


def row_changes(spark: SparkSession, snapshot, first: int, last: int) -> dict[int, bool] | None:
    """For each commit ``first`` to ``last`` (inclusive) of ``snapshot``'s table, whether it changed rows: whether
    any of its ``add`` or ``remove`` actions has ``dataChange`` true (a missing flag counts as true). Read from
    the commits' own log entries (:func:`~backfill_lib.adapters.delta_log.commit_actions`); ``None`` when one
    cannot be read (log cleanup), so the caller assumes rows changed."""
    out: dict[int, bool] = {}
    for version in range(first, last + 1):
        actions = commit_actions(spark, snapshot, version)
        if actions is None:
            return None
        out[version] = any(action[kind].get("dataChange", True) is not False
                           for action in actions for kind in ("add", "remove") if kind in action)
    return out


def _committed_by(spark: SparkSession, plan: BackfillPlan) -> str:
    """Who committed to the target since the plan read it, for the fence's refusal: the backfill runs, by the
    run ID in their commits' ``userMetadata`` (the ledger's key), how many commits came from other writers, and
    how many of those changed no rows (:func:`row_changes`; they did not trip the fence)."""
    runs: dict[str, list[str]] = {}
    others = 0
    snapshot = latest_snapshot(spark, plan.target_table)
    changed = row_changes(spark, snapshot, plan.target_version + 1, int(snapshot.version())) or {}
    quiet = 0
    for version, meta in sorted(user_metadata_since(spark, plan.target_table, plan.target_version + 1)):
        parsed = _parsed(meta)
        run_id = parsed.get("run_id")
        if run_id and run_id != plan.commit_run_id:
            runs.setdefault(run_id, []).append(f"{parsed.get('action', 'publish')} version {version}")
        elif changed.get(version, True):
            others += 1
        else:
            quiet += 1
    named = [f"{', '.join(v)} by backfill run {r}" for r, v in runs.items()]
    if others:
        named.append(f"{others} commit{'s' if others > 1 else ''} by other writers")
    if quiet:
        named.append(f"{quiet} commit{'s' if quiet > 1 else ''} that changed no rows")
    return f"; committed since: {'; '.join(named)}" if named else ""


def find_version(spark: SparkSession, table: str, run_id: str, action: str, after: int) -> int:
    """The version of ``table`` newer than ``after`` whose ``userMetadata`` records ``run_id`` and ``action``.

    Raises
    ------
    PublishError
        When there is none.
    """
    version = committed_version(spark, table, run_id, action, after)
    if version is None:
        raise PublishError(f"table {table}: no commit of run {run_id} ({action}) found after version {after}")
    return version


def committed_version(spark: SparkSession, table: str, run_id: str, action: str, after: int) -> int | None:
    """Like :func:`find_version`, but ``None`` when the run made no such commit (how a resumed run learns
    whether its publish committed before the crash)."""
    for version, meta in user_metadata_since(spark, table, after + 1):
        if meta:
            try:
                parsed = json.loads(meta)
            except json.JSONDecodeError:
                continue
            if parsed.get("run_id") == run_id and parsed.get("action") == action:
                return version
    return None


def restore(spark: SparkSession, plan: BackfillPlan, table: str, version: int, action: str = "restore",
            **extra: str) -> int:
    """``RESTORE TABLE table TO VERSION AS OF version`` with the run's metadata (``action``, ``extra``); return
    the new version.

    Not idempotent by itself: a rollback first asks :func:`restore_state` whether this run already restored
    ``table`` (a rollback killed after that RESTORE and run again), so each table gets one RESTORE."""
    before = current_version(spark, table)
    with user_metadata(spark, commit_metadata(plan, action, **extra)):
        spark.sql(f"RESTORE TABLE {table} TO VERSION AS OF {int(version)}")
    return find_version(spark, table, plan.commit_run_id, action, before)


#: ``userMetadata`` actions of a run's RESTORE commits: ``rollback`` (``backfill rollback``), ``restore``
#: (automatic, after a failed post-publish check, mart or monitor)
RESTORE_ACTIONS = ("rollback", "restore")


def _parsed(meta: str | None) -> dict:
    try:
        parsed = json.loads(meta) if meta else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def data_neutral(actions: list[dict] | None) -> bool:
    """Whether a commit's ``actions`` (:func:`~backfill_lib.adapters.delta_log.commit_actions`) are Delta's own
    rewrite of files that changed no rows: ``commitInfo`` operation ``OPTIMIZE`` (auto compaction's, or a
    manual one) without ``userMetadata``, and only ``add`` / ``remove`` actions each with ``dataChange`` false.
    ``False`` when the actions are unknown (``None``: the commit's log file is gone)."""
    if not actions:
        return False
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    if info is None or info.get("operation") != "OPTIMIZE" or info.get("userMetadata"):
        return False
    files = [a for a in actions if "commitInfo" not in a]
    return all(set(a) <= {"add", "remove"} and next(iter(a.values())).get("dataChange") is False for a in files)


def restore_state(spark: SparkSession, table: str, run_id: str, published: int,
                  restore_to: int) -> tuple[str, int | None, list[int]]:
    """Where a rollback of run ``run_id`` stands on ``table``, which the run published as version ``published``
    and which the rollback restores to version ``restore_to``: ``("restored", V, [])`` when the run's own RESTORE
    commit (``userMetadata`` run_id ``run_id``, action ``rollback`` or ``restore``) is version ``V``;
    ``("unchanged", None, [])`` when later commits already brought the table back to the data files (with their
    deletion vectors) and schema of ``restore_to``; else ``("todo", None, later)`` with the versions committed
    after ``published`` (oldest first) that a RESTORE would undo and that changed data: a :func:`data_neutral`
    commit (Delta's auto compaction right after the run's) is left out, as restoring undoes no rows of it."""
    commits = user_metadata_since(spark, table, published + 1)
    for version, meta in commits:  # newest first
        parsed = _parsed(meta)
        if parsed.get("run_id") == run_id and parsed.get("action") in RESTORE_ACTIONS:
            return "restored", version, []
    later = sorted(v for v, _ in commits)
    # With nothing after the run's own commit the table holds what the run published: not the old content.
    if later and holds_version(spark, table, restore_to):
        return "unchanged", None, []
    if later:
        snapshot = latest_snapshot(spark, table)
        later = [v for v in later if not data_neutral(commit_actions(spark, snapshot, v))]
    return "todo", None, later


def holds_version(spark: SparkSession, table: str, version: int) -> bool:
    """Whether ``table``'s latest snapshot has exactly the data files (paths and deletion vectors, from the
    Delta log: no data read) and the schema of ``version``, as a RESTORE to ``version`` leaves it. ``False``
    when that cannot be told (the version's log is gone, Delta's internal API changed shape)."""
    now = latest_snapshot(spark, table)
    if int(now.version()) == version:
        return True
    # the two snapshots' files from the Delta log; under Spark Connect (no log objects), the version's schema and rows
    return log_reader(spark).holds_version(table, now, version)
