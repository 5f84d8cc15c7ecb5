"""``--only missing|failed|changed``: gather the facts :func:`backfill_lib.core.selection.select` decides on, and
restrict the plan to the partitions it selects.

The facts are the ledger's runs of the same request (same ``request_name``, same target table under any spelling),
folded to their latest status, with the partitions their plans batched; and, for ``changed``, whether the files
each partition's reads take (the source SQL over the partition's bounds, and every rule's source table within
them) differ between the versions its last published run pinned and the versions this run pinned. That is
compared first per run over all the partitions it last published (one read at each side), then, only where the
sets differ, over halves of each run of adjacent partitions down to single partitions (a file a partition reads is
read by the range containing it: partition pruning and data skipping only drop files that cannot hold the range's
rows). Files replaced without changing data (``OPTIMIZE``) count as changes: conservative, never missing one.

A source SQL that reads the target itself sees the request's own publishes as commits to one of its sources.
Those are left out: when every version of the target since the run's pin was written by a publish of this
request's runs (their ``published_version`` in the ledger), the target counts as unchanged; when another writer
committed among them, the target's files are compared as any source's (its own publishes then count too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from backfill_lib.core.errors import RequestError, first_line
from backfill_lib.core.selection import OnlyMode, RunFacts, Selection, holding_run, select
from backfill_lib.core.settings import Settings
from backfill_lib.core.table_names import same_location, same_table_key
from backfill_lib.plan.builder import check_selectable, select_partitions
from backfill_lib.plan.model import BackfillPlan, PlannedPartition, SourceVersion
from backfill_lib.plan.source_changes import read_files
from backfill_lib.ledger import Ledger


@dataclass(frozen=True)
class RequestRun:
    """A run of the request from the ledger: its facts and its stored plan summary (``plan_json``)."""

    facts: RunFacts
    summary: dict
    #: the target version its publish wrote (``None``: it published nothing)
    published_version: int | None = None


def request_runs(spark: SparkSession, ledger: Ledger, request_name: str, table: str) -> list[RequestRun]:
    """Every run of ``request_name`` on ``table`` (any spelling) that recorded its plan, with its latest status;
    ``[]`` when the ledger has no ``runs`` table yet (nothing is created: ``backfill plan`` writes nothing)."""
    import json

    key, out = same_table_key(table), []
    for r in ledger.request_events(request_name):
        if r["plan_json"] is None or same_table_key(r["target_table"] or "") != key:
            continue
        summary = json.loads(r["plan_json"])
        keys = frozenset(k for batch in summary.get("batches") or () for k in batch)
        published = None if r["published_version"] is None else int(r["published_version"])
        out.append(RequestRun(RunFacts(r["run_id"], r["status"], int(r["planned_seq"]), keys, int(r["seq"])),
                              summary, published))
    return out


def choose(spark: SparkSession, settings: Settings, plan: BackfillPlan, mode: OnlyMode | str) -> BackfillPlan:
    """``plan`` (every partition of its range, as :func:`~backfill_lib.plan.prepare.prepare` built it) restricted
    to what ``--only mode`` selects (:func:`~backfill_lib.plan.builder.select_partitions`). Reads the ledger (and,
    for ``changed``, the sources' logs and file lists); writes nothing.

    Raises
    ------
    IntakeError
        For a rebuild (:func:`~backfill_lib.plan.builder.check_selectable`).
    """
    mode = OnlyMode(mode)
    check_selectable(plan.request, mode.value, plan.request_path)
    runs = request_runs(spark, Ledger(spark, settings.ledger_schema), plan.request.name, plan.target_table)
    facts = [r.facts for r in runs]
    keys = [p.key for p in plan.partitions]
    changes = None
    if mode is OnlyMode.CHANGED:
        from backfill_lib.adapters.session import session_time_zone

        with session_time_zone(spark, plan.session_time_zone, plan.request_path):
            changes = source_changes(spark, plan, runs)
    selection = select(mode, keys, facts, changes)
    return select_partitions(plan, selection, settings.batch_size, settings.batch_bytes)


def source_changes(spark: SparkSession, plan: BackfillPlan, runs: list[RequestRun]) -> dict[str, str | None]:
    """Per partition key of ``plan`` that a run of ``runs`` published last: why its reads' files changed since that
    run, or ``None`` when they did not (see the module docstring)."""
    by_run: dict[str, list[int]] = {}
    summaries = {r.facts.run_id: r.summary for r in runs}
    facts = [r.facts for r in runs]
    for i, p in enumerate(plan.partitions):
        last = holding_run(p.key, facts)
        if last is not None:
            by_run.setdefault(last.run_id, []).append(i)
    out: dict[str, str | None] = {}
    unpinned = _unpinned_sources(spark, plan)
    own = {r.published_version for r in runs if r.published_version is not None}
    for run_id, indices in by_run.items():
        parts = [plan.partitions[i] for i in indices]
        reason = unpinned and f"source {unpinned} is read unpinned, so its changes since run {run_id} cannot be told"
        stored = summaries[run_id].get("source_versions")  # read alone: an old plan's other fields may not parse
        old_at = None if stored is None else {s["table"]: SourceVersion(**s) for s in stored}
        new_pins = plan.pinned_versions or {}
        if not reason and old_at is None:
            reason = f"run {run_id} did not pin its sources, so their changes cannot be told"
        if not reason:
            missing = [t for t in new_pins if t not in old_at]
            if missing:
                reason = f"source {missing[0]} was not read by run {run_id}"
        if reason:
            out.update({p.key: reason for p in parts})
            continue
        old_pins = {t: s.version for t, s in old_at.items()}
        # A source SQL that reads the target itself: versions written by this request's own publishes are no
        # change of its sources (else each publish would select what it published again next time); when only
        # they came since, the target is compared at the old version on both sides.
        kept = {s.table: old_at[s.table].version for s in plan.source_versions or ()
                if _own_writes_only(plan, old_at[s.table], s, own)}
        new_pins = {**new_pins, **kept}
        moved = [s for s in plan.source_versions or () if s.table not in kept and
                 (old_at[s.table].version, old_at[s.table].location) != (s.version, s.location)]
        if not moved:  # every source at the version (and location) the run read: nothing changed
            out.update({p.key: None for p in parts})
            continue
        versions = ", ".join(f"{s.table} version {old_at[s.table].version} -> {s.version}" for s in moved)
        out.update(_changed_partitions(spark, plan, parts, old_pins, new_pins,
                                       f"source files changed since run {run_id} ({versions})", run_id))
    return out


def _own_writes_only(plan: BackfillPlan, old: SourceVersion, new: SourceVersion, own: set[int]) -> bool:
    """Whether source ``new`` is the plan's target (by location) and every version after ``old``'s up to
    ``new``'s was written by a publish of this request's runs (``own``, from the ledger). Pure."""
    return (same_location(new.location, plan.target_location) and same_location(old.location, new.location)
            and old.version < new.version and all(v in own for v in range(old.version + 1, new.version + 1)))


def _unpinned_sources(spark: SparkSession, plan: BackfillPlan) -> str | None:
    """A table the source SQL names that the plan did not pin (a view, a temporary view, a table that is not
    Delta: read as it is now, its changes cannot be told from versions), or ``"the source SQL"`` when its tables
    cannot be listed (no JVM parser); ``None`` when every named table is pinned."""
    from backfill_lib.intake.sources import source_sql
    from backfill_lib.plan.source_pins import _key_of, _relations

    relations = _relations(spark, source_sql(plan.request))
    if relations is None:
        return "the source SQL"
    pinned = plan.pinned_versions or {}
    request = plan.request
    named = [key for key, _, _, _ in relations]
    named += [_key_of(spark, r.source.table) for r in (*request.reconciliation, *request.metric_rules)]
    return next((key for key in named if key not in pinned), None)


def _changed_partitions(spark: SparkSession, plan: BackfillPlan, parts: list[PlannedPartition], old_pins: dict,
                        new_pins: dict, reason: str, run_id: str) -> dict[str, str | None]:
    """Per partition of ``parts`` (in range order): ``reason`` when the files its reads take at ``old_pins``
    differ from those at ``new_pins``, else ``None``. Whole runs of adjacent partitions are compared first and
    split in halves only where they differ."""
    out: dict[str, str | None] = {}

    def files(group: list[PlannedPartition], pins: dict) -> set[str]:
        return read_files(spark, plan.request, group[0].partition.start, group[-1].partition.end, pins)

    def visit(group: list[PlannedPartition]) -> None:
        try:
            before = files(group, old_pins)
        except Exception as exc:  # the run's pinned versions are gone (log cleaned up, table replaced)
            out.update({p.key: f"the versions run {run_id} pinned are no longer readable: {first_line(exc)}"
                        for p in group})
            return
        if before == files(group, new_pins):
            out.update({p.key: None for p in group})
        elif len(group) == 1:
            out[group[0].key] = reason
        else:
            visit(group[: len(group) // 2])
            visit(group[len(group) // 2:])

    for group in _adjacent(parts):
        visit(group)
    return out


def _adjacent(parts: list[PlannedPartition]) -> list[list[PlannedPartition]]:
    groups: list[list[PlannedPartition]] = []
    for p in parts:
        if groups and groups[-1][-1].partition.end == p.partition.start:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def prepare_selected(spark: SparkSession, settings: Settings, request_path, mode: OnlyMode | str | None,
                     run_id: str | None = None, prepare: Callable | None = None):
    """:func:`~backfill_lib.plan.prepare.prepare` (or ``prepare``, of the same signature), then with ``mode``
    :func:`choose`; returns ``(plan, state)``. Without ``mode``, exactly ``prepare``.

    Raises
    ------
    RequestError
        For an unknown ``mode``.
    IntakeError
        For ``mode`` with a rebuild, before Spark reads anything (see :func:`choose`).
    """
    if prepare is None:
        from backfill_lib.plan.prepare import prepare
    if mode is not None:
        from backfill_lib.intake.request import load_request

        if mode not in {m.value for m in OnlyMode}:  # an OnlyMode is one of them too (a str enum)
            raise RequestError(f"{request_path}: --only takes missing, failed or changed, got '{mode}'")
        check_selectable(load_request(request_path), OnlyMode(mode).value, str(request_path))
    plan, state = prepare(spark, settings, request_path, run_id=run_id)
    if mode is not None:
        plan = choose(spark, settings, plan, mode)
    return plan, state


def empty_selection_message(plan: BackfillPlan) -> str:
    """What ``backfill run --only`` says when nothing is selected (it writes nothing, records no run)."""
    selection: Selection = plan.selection
    return (f"{selection.headline()} of {plan.target_table} in [{plan.range_start}, {plan.range_end}): nothing "
            "to run; no table version written, no run recorded")
