"""The before/after diff by key: staged rows against the target's current rows, and the gate on it.

:func:`diff_by_key` reads each side as narrow ``(key, row hash)`` rows (the key NULL-safe: a NULL key part matches
a NULL key part) and counts, per partition, the keys inserted, deleted, updated and unchanged; only the updated
keys are then compared column by column (which value columns changed and, for numeric columns, by how much), and
only a few changed keys per partition are read whole, as samples for the report. :func:`evaluate` turns the diff
into one :class:`~backfill_lib.core.checks.Check` per partition and threshold of a :class:`DiffGate`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import reduce
from typing import Callable, Sequence, TypeVar

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FloatType, IntegralType

from backfill_lib.adapters.checksums import hash_args, row_hash
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import BackfillError, IntakeError
from backfill_lib.core.partition_keys import PartitionKeys, keys_of
from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.rules import DiffGate

T = TypeVar("T")

#: how many changed rows a partition's diff keeps as samples: the key hash's buckets, one row from each
SAMPLE_BUCKETS = 4
#: up to how many updated and sample keys are broadcast to the scans that read their rows (a few bytes each)
BROADCAST_KEYS = 2_000_000


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


def _is_numeric(kind: DataType) -> bool:
    return isinstance(kind, (IntegralType, DecimalType, FloatType, DoubleType))


def _numeric_change(kind: DataType, staged: Column, current: Column) -> Column:
    """``|staged - current|`` of a numeric ``kind``, integers widened to decimal(38,0) first so the subtraction
    cannot overflow."""
    if isinstance(kind, IntegralType):
        return F.abs(staged.cast("decimal(38,0)") - current.cast("decimal(38,0)"))
    return F.abs(staged - current)


def _same_value(kind: DataType, staged: Column, current: Column) -> Column:
    """Whether a matched row keeps its numeric value: ``staged <=> current`` (NULL-safe), and for a float or
    double the same sign of zero too. ``<=>`` holds ``0.0`` equal to ``-0.0``, but the publish writes the staged
    bits, so a row going from one to the other is rewritten with another value and counts as updated (as the
    ``changes_only`` MERGE counts it, :func:`backfill_lib.strategies.changes_only.differs`). The sign is read
    from the value's text, only for zeros."""
    same = staged.eqNullSafe(current)
    if not isinstance(kind, (FloatType, DoubleType)):
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
    """Diff ``staged`` against ``current`` by ``keys``, per partition, comparing narrow row hashes: the diffs of
    :func:`diff_with_inserted`, without the inserted keys."""
    return diff_with_inserted(staged, current, keys, partition_column, value_columns,
                              corrected_columns=corrected_columns)[0]


def diff_with_inserted(
    staged: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    partition_column: str | PartitionKeys,
    value_columns: Sequence[str] | None = None,
    *,
    corrected_columns: Sequence[str] = (),
    inserted: Callable[[DataFrame, int], T] | None = None,
) -> tuple[dict[str, PartitionDiff], T | None]:
    """Diff ``staged`` against ``current`` by ``keys``, per partition, comparing narrow row hashes.

    Both sides are read as ``(key, row hash)``, the hash over the value columns in the canonical form of
    :func:`~backfill_lib.adapters.checksums.row_hash` (NULL-aware, every column type), and grouped by key in one
    shuffle: that gives every count and the sample keys. Only the updated keys are then joined, on narrow
    per-column hashes (and the numeric columns' values), for ``changed_columns``, ``abs_change`` and
    ``updated_outside``; only the sample keys' rows are read whole.

    Parameters
    ----------
    staged, current : DataFrame
        The rows after and before the backfill, restricted to the same partitions. A key repeated on a side
        counts once per pair of rows it matches, as a join on the keys would pair them. A column whose type
        differs between the sides is compared in the type both widen to (as a ``UNION`` widens it).
    keys : sequence of str
        Key columns, compared NULL-safely. The partition column is always added to the keys, so a key that
        moves partitions counts as deleted from one and inserted into the other.
    partition_column : str or PartitionKeys
        The partition column, or its :class:`PartitionKeys`; results are keyed as the plan keys partitions (a
        bare name is a ``DATE`` column keyed ``YYYY-MM-DD``).
    value_columns : sequence of str, optional
        Columns compared on matched keys (NULL = NULL is unchanged; a float or double ``0.0`` against ``-0.0``
        is a change, as the publish rewrites the bits; a ``MAP`` compares its entries in any order). Default:
        every column of ``current`` that is neither a key nor the partition column.
    corrected_columns : sequence of str
        The columns the backfill is meant to change; see :attr:`PartitionDiff.updated_outside`.

    inserted : callable, optional
        Called, when some key is inserted, with a DataFrame of the inserted keys (one row per inserted key and
        partition, columns ``keys`` as given, without the partition columns the diff adds) and how many rows it
        has; the DataFrame is read from the diff's own per-key rows, so asking it reads neither side again.

    Returns
    -------
    tuple
        One :class:`PartitionDiff` per partition that has rows on either side, by partition key; and what
        ``inserted`` returned (``None`` when no key was inserted or no ``inserted`` was given).

    Raises
    ------
    IntakeError
        A key, partition or value column is missing on one side, or has types on the two sides that no common
        type holds (the message names the column and side).
    """
    keying = keys_of(partition_column)
    asked = list(keys)
    keys = list(dict.fromkeys([*keys, *keying.columns]))
    if value_columns is None:
        value_columns = [c for c in current.columns if c not in keys]
    for side, df in (("staged", staged), ("current", current)):
        for column in [*keys, *value_columns, *corrected_columns]:
            if column not in df.columns:
                raise IntakeError(f"diff: column '{column}' does not exist in the {side} rows")
    both = _both_sides(staged, current, keys, value_columns)
    ks = [f"k{i}" for i in range(len(keys))]
    vs = [f"v{j}" for j in range(len(value_columns))]

    def part(prefix: str = "") -> Column:  # the partition of key columns ``{prefix}k0..``
        return keying.renamed({c: f"{prefix}k{keys.index(c)}" for c in keying.columns}).expr().alias("partition")

    per_key = _per_key(both, ks, vs).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counted = per_key.groupBy(part()).agg(
            F.sum("inserted").alias("inserted"), F.sum("deleted").alias("deleted"),
            F.sum("updated").alias("updated"), F.sum("unchanged").alias("unchanged"),
            # plain min of a bigint per bucket: a hash aggregation, where min_by of a struct would sort
            *[F.min(F.when(F.col("c").isNotNull() & (F.pmod("h", F.lit(SAMPLE_BUCKETS)) == b), F.col("h"))).alias(f"x{b}")
              for b in range(SAMPLE_BUCKETS)]).collect()
        chosen = {(r["partition"], r[f"x{b}"]) for r in counted for b in range(SAMPLE_BUCKETS) if r[f"x{b}"] is not None}
        updated = sum(r["updated"] for r in counted)
        added = sum(r["inserted"] for r in counted)
        found = None
        if inserted is not None and added:
            found = inserted(per_key.where(F.col("inserted") > 0)
                             .select(*[F.col(f"k{keys.index(k)}").alias(k) for k in asked]), added)
        if chosen:  # every updated key's partition has a sample: no sample, no update
            rows = _restricted(both, per_key, ks, vs, chosen, updated)
            try:
                samples = _samples(rows, ks, part(), chosen, keys, value_columns)
                columns = _column_changes(rows, ks, value_columns, corrected_columns, part) if updated else {}
            finally:
                rows.unpersist()
        else:
            samples, columns = {}, {}
    finally:
        per_key.unpersist()
    numeric = [c for j, c in enumerate(value_columns) if _is_numeric(both.schema[f"v{j}"].dataType)]
    out = {}
    for r in counted:
        key = keying.key(r["partition"])
        c = columns.get(r["partition"])
        out[key] = PartitionDiff(
            key,
            r["inserted"],
            r["deleted"],
            r["updated"],
            r["unchanged"],
            {v: c[f"n{j}"] if c else 0 for j, v in enumerate(value_columns)},
            {v: _decimal(c[f"a{value_columns.index(v)}"] if c else None) for v in numeric},
            tuple(corrected_columns),
            c["updated_outside"] if c else 0,
            tuple(sorted(samples.get(r["partition"], []), key=lambda x: x["h"])),
        )
    return out, found


def _both_sides(staged: DataFrame, current: DataFrame, keys: list[str], value_columns: Sequence[str]) -> DataFrame:
    """Both sides as one DataFrame: keys ``k0..``, values ``v0..`` and ``s`` (true on staged rows); a column
    whose types differ is widened as ``UNION`` widens it.

    Positional names keep the sides' columns apart whatever the user's column names are."""
    cols = [*[(c, f"k{i}") for i, c in enumerate(keys)], *[(c, f"v{j}") for j, c in enumerate(value_columns)]]

    def side(df: DataFrame, flag: bool) -> DataFrame:
        return df.select(*[F.col(quote_ident(c)).alias(a) for c, a in cols], F.lit(flag).alias("s"))

    try:
        return side(staged, True).unionByName(side(current, False))
    except AnalysisException:
        for c, _ in cols:
            try:
                staged.select(quote_ident(c)).unionByName(current.select(quote_ident(c))).schema
            except AnalysisException:
                raise IntakeError(f"diff: column '{c}' is {staged.schema[c].dataType.simpleString()} in the staged rows "
                                  f"and {current.schema[c].dataType.simpleString()} in the current rows, which "
                                  "cannot be compared") from None
        raise


def _per_key(both: DataFrame, ks: list[str], vs: list[str]) -> DataFrame:
    """One row per key (``k0..``) of either side: ``inserted``, ``deleted``, ``updated`` and ``unchanged`` (the
    key's pairs of rows, as a join on the keys pairs them), ``h`` (``xxhash64`` of the key) and ``c`` (the
    change: ``inserted``, ``deleted``, ``updated`` or NULL).

    Rows are compared by their row hash: grouped by ``(key, hash)``, the pairs alike are ``sum(staged *
    current)``. One shuffle by key serves both groupings."""
    narrow = both.select(*ks, "s", row_hash(both, vs).alias("rh")).repartition(*ks)
    per_hash = narrow.groupBy(*ks, "rh").agg(F.count_if("s").alias("ns"), F.count_if(~F.col("s")).alias("nt"))
    n = per_hash.groupBy(*ks).agg(F.sum("ns").alias("ns"), F.sum("nt").alias("nt"),
                                  F.sum(F.col("ns") * F.col("nt")).alias("same"))
    ns, nt, same = F.col("ns"), F.col("nt"), F.col("same")
    updated = ns * nt - same
    return n.select(
        *ks,
        F.when(nt == 0, ns).otherwise(0).alias("inserted"),
        F.when(ns == 0, nt).otherwise(0).alias("deleted"),
        updated.alias("updated"),
        same.alias("unchanged"),
        F.xxhash64(*ks).alias("h"),
        F.when(nt == 0, F.lit("inserted")).when(ns == 0, F.lit("deleted")).when(updated > 0, F.lit("updated")).alias("c"),
    )


def _restricted(both: DataFrame, per_key: DataFrame, ks: list[str], vs: list[str], chosen: set[tuple],
                updated: int) -> DataFrame:
    """The rows of both sides whose key is updated or a sample's (cached; the caller unpersists), each as its
    key ``k0..``, ``s``, ``upd`` (an updated key), ``h`` (the key hash), ``c`` (the key's change), per value
    column ``v{j}`` its value if numeric, else its 64-bit hash, and ``j``: the whole row's ``to_json`` text (NULL
    fields written) for a sample's key, else NULL.

    Those keys are broadcast to the scans of both sides when they are few (up to :data:`BROADCAST_KEYS`), so only
    their rows leave the scan; more are joined by a shuffle."""
    sampled = F.col("h").isin(sorted({x for _, x in chosen}))
    interest = (per_key.where((F.col("updated") > 0) | sampled)
                .select(*[F.col(k).alias(f"i{k}") for k in ks], (F.col("updated") > 0).alias("upd"),
                        sampled.alias("smp"), "c"))
    if updated + len(chosen) <= BROADCAST_KEYS:
        interest = F.broadcast(interest)
    rows = both.join(interest, [F.col(k).eqNullSafe(F.col(f"i{k}")) for k in ks])
    values = [(F.col(v) if _is_numeric(both.schema[v].dataType) else F.xxhash64(*hash_args(both, [v]))).alias(v)
              for v in vs]
    text = F.when(F.col("smp"), F.to_json(F.struct(*ks, *vs), {"ignoreNullFields": "false"}))
    return (rows.select(*ks, "s", "upd", F.xxhash64(*ks).alias("h"), "c", *values, text.alias("j"))
            .persist(StorageLevel.MEMORY_AND_DISK))


def _column_changes(rows: DataFrame, ks: list[str], value_columns: Sequence[str], corrected_columns: Sequence[str],
                    part) -> dict[str, dict]:
    """Per partition (raw value of ``part``): ``n{j}`` the updated pairs in which value column ``j`` changed,
    ``a{j}`` the sum of ``|staged - current|`` over them for a numeric column, and ``updated_outside``, from the
    updated keys' narrow rows of :func:`_restricted`, joined by key."""
    types = {f"v{j}": rows.schema[f"v{j}"].dataType for j in range(len(value_columns))}

    def side(flag: bool, prefix: str) -> DataFrame:
        return (rows.where(F.col("upd") & (F.col("s") == F.lit(flag)))
                .select(*[F.col(c).alias(f"{prefix}{c}") for c in [*ks, *types]]))

    joined = side(True, "s").join(side(False, "t"), [F.col(f"s{k}").eqNullSafe(F.col(f"t{k}")) for k in ks])
    changed = {}
    for j, c in enumerate(value_columns):
        s, t, kind = F.col(f"sv{j}"), F.col(f"tv{j}"), types[f"v{j}"]
        changed[c] = ~_same_value(kind, s, t) if _is_numeric(kind) else s != t
    outside = reduce(lambda a, b: a | b, [v for c, v in changed.items() if c not in corrected_columns], F.lit(False))
    aggs = [F.count_if(outside).alias("updated_outside")]
    for j, c in enumerate(value_columns):
        aggs.append(F.count_if(changed[c]).alias(f"n{j}"))
        if _is_numeric(types[f"v{j}"]):
            change = _numeric_change(types[f"v{j}"], F.col(f"sv{j}"), F.col(f"tv{j}"))
            aggs.append(F.sum(F.when(changed[c], change)).alias(f"a{j}"))
    return {r["partition"]: r.asDict() for r in joined.groupBy(part("s")).agg(*aggs).collect()}


def _samples(rows: DataFrame, ks: list[str], part: Column, chosen: set[tuple], keys: list[str],
             value_columns: Sequence[str]) -> dict[object, list[dict]]:
    """The :attr:`PartitionDiff.samples` of the ``chosen`` keys (``(raw partition, key hash)``), by raw
    partition, from the sample rows' text in :func:`_restricted`."""
    sides: dict[tuple, dict[bool, list[dict]]] = {}
    changes: dict[tuple, str] = {}
    for r in sorted(rows.where(F.col("j").isNotNull()).select(part, "h", "c", "s", "j").collect(), key=lambda r: r["j"]):
        if (r["partition"], r["h"]) in chosen:
            sides.setdefault((r["partition"], r["h"]), {}).setdefault(r["s"], []).append(_decoded(r["j"]))
            changes[(r["partition"], r["h"])] = r["c"]
    out: dict[object, list[dict]] = {}
    for (p, x), change in changes.items():
        got = sides[(p, x)]
        after = (got.get(True) or [None])[0]
        # a key repeated on a side: its first row in text order that differs from the other side's
        before = next((t for t in got.get(False, []) if t != after), (got.get(False) or [None])[0])
        keyed = before if change == "deleted" else after
        if keyed is None:
            continue
        out.setdefault(p, []).append({
            "h": int(x),
            "change": change,
            "key": {c: keyed[f"k{i}"] for i, c in enumerate(keys)},
            "before": None if change == "inserted" or before is None else
            {c: before[f"v{j}"] for j, c in enumerate(value_columns)},
            "after": None if change == "deleted" or after is None else
            {c: after[f"v{j}"] for j, c in enumerate(value_columns)},
        })
    return out


def _json_text(raw: object, literal: object) -> str | None:
    # Scalars keep Spark's literal text (parsed with str for numbers); nested values are written back compactly.
    if raw is None:
        return None
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (dict, list)):
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
    return str(literal)


def _decoded(text: str | None) -> dict[str, str | None] | None:
    """A row's ``to_json`` text as ``{field: value text}`` (see :attr:`PartitionDiff.samples`)."""
    if text is None:
        return None
    raw, literal = json.loads(text), json.loads(text, parse_float=str, parse_int=str)
    return {f: _json_text(raw[f], literal[f]) for f in raw}


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

