"""Keys are facts: the staged rows' declared keys (the request's ``keys``) occur once each, for every strategy.

Uniqueness is null-safe, as ``groupBy`` groups (and as the diff and patch's MERGE join): two rows whose keys are
``(7, NULL)`` and ``(7, NULL)`` are one key twice. A key that is NULL where the target's column is ``NOT NULL`` is
the constraints audit's to report (:mod:`backfill_lib.validate.constraints`). Both run in validation, over the staged
rows validation persisted once, without reading the staging table again.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import quote_ident

#: How many duplicated keys a failed check lists.
LISTED_KEYS = 10


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


def unique_key_checks(staged: DataFrame, keys: Sequence[str], where: str) -> list[Check]:
    """One ``key`` check: every key of ``keys`` occurs once in ``staged`` (the staged rows of ``where``, a
    staging table). Failed, it names up to :data:`LISTED_KEYS` keys and their counts."""
    name = f"keys_unique({', '.join(keys)})"
    found = duplicate_keys(staged, keys)
    if not found:
        return [Check("key", name, True, None, None, "every key once", "every key once")]
    listed = ", ".join(f"{key_text(k)} {n} times" for k, n in found[:LISTED_KEYS])
    more = f" and more (the first {LISTED_KEYS} listed)" if len(found) > LISTED_KEYS else ""
    observed = f"more than {LISTED_KEYS} keys" if more else f"{len(found)} key{'s' if len(found) > 1 else ''}"
    return [Check("key", name, False, None, None, f"{observed} more than once", "every key once",
                  f"duplicate keys ({', '.join(keys)}) in {where}: {listed}{more}")]
