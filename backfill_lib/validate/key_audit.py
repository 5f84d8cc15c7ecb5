"""Keys are facts: the staged rows' declared keys (the request's ``keys``) occur once each, for every strategy,
and (for a strategy that writes a range) live nowhere in the target outside the range, where publishing would
leave a second row for them.

Uniqueness is null-safe, as ``groupBy`` groups (and as the diff and patch's MERGE join): two rows whose keys are
``(7, NULL)`` and ``(7, NULL)`` are one key twice. A key that is NULL where the target's column is ``NOT NULL`` is
the constraints audit's to report (:mod:`backfill_lib.validate.constraints`). Both run in validation, over the staged
rows validation persisted once, without reading the staging table again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_lib.core.checks import Check
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import quote_ident

#: How many duplicated keys a failed check lists.
LISTED_KEYS = 10
#: How many keys found outside the range a refusal lists.
LISTED_OUTSIDE = 5


def duplicate_keys(df: DataFrame, keys: Sequence[str], limit: int = LISTED_KEYS) -> list[tuple[tuple, int]]:
    """Up to ``limit + 1`` keys (tuples of ``keys``' values, NULL parts as ``None``, null-safe: NULL parts group
    together) that occur more than once in ``df``, with their row counts, most frequent first, then by key.

    One ``groupBy`` of ``df`` (one Spark job); the extra key tells the caller that more exist."""
    cols = [F.col(quote_ident(k)) for k in keys]
    n = "_n"
    while n.lower() in {k.lower() for k in keys}:  # the count's name must not be a key's (Spark ignores case)
        n += "_"
    counted = df.groupBy(*cols).agg(F.count(F.lit(1)).alias(n)).where(F.col(n) > 1)
    rows = counted.orderBy(F.col(n).desc(), *[c.asc_nulls_first() for c in cols]).limit(limit + 1).collect()
    return [(tuple(r[:len(keys)]), int(r[len(keys)])) for r in rows]


def key_text(key: tuple) -> str:
    """``(7, 2)``, ``(NULL, 'a')``: a key as messages print it."""
    return "(" + ", ".join("NULL" if v is None else repr(v) if isinstance(v, str) else str(v) for v in key) + ")"


def unique_key_checks(staged: DataFrame, keys: Sequence[str], at: str) -> list[Check]:
    """One ``key`` check: every key of ``keys`` occurs once in ``staged`` (the staged rows of ``at``, a
    staging table). Failed, it names up to :data:`LISTED_KEYS` keys and their counts."""
    name = f"keys_unique({', '.join(keys)})"
    found = duplicate_keys(staged, keys)
    if not found:
        return [Check("key", name, True, None, None, "every key once", "every key once")]
    listed = ", ".join(f"{key_text(k)} {n} times" for k, n in found[:LISTED_KEYS])
    more = f" and more (the first {LISTED_KEYS} listed)" if len(found) > LISTED_KEYS else ""
    observed = f"more than {LISTED_KEYS} keys" if more else f"{len(found)} key{'s' if len(found) > 1 else ''}"
    return [Check("key", name, False, None, None, f"{observed} more than once", "every key once",
                  f"duplicate keys ({', '.join(keys)}) in {at}: {listed}{more}")]


def _free_name(name: str, taken: Sequence[str]) -> str:
    """``name``, lengthened by ``_`` until no column of ``taken`` has it (Spark ignores case)."""
    while name.lower() in {t.lower() for t in taken}:
        name += "_"
    return name


def keys_outside(wanted: DataFrame | list[tuple], target: DataFrame, keys: Sequence[str], inside: str,
                 partition_keys: PartitionKeys, few: bool = False,
                 limit: int = LISTED_OUTSIDE) -> tuple[list[tuple[tuple, list]], int]:
    """The keys of ``wanted`` (its columns ``keys``; repeats allowed) that the target also holds in a row outside
    the range: up to ``limit`` of them (tuples of ``keys``' values, NULL parts as ``None``), each with the sorted
    plan keys of the partitions it lives in (``None`` for a NULL partition value), ordered by key; and how many
    such keys there are in all.

    ``inside`` is the SQL predicate of the rows the run covers (the plan's :meth:`predicate`); a target row where
    it is false or NULL is outside. Keys match null-safely, as the key audit groups them and patch's MERGE joins.
    One semi-join of ``wanted`` against the target's rows outside, reading only the key and partition columns of
    the target; ``few`` broadcasts ``wanted`` to that scan (no shuffle of the target's rows). A second job counts
    the keys when more than ``limit`` are found.

    ``wanted`` may instead be the keys themselves, tuples of Python values of the keys' types (integers,
    decimals, strings, booleans, dates; ``None`` for NULL). Up to :data:`LITERAL_KEYS` values of a one-column key
    (:data:`LITERAL_TUPLES` keys of several columns) filter the target's scan as literals (Delta skips the files
    whose key statistics exclude them): one Spark job, no join, the rows found grouped here. More keys, a date
    before :data:`GREGORIAN_START`, or more than :data:`LITERAL_ROWS` rows found, go through the join, from a
    DataFrame made of the keys.
    """
    quoted = [quote_ident(k) for k in keys]
    p = _free_name("_p", keys)
    outside = (target.where(~F.coalesce(F.expr(inside), F.lit(False)))
               .select(*[F.col(k) for k in quoted], partition_keys.expr().alias(p)))
    if isinstance(wanted, list):
        if not wanted:
            return [], 0
        found = _literal_lookup(outside, wanted, quoted, p)
        if found is not None:
            return _listed(found, partition_keys, limit)
        # as rows of literals, so each column takes the type its values' literals widen to (as the diff's union
        # widened the sides' types), not the target's: a staged 1.234 is not the target's DECIMAL(10,2) 1.23
        rows = F.array(*[F.struct(*[_literal(v).alias(f"c{i}") for i, v in enumerate(key)])
                         for key in sorted(set(wanted), key=_order)])
        wanted = target.sparkSession.range(1).select(F.inline(rows)).toDF(*keys)
    outside = outside.alias("o")
    wanted = wanted.select(*[F.col(k) for k in quoted])
    wanted = (F.broadcast(wanted) if few else wanted.distinct()).alias("s")
    on = [F.col(f"o.{k}").eqNullSafe(F.col(f"s.{k}")) for k in quoted]
    found = (outside.join(wanted, on, "left_semi")
             .groupBy(*[F.col(k) for k in quoted])
             .agg(F.sort_array(F.collect_set(F.col(p))), F.max(F.col(p).isNull().cast("int"))))
    rows = found.orderBy(*[F.col(k).asc_nulls_first() for k in quoted]).limit(limit + 1).collect()
    total = len(rows) if len(rows) <= limit else found.count()
    listed = []
    for r in rows[:limit]:
        # collect_set skips NULL: the second aggregate says whether the key also lives where the partition is NULL
        parts = [partition_keys.key(v) for v in r[len(keys)]] + ([None] if r[len(keys) + 1] else [])
        listed.append((tuple(r[:len(keys)]), parts))
    return listed, total


#: up to how many keys known in the driver :func:`keys_outside` looks for as literals in the target's scan: values
#: of a key of one column (one ``IN`` list), and keys of several columns (an ``OR`` of their equalities)
LITERAL_KEYS = 1_000
LITERAL_TUPLES = 32
#: the first day of the Gregorian calendar: dates before it are looked for by the join, not as literals
GREGORIAN_START = date(1582, 10, 15)
#: up to how many target rows outside the range a literal lookup collects (more: looked for by a join instead)
LITERAL_ROWS = 10_000


def _order(key: tuple) -> tuple:
    """A key's sort order as Spark's ``asc_nulls_first`` orders it (``None`` first, then by value)."""
    return tuple((v is not None, v) for v in key)


def _literal(value: object) -> Column:
    """A Spark literal of a key's Python value; a date through its ISO text, as PySpark's own conversion of a
    ``date`` goes through the Julian calendar (1582-10-10 would become 1582-10-20) and refuses years below 1000."""
    return F.lit(value.isoformat()).cast("date") if type(value) is date else F.lit(value)


def _any(conditions: list[Column]) -> Column:
    """``conditions`` OR-ed as a balanced tree: a chain of hundreds overflows the JVM's stack in Spark's rules."""
    if len(conditions) == 1:
        return conditions[0]
    middle = len(conditions) // 2
    return _any(conditions[:middle]) | _any(conditions[middle:])


def _literal_lookup(outside: DataFrame, wanted: list[tuple], quoted: list[str],
                    p: str) -> dict[tuple, set] | None:
    """The partitions (raw values of column ``p``) of ``outside``'s rows whose keys are among ``wanted``, by key;
    ``None`` when more than :data:`LITERAL_ROWS` rows match, or when ``wanted`` holds more keys than a literal
    filter takes: :data:`LITERAL_KEYS` values of one key column, :data:`LITERAL_TUPLES` of several."""
    distinct = sorted(set(wanted), key=_order)
    if any(type(v) is date and v < GREGORIAN_START for key in distinct for v in key):
        return None  # Spark's Parquet filter push-down misses dates of the hybrid calendar's gap (1582-10-10)
    if len(quoted) == 1:
        if len(distinct) > LITERAL_KEYS:
            return None
        values = [k[0] for k in distinct if k[0] is not None]
        predicate = F.col(quoted[0]).isin([_literal(v) for v in values]) if values else F.lit(False)
        if len(values) < len(distinct):  # a NULL key matches a NULL key
            predicate = predicate | F.col(quoted[0]).isNull()
    else:
        if len(distinct) > LITERAL_TUPLES:
            return None
        predicate = _any([reduce(lambda a, b: a & b, [F.col(k).eqNullSafe(_literal(v)) for k, v in zip(quoted, key)])
                          for key in distinct])
    rows = outside.where(predicate).limit(LITERAL_ROWS + 1).collect()
    if len(rows) > LITERAL_ROWS:
        return None
    found: dict[tuple, set] = {}
    for r in rows:
        found.setdefault(tuple(r[:len(quoted)]), set()).add(r[len(quoted)])
    return found


def _listed(found: dict[tuple, set], partition_keys: PartitionKeys, limit: int) -> tuple[list[tuple[tuple, list]], int]:
    """:func:`keys_outside`'s result from the partitions found per key."""
    listed = []
    for key in sorted(found, key=_order)[:limit]:
        parts = found[key]
        listed.append((key, [partition_keys.key(v) for v in sorted(v for v in parts if v is not None)]
                       + ([None] if None in parts else [])))
    return listed, len(found)


def named_key(keys: Sequence[str], key: tuple) -> str:
    """``order_id=77``, ``order_id=7, line=NULL``: a key as a refusal names it."""
    return ", ".join(f"{k}={'NULL' if v is None else repr(v) if isinstance(v, str) else v}" for k, v in zip(keys, key))
