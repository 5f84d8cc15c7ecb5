"""What each strategy is, as the plan and the report need it: its name, traits and dry-run text. Pure.

The Spark side of a strategy (:mod:`backfill_lib.strategies.base` and one module per strategy) extends its kind
here, so the dry run (:mod:`backfill_lib.plan.explain`) asks the same object the run executes with, and needs no
Spark: :func:`kind_for` gives the kind, :func:`backfill_lib.strategies.strategy_for` the implementation.
"""

from __future__ import annotations

from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.request import PublishMode, Strategy
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.plan.change_feed import ChangeRows, describe_change_feed


def staged_total(plan: BackfillPlan, staged: dict[str, int | None] | None) -> int | None:
    """The staged rows of the planned partitions (a partition missing from ``staged`` staged none), or ``None``
    when ``staged`` is ``None`` or holds an unknown count."""
    if staged is None:
        return None
    counts = [staged.get(p.key, 0) for p in plan.partitions]
    return None if any(n is None for n in counts) else sum(counts)


def merge_keys(plan: BackfillPlan) -> tuple[str, ...]:
    """The columns the MERGE matches rows on: the request's keys and the range's column(s) (so a key that moves
    to another partition is a delete and an insert, as the diff counts it), and the target's IDENTITY columns:
    Delta refuses to update one (``DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``, even to the same value), so a
    row whose IDENTITY value changed is a delete and an insert of the staged row too, and a matched row's
    update sets every other column."""
    return tuple(dict.fromkeys([*plan.request.keys, *plan.range_columns, *(c.name for c in plan.target_identity)]))


def partitioned_by(plan: BackfillPlan) -> str:
    """The target's partition spec as SQL (every column back-quoted, in order)."""
    return ", ".join(quote_ident(c) for c in plan.partition_spec)


def layout_clause(plan: BackfillPlan) -> str:
    """How a rebuild re-creates the target's layout: `` PARTITIONED BY (...)`` and/or `` CLUSTER BY (...)``
    (liquid clustering, kept across the swap), or nothing for an unpartitioned table."""
    clause = f" PARTITIONED BY ({partitioned_by(plan)})" if plan.partition_spec else ""
    if plan.clustering_columns:
        clause += f" CLUSTER BY ({', '.join(quote_ident(c) for c in plan.clustering_columns)})"
    return clause


def null_safe_keys(keys: tuple[str, ...]) -> str:
    """``t.k <=> s.k AND ...``: a MERGE's match on ``keys``."""
    return " AND ".join(f"t.{quote_ident(k)} <=> s.{quote_ident(k)}" for k in keys)


def patch_match_columns(plan: BackfillPlan) -> tuple[str, ...]:
    """The columns a patch's MERGE matches rows on: the request's keys, then the target's IDENTITY columns that
    are not keys. Delta refuses to update an IDENTITY column (even to its value), so a matched row's update sets
    every other column, and a staged row whose IDENTITY value differs from its key's row in the target replaces
    that row (a delete and an insert in the same MERGE, :meth:`backfill_lib.strategies.patch.Patch.write`)."""
    return tuple(dict.fromkeys([*plan.request.keys, *(c.name for c in plan.target_identity)]))


class StrategyKind:
    """A strategy's traits and dry-run text; the Spark implementation adds staging, publishing and verifying."""

    name = ""
    #: The request's strategy this implements.
    kind: Strategy = Strategy.RECOMPUTE
    #: Whether staged rows replace whole partitions, so row-count gates compare them with the target's rows.
    replaces_partitions = True
    #: publishing rewrites each partition whole, so target rows that repeat a key end up once (not a MERGE)
    removes_repeated_keys = True
    #: Whether staging writes in the plan's ``write_time_zone`` (a staging table partitioned like the target's).
    stages_in_write_zone = False
    #: The publishing commit, as the Change Data Feed line names it.
    publishing = "the publishing commit"
    #: Whether the run's staged rows may be pinned in the session rather than written to a staging table
    #: (:mod:`backfill_lib.core.staging_mode`): publishing reads the range's staged rows.
    can_pin = True

    @property
    def whole_table(self) -> bool:
        """Whether the run stages, validates and publishes the whole table rather than the range."""
        return self.kind.whole_table

    def describe(self, plan: BackfillPlan) -> str:
        raise NotImplementedError

    def as_published(self, plan: BackfillPlan, before, staged):
        """The range's rows as publishing leaves them (or would), from the target's rows in range ``before`` and
        the staged rows in range (both Spark DataFrames): what a report metric "after" is computed on, over the
        same rows as "before". Default: the staged rows, which replace the range."""
        return staged

    def publish_statement(self, plan: BackfillPlan, shown: int | None = None) -> str:
        """The publishing statement, as it runs (``shown``: long ``IN`` lists shortened, for the dry run)."""
        raise NotImplementedError

    def always_publishes(self, casts: tuple[ColumnCast, ...]) -> bool:
        """Whether publishing goes ahead even when every staged partition equals the target's (the diff found
        no change): when the run adds a column. A rebuild always publishes."""
        return self.whole_table or any(c.new for c in casts)

    def rows_after(self, plan: BackfillPlan, before: int | None, staged: int | None,
                   diff: dict | None) -> int | None:
        """A partition's rows as publishing leaves it (or would), over the same scope as its rows before (every
        row of the partition), from its rows before (the plan's Delta-log rows), its staged rows and its diff by
        key (a ledger row: ``inserted``, ``deleted``, ...); each is ``None`` when unknown, and so is the result
        when it needs one that is. Default: the staged rows, which replace the partition."""
        return staged

    def change_rows(self, plan: BackfillPlan, staged: dict[str, int | None] | None = None,
                    diffs: dict[str, dict] | None = None) -> ChangeRows | None:
        """The change rows publishing ``plan`` emits when the target has the Change Data Feed on, from the plan
        and, once known, ``staged`` (staged rows by partition key) and ``diffs`` (by partition key: ``inserted``,
        ``deleted``, ``updated`` rows, as the ledger holds them). Default: ``None``, not estimated."""
        return None

    def change_feed(self, plan: BackfillPlan, staged: dict[str, int | None] | None = None,
                    diffs: dict[str, dict] | None = None) -> str:
        """One line on the target's Change Data Feed: off, or on and what publishing emits there."""
        return describe_change_feed(plan.target_change_data_feed, self.change_rows(plan, staged, diffs), self.publishing)


class RecomputeKind(StrategyKind):
    name = "recompute"
    publishing = "one replaceWhere commit"

    def publish_predicate(self, plan: BackfillPlan, shown: int | None = None) -> str:
        """The ``replaceWhere`` predicate: the planned partitions and ``target.where`` (partition columns only)."""
        return plan.predicate(shown=shown)

    def publish_statement(self, plan: BackfillPlan, shown: int | None = None) -> str:
        return f"replaceWhere on {plan.target_table}: {self.publish_predicate(plan, shown)}"

    def describe(self, plan: BackfillPlan) -> str:
        return (
            f"recompute: every row of the {len(plan.partitions):,} partitions below is replaced by the rows "
            f"{plan.request.source.sql} derives for them, in one replaceWhere commit; rows outside them are never "
            "written, and a source row outside them fails the run"
        )

    def change_rows(self, plan: BackfillPlan, staged=None, diffs=None) -> ChangeRows:
        """A ``replaceWhere`` removes every file in range: a delete per target row in range (the plan's
        ``numRecords``; the fence keeps them unchanged until the commit) and an insert per staged row."""
        return ChangeRows(merge=False, deletes=plan.total.rows, inserts=staged_total(plan, staged))


class RebuildKind(StrategyKind):
    name = "rebuild"
    kind = Strategy.REBUILD
    #: its staging table is partitioned like the target, so its writes need the write zone's partition values
    stages_in_write_zone = True
    #: the swap reads its staging table by name (``AS SELECT * FROM``)
    can_pin = False

    def publish_statement(self, plan: BackfillPlan, shown: int | None = None) -> str:
        return (f"CREATE OR REPLACE TABLE {plan.target_table} USING delta{layout_clause(plan)} "
                f"AS SELECT * FROM {plan.staging_table}")

    def describe(self, plan: BackfillPlan) -> str:
        kept = "".join(f"; IDENTITY column {c.name} keeps its values, its definition (START WITH {c.start} "
                       f"INCREMENT BY {c.step}) and a high-water mark at or past every number it holds"
                       for c in plan.target_identity if not c.always and c.start is not None)
        return (
            f"rebuild: the whole table is re-created from {plan.request.source.sql} (new logic or schema) into "
            f"staging, then swapped in by one CREATE OR REPLACE TABLE ... AS SELECT commit; history is kept, so "
            f"RESTORE to version {plan.target_version} undoes it; readers see the old or the new table, never neither. "
            f"All {len(plan.partitions):,} current partitions are touched{kept}"
        )


class PatchKind(StrategyKind):
    name = "patch"
    kind = Strategy.PATCH
    replaces_partitions = False

    def as_published(self, plan: BackfillPlan, before, staged):
        """Without ``delete_missing``: the target's rows, each matched by a staged key (null-safe) taking the
        staged columns' values, and the staged rows of new keys, as the MERGE writes them (a column the staged
        rows lack keeps the target's value, NULL on an inserted row). With it: the staged rows."""
        from pyspark.sql import functions as F  # only here: the kinds import without pyspark

        if plan.request.delete_missing:
            return staged
        names = list(staged.columns)
        s = staged.select(*[F.col(quote_ident(c)).alias(f"_s{i}") for i, c in enumerate(names)], F.lit(True).alias("_in"))
        on = [before[quote_ident(k)].eqNullSafe(F.col(f"_s{names.index(k)}")) for k in plan.request.keys]
        joined = before.join(s, on, "full_outer")
        return joined.select(*[
            (F.when(F.col("_in"), F.col(f"_s{names.index(c)}")).otherwise(before[quote_ident(c)]) if c in names
             else before[quote_ident(c)]).alias(c) for c in before.columns])

    def merge_condition(self, plan: BackfillPlan, shown: int | None = None) -> str:
        """The MERGE's ``ON``: the null-safe keys (and the target's IDENTITY columns, :func:`patch_match_columns`)
        and the planned partitions and ``target.where`` of the target ``t``."""
        return f"{null_safe_keys(patch_match_columns(plan))} AND {plan.predicate(qualifier='t', shown=shown)}"

    def publish_statement(self, plan: BackfillPlan, shown: int | None = None) -> str:
        return f"MERGE INTO {plan.target_table} t USING staged s ON {self.merge_condition(plan, shown)}"

    def rows_after(self, plan: BackfillPlan, before: int | None, staged: int | None,
                   diff: dict | None) -> int | None:
        """Without ``delete_missing`` the MERGE keeps every target row and adds the inserted keys: the rows
        before plus the diff's inserted (minus deleted) rows. With it, the range holds the staged rows."""
        if plan.request.delete_missing:
            return staged
        if before is None or not diff or diff.get("inserted") is None:
            return None
        return before + diff["inserted"] - (diff.get("deleted") or 0)

    def describe(self, plan: BackfillPlan) -> str:
        keys = ", ".join(plan.request.keys)
        delete = (
            "; target rows in range whose keys the source no longer has are deleted" if plan.request.delete_missing
            else "; target rows the source does not name are kept"
        )
        return (
            f"patch: one MERGE on the keys ({keys}, null-safe) limited to the {len(plan.partitions):,} partitions below "
            f"by a range literal; rows whose values changed are updated and new keys inserted{delete}"
        )


class ChangesOnlyKind(RecomputeKind):
    name = "recompute, publish_mode changes_only"
    removes_repeated_keys = False
    publishing = "one MERGE (publish_mode changes_only)"

    def merge_condition(self, plan: BackfillPlan, shown: int | None = None) -> str:
        """The MERGE's ``ON``: the null-safe keys and partition column, and the planned partitions and
        ``target.where`` of the target ``t``."""
        return f"{null_safe_keys(merge_keys(plan))} AND {plan.predicate(qualifier='t', shown=shown)}"

    def publish_statement(self, plan: BackfillPlan, shown: int | None = None) -> str:
        return f"MERGE INTO {plan.target_table} t USING staged s ON {self.merge_condition(plan, shown)}"

    def describe(self, plan: BackfillPlan) -> str:
        keys = ", ".join(merge_keys(plan))
        return (
            f"recompute (publish_mode changes_only): every row of the {len(plan.partitions):,} partitions below is "
            f"re-derived by {plan.request.source.sql} into staging, then published by one MERGE on the keys ({keys}, "
            "null-safe) limited by a range literal that writes only the rows that differ: changed rows are updated, "
            "new keys inserted and target rows in range whose key is not staged deleted, leaving the same rows as a "
            "replaceWhere; duplicate keys on either side refuse to publish"
        )

    def change_rows(self, plan: BackfillPlan, staged=None, diffs=None) -> ChangeRows:
        """From the diff of the staged rows against the target by key (the same keys and partition column the
        MERGE matches on): its updated, inserted and deleted rows per planned partition."""
        if diffs is None:
            return ChangeRows(merge=True, deletes=None, inserts=None, updates=None)
        keys = {p.key for p in plan.partitions}
        chosen = [d for k, d in diffs.items() if k in keys]
        return ChangeRows(merge=True, deletes=sum(int(d.get("deleted") or 0) for d in chosen),
                          inserts=sum(int(d.get("inserted") or 0) for d in chosen),
                          updates=sum(int(d.get("updated") or 0) for d in chosen))


_KINDS: dict[tuple[Strategy, PublishMode], StrategyKind] = {
    (Strategy.RECOMPUTE, PublishMode.REPLACE): RecomputeKind(),
    (Strategy.REBUILD, PublishMode.REPLACE): RebuildKind(),
    (Strategy.PATCH, PublishMode.REPLACE): PatchKind(),
    (Strategy.RECOMPUTE, PublishMode.CHANGES_ONLY): ChangesOnlyKind(),
}


def kind_for(strategy: Strategy, publish_mode: PublishMode = PublishMode.REPLACE) -> StrategyKind:
    """The kind of ``strategy`` published in ``publish_mode`` (pure; see :func:`backfill_lib.strategies.strategy_for`)."""
    return _KINDS.get((strategy, publish_mode)) or _KINDS[(strategy, PublishMode.REPLACE)]
