"""The before/after diff by key: staged rows against the target's current rows, and the gate on it.

:func:`diff_by_key` joins the two sides on their keys (NULL-safe: a NULL key part matches a NULL key part) and
counts, per partition, the keys inserted, deleted, updated and unchanged, which value columns changed and, for
numeric columns, by how much; in the same aggregation it keeps a few changed rows per partition, before and after,
as samples for the report. :func:`evaluate` turns the diff into one :class:`~backfill_lib.core.checks.Check` per
partition and threshold of a :class:`DiffGate`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import reduce
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FloatType, IntegralType

from backfill_lib.core.checks import Check
from backfill_lib.core.errors import BackfillError, IntakeError
from backfill_lib.core.partition_keys import PartitionKeys, keys_of
from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.rules import DiffGate

#: how many changed rows a partition's diff keeps as samples: the key hash's buckets, one row from each
SAMPLE_BUCKETS = 4


@dataclass(frozen=True)
class PartitionDiff:
    """The diff of one partition; every count is in rows (keys, as keys are unique on each side).

    ``changed_columns`` maps every value column to the number of updated rows in which it changed;
    ``abs_change`` maps every numeric value column to the sum over those rows of ``|staged - current|``
    (integer and decimal columns exactly; float and double columns through float arithmetic). A change to or
    from NULL counts in ``changed_columns`` but adds nothing to ``abs_change``. ``updated_outside`` counts
    updated rows in which a column other than ``corrected_columns`` changed.

    ``samples`` holds up to :data:`SAMPLE_BUCKETS` changed rows (inserted, deleted or updated keys), chosen
    deterministically by ``h = xxhash64(key columns)``: in each bucket ``pmod(h, SAMPLE_BUCKETS)``, the row with
    the smallest ``h``; in ascending ``h``. Each is ``{"h": int, "change": "inserted" | "deleted" | "updated",
    "key": {column: text}, "before": {column: text} | None, "after": {column: text} | None}`` (``key`` holds the
    key and partition columns, ``before``/``after`` every value column, ``None`` on the side where the key is
    missing), each value the text of its JSON form in Spark's ``to_json`` (numbers exactly as Spark writes them,
    timestamps in the session time zone with their offset; NULL is ``None``). Samples illustrate; they are left
    out of equality.
    """

    partition: str
    inserted: int
    deleted: int
    updated: int
    unchanged: int
    changed_columns: dict[str, int] = field(default_factory=dict)
    abs_change: dict[str, Decimal] = field(default_factory=dict)
    corrected_columns: tuple[str, ...] = ()
    updated_outside: int = 0
    samples: tuple[dict, ...] = field(default=(), compare=False)

    @property
    def rows_before(self) -> int:
        return self.deleted + self.updated + self.unchanged

    @property
    def rows_after(self) -> int:
        return self.inserted + self.updated + self.unchanged


def _numeric_change(kinds: tuple[DataType, DataType], staged: Column, current: Column) -> Column | None:
    """``|staged - current|``, with integers widened to decimal(38,0) first so the subtraction cannot overflow."""
    if all(isinstance(k, IntegralType) for k in kinds):
        return F.abs(staged.cast("decimal(38,0)") - current.cast("decimal(38,0)"))
    if all(isinstance(k, (IntegralType, DecimalType, FloatType, DoubleType)) for k in kinds):
        return F.abs(staged - current)
    return None


def _same_value(kinds: tuple[DataType, DataType], staged: Column, current: Column) -> Column:
    """Whether a matched row keeps its value: ``staged <=> current`` (NULL-safe), and for a float or double on
    either side the same sign of zero too. ``<=>`` holds ``0.0`` equal to ``-0.0``, but the publish writes the
    staged bits, so a row going from one to the other is rewritten with another value and counts as updated
    (as the ``changes_only`` MERGE counts it, :func:`backfill_lib.strategies.changes_only.differs`). The sign is
    read from the value's text, only for zeros."""
    same = staged.eqNullSafe(current)
    if not any(isinstance(k, (FloatType, DoubleType)) for k in kinds):
        return same
    negative = lambda c: c.cast("string").startswith("-")  # noqa: E731
    return same & (staged.isNull() | (staged != 0) | (negative(staged) == negative(current)))


def diff_by_key(
    staged: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    partition_column: str | PartitionKeys,
    value_columns: Sequence[str] | None = None,
    *,
    corrected_columns: Sequence[str] = (),
) -> dict[str, PartitionDiff]:
    """Diff ``staged`` against ``current`` by ``keys``, per partition, in one aggregation after one join.

    Parameters
    ----------
    staged, current : DataFrame
        The rows after and before the backfill, restricted to the same partitions. ``keys`` must be unique
        on each side (duplicates would be counted once per matching pair).
    keys : sequence of str
        Key columns, compared NULL-safely. The partition column is always added to the join, so a key that
        moves partitions counts as deleted from one and inserted into the other.
    partition_column : str or PartitionKeys
        The partition column, or its :class:`PartitionKeys`; results are keyed as the plan keys partitions (a
        bare name is a ``DATE`` column keyed ``YYYY-MM-DD``).
    value_columns : sequence of str, optional
        Columns compared on matched keys (NULL-safely, so NULL = NULL is unchanged; a float or double ``0.0``
        against ``-0.0`` is a change, as the publish rewrites the bits). Default: every column of ``current``
        that is neither a key nor the partition column.
    corrected_columns : sequence of str
        The columns the backfill is meant to change; see :attr:`PartitionDiff.updated_outside`.

    Returns
    -------
    dict of str to PartitionDiff
        One entry per partition that has rows on either side.

    Raises
    ------
    IntakeError
        A key, partition or value column is missing on one side (the message names the column and side).
    """
    keying = keys_of(partition_column)
    keys = list(dict.fromkeys([*keys, *keying.columns]))
    if value_columns is None:
        value_columns = [c for c in current.columns if c not in keys]
    for side, df in (("staged", staged), ("current", current)):
        for column in [*keys, *value_columns, *corrected_columns]:
            if column not in df.columns:
                raise IntakeError(f"diff: column '{column}' does not exist in the {side} rows")
    types = {c: (staged.schema[c].dataType, current.schema[c].dataType) for c in value_columns}
    # Positional aliases keep the two sides apart whatever the user's column names are.
    cols = [*keys, *value_columns]
    s = staged.select(F.lit(True).alias("s_in"), *[F.col(quote_ident(c)).alias(f"s{i}") for i, c in enumerate(cols)])
    t = current.select(F.lit(True).alias("t_in"), *[F.col(quote_ident(c)).alias(f"t{i}") for i, c in enumerate(cols)])
    on = reduce(lambda a, b: a & b, [F.col(f"s{i}").eqNullSafe(F.col(f"t{i}")) for i in range(len(keys))])
    joined = s.join(t, on, "full_outer")

    both = F.col("s_in").isNotNull() & F.col("t_in").isNotNull()
    changed = {
        c: both & ~_same_value(types[c], F.col(f"s{i}"), F.col(f"t{i}"))
        for i, c in enumerate(value_columns, start=len(keys))
    }
    any_changed = reduce(lambda a, b: a | b, changed.values(), F.lit(False))
    outside = reduce(lambda a, b: a | b, [v for c, v in changed.items() if c not in corrected_columns], F.lit(False))
    aggs = [
        F.count_if(F.col("t_in").isNull()).alias("inserted"),
        F.count_if(F.col("s_in").isNull()).alias("deleted"),
        F.count_if(any_changed).alias("updated"),
        F.count_if(both & ~any_changed).alias("unchanged"),
        F.count_if(outside).alias("updated_outside"),
    ]
    numeric = {}
    for i, c in enumerate(value_columns, start=len(keys)):
        aggs.append(F.count_if(changed[c]).alias(f"n{i}"))
        change = _numeric_change(types[c], F.col(f"s{i}"), F.col(f"t{i}"))
        if change is not None:
            numeric[c] = f"a{i}"
            aggs.append(F.sum(F.when(changed[c], change)).alias(f"a{i}"))
    aggs += _sample_aggregates(len(keys), len(cols), any_changed)
    part = keying.renamed({c: f"s{keys.index(c)}" for c in keying.columns}).expr()
    part = F.coalesce(part, keying.renamed({c: f"t{keys.index(c)}" for c in keying.columns}).expr()).alias("partition")
    grouped = joined.groupBy(part).agg(*aggs)
    # to_json after the aggregation: only the kept rows are serialised, and NULL fields are written (as null)
    grouped = grouped.withColumns({f"x{b}": F.to_json(F.col(f"x{b}"), {"ignoreNullFields": "false"})
                                   for b in range(SAMPLE_BUCKETS)})
    out = {}
    for r in grouped.collect():
        key = keying.key(r["partition"])
        samples = [_sample(r[f"x{b}"], keys, value_columns) for b in range(SAMPLE_BUCKETS)]
        out[key] = PartitionDiff(
            key,
            r["inserted"],
            r["deleted"],
            r["updated"],
            r["unchanged"],
            {c: r[f"n{i}"] for i, c in enumerate(value_columns, start=len(keys))},
            {c: _decimal(r[a]) for c, a in numeric.items()},
            tuple(corrected_columns),
            r["updated_outside"],
            tuple(sorted((x for x in samples if x is not None), key=lambda x: x["h"])),
        )
    return out


def _sample_aggregates(n_keys: int, n_cols: int, any_changed: Column) -> list[Column]:
    """One ``min_by`` per bucket of the key hash over the changed rows of the joined sides (columns ``s0..``,
    ``t0..``, ``s_in``, ``t_in``): a struct ``(h, c, s0.., t0..)`` named ``x0..``, NULL when the bucket has none.

    ``min_by`` skips rows whose ordering is NULL, so the ordering is NULL on every row that is not a change of
    that bucket. The key is the matched one (equal on both sides, NULL-safely) or the one side's.

    Cost: no scan is added, but a struct is not a fixed-width aggregation buffer, so Spark plans the diff's
    aggregation as a SortAggregate (a local sort of the joined rows by partition) rather than a HashAggregate."""
    h = F.xxhash64(*[F.coalesce(F.col(f"s{i}"), F.col(f"t{i}")) for i in range(n_keys)])
    inserted, deleted = F.col("t_in").isNull(), F.col("s_in").isNull()
    change = F.when(inserted, F.lit("inserted")).when(deleted, F.lit("deleted")).otherwise(F.lit("updated"))
    row = F.struct(h.alias("h"), change.alias("c"), *[F.col(f"{side}{i}") for side in "st" for i in range(n_cols)])
    changed = inserted | deleted | any_changed
    return [F.min_by(row, F.when(changed & (F.pmod(h, F.lit(SAMPLE_BUCKETS)) == b), h)).alias(f"x{b}")
            for b in range(SAMPLE_BUCKETS)]


def _json_text(raw: object, literal: object) -> str | None:
    # Scalars keep Spark's literal text (parsed with str for numbers); nested values are written back compactly.
    if raw is None:
        return None
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (dict, list)):
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
    return str(literal)


def _sample(text: str | None, keys: list[str], value_columns: Sequence[str]) -> dict | None:
    """A sample struct's ``to_json`` text (see :func:`_sample_aggregates`) as a :attr:`PartitionDiff.samples` entry."""
    if text is None:
        return None
    raw, literal = json.loads(text), json.loads(text, parse_float=str, parse_int=str)

    def side(prefix: str, columns: Sequence[str], start: int) -> dict[str, str | None]:
        return {c: _json_text(raw[f"{prefix}{i}"], literal[f"{prefix}{i}"]) for i, c in enumerate(columns, start=start)}

    change = raw["c"]
    return {
        "h": int(raw["h"]),
        "change": change,
        "key": side("t" if change == "deleted" else "s", keys, 0),
        "before": None if change == "inserted" else side("t", value_columns, len(keys)),
        "after": None if change == "deleted" else side("s", value_columns, len(keys)),
    }


def _decimal(value) -> Decimal:
    # No changed row gives a NULL sum: zero change. Floats go through repr, their shortest exact form.
    if value is None:
        return Decimal(0)
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _percent(x: Fraction) -> str:
    return f"{float(x) * 100:.2f}%"


def _ratio(x: Fraction) -> str:
    return format(float(x), ".6g")


def evaluate(diffs: dict[str, PartitionDiff], gate: DiffGate, batch: int | None = None) -> list[Check]:
    """One ``kind="diff"`` check per partition of ``diffs`` (in key order) and threshold set in ``gate``.

    Fractions are exact (``updated <= fraction * rows_before`` as rationals); a partition with no rows before
    has fraction 0. Check names are ``diff.max_deleted``, ``diff.max_inserted``, ``diff.max_updated_fraction``
    and ``diff.max_updated_fraction_outside``; ``observed`` is the count or fraction, ``expected`` the limit.

    Raises
    ------
    BackfillError
        When the gate limits updates outside corrected columns but a diff was computed with other
        ``corrected_columns`` than ``gate.allowed_changed_columns`` (its ``updated_outside`` would be wrong).
    """
    checks = []
    for key in sorted(diffs):
        d = diffs[key]

        def add(name: str, ok: bool, observed: str, limit: str, message: str) -> None:
            checks.append(Check("diff", f"diff.{name}", ok, key, batch, observed, limit, None if ok else f"{key}: {message}"))

        if gate.max_deleted is not None:
            add("max_deleted", d.deleted <= gate.max_deleted, str(d.deleted), str(gate.max_deleted),
                f"{d.deleted} deleted keys, at most {gate.max_deleted} allowed")
        if gate.max_inserted is not None:
            add("max_inserted", d.inserted <= gate.max_inserted, str(d.inserted), str(gate.max_inserted),
                f"{d.inserted} inserted keys, at most {gate.max_inserted} allowed")
        fraction = Fraction(d.updated, d.rows_before or 1)
        if gate.max_updated_fraction is not None:
            limit = Fraction(str(gate.max_updated_fraction))
            add("max_updated_fraction", fraction <= limit, _ratio(fraction), str(gate.max_updated_fraction),
                f"{d.updated} of {d.rows_before} rows updated ({_percent(fraction)}), at most {_percent(limit)} allowed")
        if gate.max_updated_fraction_outside is not None:
            if set(d.corrected_columns) != set(gate.allowed_changed_columns):
                raise BackfillError(
                    f"diff of partition {key} was computed with corrected columns {list(d.corrected_columns)}, "
                    f"the gate allows {list(gate.allowed_changed_columns)}"
                )
            outside = Fraction(d.updated_outside, d.rows_before or 1)
            limit = Fraction(str(gate.max_updated_fraction_outside))
            columns = ", ".join(c for c, n in d.changed_columns.items() if n and c not in gate.allowed_changed_columns)
            add("max_updated_fraction_outside", outside <= limit, _ratio(outside), str(gate.max_updated_fraction_outside),
                f"{d.updated_outside} of {d.rows_before} rows updated outside the corrected columns "
                f"({_percent(outside)}, in {columns}), at most {_percent(limit)} allowed")
    return checks


def diff_rows(diffs) -> dict[str, dict]:
    """:class:`PartitionDiff` objects as the ledger's diff rows, by partition key: the counts, and
    ``changed_columns``, ``abs_change`` and ``samples`` as the JSON text the ledger stores."""
    return {d.partition: {"inserted": d.inserted, "deleted": d.deleted, "updated": d.updated,
                          "unchanged": d.unchanged, **diff_json(d)} for d in diffs}


def diff_json(d: PartitionDiff) -> dict[str, str]:
    """``changed_columns``, ``abs_change`` (decimal text) and ``samples`` of ``d`` as JSON text, as the ledger's
    diffs table stores them."""
    return {"changed_columns": json.dumps(d.changed_columns),
            "abs_change": json.dumps({k: str(v) for k, v in d.abs_change.items()}),
            "samples": json.dumps(list(d.samples), ensure_ascii=False)}


def target_duplicate_checks(diffs, staged_rows: dict[str, int], replaces: bool) -> list[Check]:
    """One ``target_keys`` check per partition whose target rows repeat a key the staged rows hold once.

    The diff joins each target row once; a staged key matched by ``k`` target rows counts ``k`` times, so
    ``inserted + updated + unchanged`` exceeds the staged rows (``staged_rows``, by partition key, keys unique) by
    the target's extra rows. ``replaces``: publishing rewrites the partition (recompute with ``publish_mode:
    replace``), which removes them (a passing check saying so); otherwise (``changes_only``) a failing one.
    """
    checks = []
    for d in diffs:
        extra = d.inserted + d.updated + d.unchanged - staged_rows.get(d.partition, 0)
        if extra <= 0:
            continue
        what = (f"the target holds {extra} more rows than keys in partition {d.partition} (duplicate keys)")
        checks.append(Check(
            "target_keys", "target keys unique", replaces, partition=d.partition, observed=f"{extra} extra rows",
            expected="0 extra rows",
            message=(f"{what}; publishing replaces the partition, leaving each key once" if replaces else
                     f"{what}; publish_mode changes_only would keep them: publish with publish_mode: replace")))
    return checks

