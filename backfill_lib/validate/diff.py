"""The before/after diff by key: staged rows against the target's current rows, and the gate on it.

:func:`diff_by_key` reads each side as narrow rows (the key, a row hash, and per value column its hash or, if
numeric, its value; the key NULL-safe: a NULL key part matches a NULL key part) and pairs them by key in one
join, summed per partition as the pairs are made: the keys inserted, deleted, updated and unchanged, which value
columns changed and, for numeric columns, by how much, all come from that one pass, without joining wide rows.
Only a few changed keys per partition are then read whole, as samples for the report. :func:`evaluate` turns the
diff into one :class:`~backfill_lib.core.checks.Check` per partition and threshold of a :class:`DiffGate`.
"""

from __future__ import annotations

import json
import math
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from functools import reduce
from typing import Callable, Sequence

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, DataType, DateType, DecimalType, DoubleType, FloatType, IntegralType,
                               StringType, TimestampNTZType, TimestampType)

from backfill_lib.adapters.checksums import hash_args, key_hash, row_hash
from backfill_lib.adapters.pool import in_pool
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import BackfillError, IntakeError
from backfill_lib.core.partition_keys import PartitionKeys, keys_of
from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.rules import DiffGate

#: how many changed rows a partition's diff keeps as samples: the key hash's buckets, one row from each
SAMPLE_BUCKETS = 4
#: how many sample rows a diff reads in all, over every partition: as many as the run's report shows
SAMPLE_ROWS = 20
#: up to how many keys are broadcast to the scans that read their rows (a few bytes each)
BROADCAST_KEYS = 2_000_000
#: up to how many rows (both sides together) a diff pairs in the driver: one Spark job collects them, where pairing
#: them in Spark runs a job per query stage and another for the samples, each a fixed fraction of a second
DRIVER_ROWS = 20_000


@dataclass(frozen=True)
class PartitionDiff:
    """The diff of one partition; every count is in rows (keys, as keys are unique on each side).

    ``changed_columns`` maps every value column to the number of updated rows in which it changed;
    ``abs_change`` maps every numeric value column to the sum over those rows of ``|staged - current|``
    (integer columns exactly; decimal columns at the scale Spark gives their difference, one digit less at
    precision 38; float and double columns through float arithmetic). A change to or
    from NULL counts in ``changed_columns`` but adds nothing to ``abs_change``. A decimal column with a change, or
    a sum of changes, past the 38 digits Spark's decimal types hold is left out of ``abs_change`` in that
    partition (its rows still count in ``changed_columns``). ``updated_outside`` counts
    updated rows in which a column other than ``corrected_columns`` changed.

    ``samples`` holds up to :data:`SAMPLE_BUCKETS` changed rows (inserted, deleted or updated keys), chosen
    deterministically by ``h``, the NULL-aware hash of the key and partition columns
    (:func:`~backfill_lib.adapters.checksums.key_hash`: ``(2, NULL)`` and ``(NULL, 2)`` hash apart): in each
    bucket ``pmod(h, SAMPLE_BUCKETS)``, the row with the smallest ``h``, if it is among the :data:`SAMPLE_ROWS`
    smallest of those rows over every partition of the diff (so a diff of many partitions reads only a few
    partitions' rows whole, and the report, which shows that many, loses none); in ascending ``h``. Each is ``{"h": int,
    "change": "inserted" | "deleted" | "updated", "key": {column: text}, "before": {column: text} | None,
    "after": {column: text} | None}`` (``key`` holds the key and partition columns, ``before``/``after`` every
    value column, ``None`` on the side where the key is missing), each value the text of its JSON form in
    Spark's ``to_json`` (numbers exactly as Spark writes them, timestamps in the session time zone with their
    offset; NULL is ``None``). Samples illustrate; they are left out of equality.
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
    cannot overflow; a decimal difference past the 38 digits Spark's difference type holds is NULL."""
    if isinstance(kind, IntegralType):
        return F.abs(staged.cast("decimal(38,0)") - current.cast("decimal(38,0)"))
    if isinstance(kind, DecimalType):
        return F.abs(F.try_subtract(staged, current))
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
    inserted: Callable[[DataFrame, int], object] | None = None,
    rows_at_most: int | None = None,
) -> dict[str, PartitionDiff]:
    """Diff ``staged`` against ``current`` by ``keys``, per partition, comparing narrow row hashes.

    Both sides are read as narrow rows: the key, the row hash over the value columns in the canonical form of
    :func:`~backfill_lib.adapters.checksums.row_hash` (NULL-aware, every column type), and per value column its
    64-bit hash (its value, for a numeric column). One full outer join on the key pairs them and gives every
    count, ``changed_columns``, ``abs_change``, ``updated_outside`` and the sample keys; only the sample keys' rows
    are read whole.

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
        Called once, when some key is inserted, with the inserted keys (one per inserted key and partition, of
        ``keys`` as given, without the partition columns the diff adds) and how many rows were inserted (at least
        as many as those keys): a DataFrame of columns ``keys`` (a keys-only pass over both sides), or, when the
        rows were paired in the driver and every key is of a type :func:`_literal` accepts, a list of tuples of
        Python values (no Spark job). From another thread, while the sample rows are read, its Spark jobs in the
        run's FAIR pool. What it raises is raised here.
    rows_at_most : int, optional
        At least as many rows as both sides hold together, when the caller knows it. Up to :data:`DRIVER_ROWS`, and
        with keys of types whose Python values compare as Spark joins them (integers, decimals, strings of the
        default collation, booleans, dates and timestamps), the rows are collected in one Spark job and paired in
        the driver, with the same results.

    Returns
    -------
    dict of str to PartitionDiff
        One entry per partition that has rows on either side.

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
    types = {v: both.schema[v].dataType for v in vs}
    outside = [f"v{j}" for j, c in enumerate(value_columns) if c not in corrected_columns]

    def part(prefix: str = "") -> Column:  # the partition of key columns ``{prefix}k0..``
        return keying.renamed({c: f"{prefix}k{keys.index(c)}" for c in keying.columns}).expr().alias("partition")

    collected = None
    if rows_at_most is not None and rows_at_most <= DRIVER_ROWS and _driver_keys(both, ks) is not None:
        collected = _collected(both, ks, vs, part())
        counted = _driver_sums(collected, types, outside)
    else:
        # One job: both sides' narrow rows paired by key (a full outer join: a key repeated on a side pairs with
        # each row of the other, as the docstring's counts say) and summed per partition as the pairs are made.
        counted = {r["partition"]: r.asDict()
                   for r in _pairs(both, ks, vs).groupBy(part()).agg(*_pair_sums(types, outside)).collect()}
    chosen = set(sorted(((p, r[f"x{b}"]) for p, r in counted.items() for b in range(SAMPLE_BUCKETS)
                         if r[f"x{b}"] is not None), key=lambda c: c[1])[:SAMPLE_ROWS])
    added = sum(r["inserted"] for r in counted.values())
    # The inserted keys' callback and the sample read are independent jobs: at once, each mostly fixed latency.
    with ThreadPoolExecutor(1, thread_name_prefix="diff-inserted") as pool:
        called = None
        if inserted is not None and added:
            spark = both.sparkSession
            at = [keys.index(k) for k in asked]
            if collected is not None and all(_literal(both.schema[f"k{i}"].dataType) for i in at):
                # the rows are in the driver already: the inserted keys as Python values, no Spark job
                sides: dict[tuple, set] = {}
                for r in collected:
                    sides.setdefault(r["key"], set()).add(r["s"])
                new_keys = [tuple(key[i] for i in at) for key, s in sides.items() if s == {True}]
                called = pool.submit(in_pool, spark, inserted, new_keys, added)
            else:
                new = both.groupBy(*ks).agg(F.count_if(~F.col("s")).alias("nt")).where(F.col("nt") == 0)
                called = pool.submit(in_pool, spark, inserted, new.select(*[F.col(f"k{i}").alias(k)
                                                                            for i, k in zip(at, asked)]), added)
        if not chosen:
            samples = {}
        elif collected is not None:
            samples = _samples([(r["partition"], r["h"], r["s"], r["j"]) for r in collected], chosen, keys,
                               value_columns)
        else:
            rows = _sample_rows(both, ks, vs, part(), chosen).select(part(), "h", "s", "j").collect()
            samples = _samples([tuple(r) for r in rows], chosen, keys, value_columns)
        if called is not None:
            called.result()
    numeric = [j for j, v in enumerate(vs) if _is_numeric(types[v])]
    out = {}
    for p, r in counted.items():
        key = keying.key(p)
        out[key] = PartitionDiff(
            key,
            r["inserted"],
            r["deleted"],
            r["updated"],
            r["unchanged"],
            {c: r[f"n{j}"] for j, c in enumerate(value_columns)},
            {value_columns[j]: _decimal(r[f"a{j}"]) for j in numeric if not _past_digits(r, j)},
            tuple(corrected_columns),
            r["updated_outside"],
            tuple(sorted(samples.get(p, []), key=lambda x: x["h"])),
        )
    return out


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


def _narrow(both: DataFrame, ks: list[str], vs: list[str]) -> DataFrame:
    """Each row of ``both`` as its key ``k0..``, ``s``, ``rh`` (the row hash over ``v0..``) and per value column
    ``v{j}`` its value if numeric (for the change's size), else its 64-bit hash."""
    return both.select(*ks, "s", row_hash(both, vs).alias("rh"), *_narrow_values(both, vs))


def _narrow_values(both: DataFrame, vs: list[str]) -> list[Column]:
    """Per value column ``v{j}`` of ``both``: its value if numeric (for the change's size), else its 64-bit hash."""
    return [(F.col(v) if _is_numeric(both.schema[v].dataType) else F.xxhash64(*hash_args(both, [v]))).alias(v)
            for v in vs]


def _pairs(both: DataFrame, ks: list[str], vs: list[str]) -> DataFrame:
    """The rows of both sides paired by key: one row per staged row and current row of the same key (``k0..``,
    NULL-safe; coalesced from the side that has it), per staged row without a current row and per current row
    without a staged row; ``sx``/``tx`` whether the pair has a staged/current row, ``srh``/``trh`` their row
    hashes, per value column ``v`` its value (or hash) on each side as ``s{v}``/``t{v}`` and ``h``, the
    :func:`~backfill_lib.adapters.checksums.key_hash` of the key."""
    narrow = _narrow(both, ks, vs).withColumn("h", key_hash(both, ks))

    def side(flag: bool, prefix: str) -> DataFrame:
        return narrow.where(F.col("s") == F.lit(flag)).select(
            *[F.col(c).alias(f"{prefix}{c}") for c in [*ks, "rh", *vs, "h"]], F.lit(True).alias(f"{prefix}x"))

    pairs = side(True, "s").join(side(False, "t"), [F.col(f"s{k}").eqNullSafe(F.col(f"t{k}")) for k in ks], "full_outer")
    return pairs.select(*[F.coalesce(F.col(f"s{k}"), F.col(f"t{k}")).alias(k) for k in ks],
                        F.col("sx").isNotNull().alias("sx"), F.col("tx").isNotNull().alias("tx"), "srh", "trh",
                        *[f"{side}{v}" for v in vs for side in "st"],
                        F.coalesce(F.col("sh"), F.col("th")).alias("h"))


def _changed(kind: DataType, staged: Column, current: Column) -> Column:
    """Whether a value column changed between a pair's sides: values (numeric, see :func:`_same_value`) or
    hashes (every other type)."""
    return ~_same_value(kind, staged, current) if _is_numeric(kind) else staged != current


def _column_sums(updated: Column, types: dict[str, DataType], outside: Sequence[str]) -> list[Column]:
    """Over rows pairing a staged ``s{v}`` with a current ``t{v}`` per value column ``v`` (``updated``: the pair
    differs): ``updated_outside`` (pairs in which a column of ``outside`` changed), per value column ``v{j}``
    ``n{j}`` (pairs in which it changed) and for a numeric one ``a{j}`` (the sum of ``|staged - current|`` over
    them)."""
    changed = {v: updated & _changed(kind, F.col(f"s{v}"), F.col(f"t{v}")) for v, kind in types.items()}
    aggs = [F.count_if(reduce(lambda a, b: a | b, [changed[v] for v in outside], F.lit(False))).alias("updated_outside")]
    for v, kind in types.items():
        j = v[1:]
        aggs.append(F.count_if(changed[v]).alias(f"n{j}"))
        if not _is_numeric(kind):
            continue
        change = _numeric_change(kind, F.col(f"s{v}"), F.col(f"t{v}"))
        if isinstance(kind, DecimalType):  # a change or a sum past 38 digits is NULL, and marks the column
            valid = changed[v] & F.col(f"s{v}").isNotNull() & F.col(f"t{v}").isNotNull()
            aggs += [F.try_sum(F.when(changed[v], change)).alias(f"a{j}"),
                     F.count_if(valid).alias(f"m{j}"), F.count_if(valid & change.isNull()).alias(f"e{j}")]
        else:
            aggs.append(F.sum(F.when(changed[v], change)).alias(f"a{j}"))
    return aggs


def _past_digits(sums: dict, j: int) -> bool:
    """Whether value column ``v{j}`` (a decimal) had a change, or a sum of changes, past the 38 digits Spark's
    types hold in a partition's sums (``m{j}``: pairs with both values, ``e{j}``: those whose change did not
    fit, ``a{j}``: their sum, NULL when it did not fit)."""
    return bool(sums.get(f"e{j}")) or (bool(sums.get(f"m{j}")) and sums[f"a{j}"] is None)


def _pair_sums(types: dict[str, DataType], outside: Sequence[str]) -> list[Column]:
    """The per-partition aggregates of :func:`_pairs`' rows: ``inserted`` (staged rows of no current key),
    ``deleted`` (current rows of no staged key), ``updated`` and ``unchanged`` (pairs whose row hashes differ or
    not), the :func:`_column_sums` of the updated pairs, and per sample bucket ``x{b}`` the smallest key hash of a
    changed key (a key with an unpaired or updated row)."""
    sx, tx = F.col("sx"), F.col("tx")
    matched = sx & tx
    updated = matched & (F.col("srh") != F.col("trh"))
    aggs = [F.count_if(sx & ~tx).alias("inserted"), F.count_if(tx & ~sx).alias("deleted"),
            F.count_if(updated).alias("updated"), F.count_if(matched & ~updated).alias("unchanged"),
            *_column_sums(updated, types, outside)]
    changed = ~matched | updated
    # plain min of a bigint per bucket: a hash aggregation, where min_by of a struct would sort
    aggs += [F.min(F.when(changed & (F.pmod("h", F.lit(SAMPLE_BUCKETS)) == b), F.col("h"))).alias(f"x{b}")
             for b in range(SAMPLE_BUCKETS)]
    return aggs


def _driver_keys(both: DataFrame, ks: list[str]) -> list[Column] | None:
    """Key columns ``k0..`` of ``both`` as Python compares them as Spark joins them (a ``TIMESTAMP`` as its
    microseconds: two instants can share a local wall clock), or ``None`` if a key's type has no such form here
    (``FLOAT``/``DOUBLE``, whose NaNs and zeros Spark normalises, collated strings, nested types)."""
    out = []
    for k in ks:
        kind = both.schema[k].dataType
        if isinstance(kind, TimestampType):
            out.append(F.unix_micros(F.col(k)).alias(k))
        elif isinstance(kind, (IntegralType, DecimalType, BooleanType, DateType, TimestampNTZType)) or (
                isinstance(kind, StringType) and getattr(kind, "collation", "UTF8_BINARY") == "UTF8_BINARY"):
            out.append(F.col(k))
        else:
            return None
    return out


def _literal(kind: DataType) -> bool:
    """Whether a key of type ``kind`` collects (:func:`_driver_keys`) as the Python value a Spark literal of its
    value is made from: integers, decimals, booleans, dates and strings of the default collation."""
    return isinstance(kind, (IntegralType, DecimalType, BooleanType, DateType)) or (
        isinstance(kind, StringType) and getattr(kind, "collation", "UTF8_BINARY") == "UTF8_BINARY")


def _collected(both: DataFrame, ks: list[str], vs: list[str], part: Column) -> list[dict]:
    """Every row of both sides, collected in one Spark job, as a dict: ``partition`` (raw, as ``part``),
    ``key`` (a tuple of :func:`_driver_keys`), ``s``, ``rh`` and ``v0..`` (as :func:`_narrow` makes them), ``h``
    (the key hash) and ``j`` (the row's text, as :func:`_sample_rows` makes it)."""
    frame = both.select(part, F.struct(*_driver_keys(both, ks)).alias("key"), "s", row_hash(both, vs).alias("rh"),
                        *_narrow_values(both, vs), key_hash(both, ks).alias("h"),
                        F.to_json(F.struct(*ks, *vs), {"ignoreNullFields": "false"}).alias("j"))
    return [{**r.asDict(), "key": tuple(r["key"])} for r in frame.collect()]


def _same_in_driver(kind: DataType, staged, current) -> bool:
    """:func:`_same_value` (numeric ``kind``) of two collected values, or hashes alike (any other type)."""
    if not _is_numeric(kind):
        return staged == current
    if staged is None or current is None:
        return staged is None and current is None
    if isinstance(kind, (FloatType, DoubleType)):
        if math.isnan(staged) or math.isnan(current):  # Spark holds every NaN alike
            return math.isnan(staged) and math.isnan(current)
        if staged == 0 and current == 0:
            return math.copysign(1, staged) == math.copysign(1, current)
    return staged == current


def _change_in_driver(kind: DataType, staged, current):
    """:func:`_numeric_change` of two collected non-NULL values, as Spark computes it: exact for integers; for a
    ``DECIMAL(p, s)`` at the scale Spark gives the difference (``s``, or ``s - 1`` rounded half up when ``p`` is
    38 and ``s`` more than 6); a ``FLOAT`` subtracted in single precision."""
    if isinstance(kind, DecimalType):
        scale = kind.scale - 1 if kind.precision == 38 and kind.scale > 6 else kind.scale
        with localcontext(prec=100):  # collected decimals carry any exponent: the scale is set here
            return abs(staged - current).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    if isinstance(kind, FloatType):
        try:  # the double difference rounded to single precision: as rounding the exact one (53 >= 2 * 24 + 2 bits)
            return abs(struct.unpack("f", struct.pack("f", staged - current))[0])
        except OverflowError:  # past FLOAT's range: infinite, as in Spark
            return math.inf
    return abs(staged - current)


def _driver_sums(rows: list[dict], types: dict[str, DataType], outside: Sequence[str]) -> dict[object, dict]:
    """:func:`_pair_sums` per raw partition, as the Spark job gives them, of rows :func:`_collected` paired in
    the driver: each staged row of a key with each current row of it (NULL-safe), and the rows of a key on one
    side only."""
    by_key: dict[tuple, tuple[list, list]] = {}
    for r in rows:
        by_key.setdefault(r["key"], ([], []))[0 if r["s"] else 1].append(r)
    numeric = {v for v, kind in types.items() if _is_numeric(kind)}
    limits = {v: _decimal_limits(kind) for v, kind in types.items() if isinstance(kind, DecimalType)}
    sums: dict[object, dict] = {}
    for staged, current in by_key.values():
        first = (staged or current)[0]
        if first["partition"] not in sums:
            sums[first["partition"]] = {"inserted": 0, "deleted": 0, "updated": 0, "unchanged": 0,
                                        "updated_outside": 0, **{f"n{v[1:]}": 0 for v in types},
                                        **{f"a{v[1:]}": None for v in numeric},
                                        **{f"{c}{v[1:]}": 0 for v in limits for c in "me"},
                                        **{f"x{b}": None for b in range(SAMPLE_BUCKETS)}}
        d = sums[first["partition"]]
        changed = not (staged and current)
        if not current:
            d["inserted"] += len(staged)
        elif not staged:
            d["deleted"] += len(current)
        for s, t in ((s, t) for s in staged for t in current):
            if s["rh"] == t["rh"]:
                d["unchanged"] += 1
                continue
            changed = True
            d["updated"] += 1
            differ = [v for v, kind in types.items() if not _same_in_driver(kind, s[v], t[v])]
            d["updated_outside"] += any(v in outside for v in differ)
            for v in differ:
                d[f"n{v[1:]}"] += 1
                if v in numeric and s[v] is not None and t[v] is not None:
                    change = _change_in_driver(types[v], s[v], t[v])
                    if v in limits:
                        d[f"m{v[1:]}"] += 1
                        if change >= limits[v][0]:  # NULL in Spark's try_subtract: left out of the sum
                            d[f"e{v[1:]}"] += 1
                            continue
                    with localcontext(prec=100):  # a decimal sum of up to 38 digits, exact
                        d[f"a{v[1:]}"] = change if d[f"a{v[1:]}"] is None else d[f"a{v[1:]}"] + change
        if changed:
            bucket = f"x{first['h'] % SAMPLE_BUCKETS}"
            d[bucket] = first["h"] if d[bucket] is None else min(d[bucket], first["h"])
    for d in sums.values():  # a sum of changes (each at least 0) past its type is NULL in Spark's try_sum
        for v, (_, most) in limits.items():
            if d[f"a{v[1:]}"] is not None and d[f"a{v[1:]}"] >= most:
                d[f"a{v[1:]}"] = None
    return sums


def _decimal_limits(kind: DecimalType) -> tuple[Decimal, Decimal]:
    """The smallest change and the smallest sum of changes of a ``DECIMAL(p, s)`` column that Spark's types do
    not hold: its difference is a ``DECIMAL(min(38, p + 1), s')`` (:func:`_change_in_driver` gives ``s'``) and
    a sum of those a ``DECIMAL(min(38, p + 11), s')``."""
    scale = kind.scale - 1 if kind.precision == 38 and kind.scale > 6 else kind.scale
    digits = min(38, kind.precision + 1) - scale
    return Decimal(10) ** digits, Decimal(10) ** (min(38, kind.precision + 11) - scale)


def _sample_rows(both: DataFrame, ks: list[str], vs: list[str], part: Column, chosen: set[tuple]) -> DataFrame:
    """The rows of both sides whose key is a sample's (``chosen``: ``(raw partition, key hash)``), each as its key
    ``k0..``, ``s``, ``h`` (the key hash, as :func:`_pairs` makes it) and ``j``: the whole row's ``to_json``
    text (NULL fields written). The samples' partitions (``part``, of ``k0..``) and key hashes filter both
    scans: only those partitions' files are read, and the NULL-aware hashes pick up no other key's rows (but on
    a 64-bit collision)."""
    hashes = sorted({x for _, x in chosen})
    values = sorted({p for p, _ in chosen if p is not None}, key=repr)
    inside = part.isin(values) if values else F.lit(False)
    if any(p is None for p, _ in chosen):
        inside = inside | part.isNull()
    rows = both.where(inside).withColumn("h", key_hash(both, ks)).where(F.col("h").isin(hashes))
    return rows.select(*ks, "s", "h", F.to_json(F.struct(*ks, *vs), {"ignoreNullFields": "false"}).alias("j"))


def _samples(rows: list[tuple], chosen: set[tuple], keys: list[str],
             value_columns: Sequence[str]) -> dict[object, list[dict]]:
    """The :attr:`PartitionDiff.samples` of the ``chosen`` keys (``(raw partition, key hash)``: changed keys), by
    raw partition, from rows ``(raw partition, key hash, s, j)`` (:func:`_sample_rows`; rows of other keys are
    passed over). A key with rows on the staged side only was inserted, on the current side only deleted, on both
    updated."""
    sides: dict[tuple, dict[bool, list[dict]]] = {}
    for p, h, s, j in sorted(rows, key=lambda r: r[3]):
        if (p, h) in chosen:
            sides.setdefault((p, h), {}).setdefault(s, []).append(_decoded(j))
    out: dict[object, list[dict]] = {}
    for (p, x), got in sides.items():
        change = "updated" if len(got) == 2 else "inserted" if True in got else "deleted"
        after = (got.get(True) or [None])[0]
        # a key repeated on a side: its first row in text order that differs from the other side's
        before = next((t for t in got.get(False, []) if t != after), (got.get(False) or [None])[0])
        keyed = before if change == "deleted" else after
        out.setdefault(p, []).append({
            "h": int(x),
            "change": change,
            "key": {c: keyed[f"k{i}"] for i, c in enumerate(keys)},
            "before": None if change == "inserted" else {c: before[f"v{j}"] for j, c in enumerate(value_columns)},
            "after": None if change == "deleted" else {c: after[f"v{j}"] for j, c in enumerate(value_columns)},
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

