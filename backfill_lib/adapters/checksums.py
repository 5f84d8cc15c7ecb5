"""The one row checksum: the sum over rows of ``xxhash64`` of the given columns, as ``decimal(38,0)``.

Staging's fingerprints, the publishing write's observation, the post-publish check and the ``checksum`` metric
all use :func:`checksum_of`, so two sides hashed here agree exactly when their rows do (up to hash
collisions), in any row order or file layout; the post-publish check compares the staged fingerprints with
the write's observation and would silently fall back to reading the data if the two expressions differed.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_lib.core.partitions import quote_ident


def checksum_of(columns: Iterable[str]) -> Column:
    """The aggregate ``sum(xxhash64(c1, c2, ...))`` as ``decimal(38,0)`` (no overflow, no float) over
    ``columns`` in the order given, each quoted (a name may hold a dot); NULL over no rows."""
    return F.sum(F.xxhash64(*[F.col(quote_ident(c)) for c in columns]).cast("decimal(38,0)"))


def row_checksum(df: DataFrame) -> Column:
    """:func:`checksum_of` every column of ``df`` in name order: what a whole row's fingerprint means."""
    return checksum_of(sorted(df.columns))
