"""Generated columns on a DataFrame: the values Delta would generate for a target's generated columns."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_lib.core.table_state import GeneratedColumn


def with_generated(df: DataFrame, generated: Sequence[GeneratedColumn]) -> DataFrame:
    """``df`` with each column of ``generated`` it lacks added, as ``CAST((expression) AS type)`` over ``df``'s
    columns, in the session time zone of the analysis (Delta evaluates the expression in the writing session's).
    Columns ``df`` has are left as they are. Lazy: nothing is read."""
    missing = {g.name: F.expr(f"({g.expression})").cast(g.type) for g in generated if g.name not in df.columns}
    return df.withColumns(missing) if missing else df
