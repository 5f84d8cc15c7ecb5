"""Fingerprints of rows per partition: a row count and an order-independent checksum, to compare two sides
(staged against published, in the post-publish check; staged rows in validation's shared aggregation)."""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.checksums import row_checksum
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.run.staging import staged_rows


def partition_fingerprints(df: DataFrame, keys: PartitionKeys) -> dict[str, tuple[int, object]]:
    """Per partition: row count and the sum of the row hash (:func:`~backfill_lib.adapters.checksums.row_hash`) over all columns as ``decimal(38,0)``.

    The sum is order-independent, so two sides with the same rows in any order and file layout match.
    """
    rows = df.groupBy(keys.expr().alias("p")).agg(F.count("*").alias("n"), row_checksum(df).alias("h")).collect()
    return keys.rekey({r["p"]: (int(r["n"]), r["h"]) for r in rows})


def fingerprint_aggregates(df: DataFrame) -> tuple[list[SparkColumn], list[str]]:
    """:func:`partition_fingerprints`' aggregate columns and names (``n``, ``h``), for an aggregation shared with
    other audits; read back with :func:`fingerprints_of`."""
    return [F.count("*"), row_checksum(df)], ["n", "h"]


def fingerprints_of(rows: list[dict], keys: PartitionKeys) -> dict[str, tuple[int, object]]:
    """:func:`partition_fingerprints`' result from the rows of a shared aggregation (``{"p": ..., "n": ..., "h": ...}``)."""
    return keys.rekey({r["p"]: (int(r["n"]), r["h"]) for r in rows})


def staged_fingerprints(spark: SparkSession, plan: BackfillPlan, predicate: str | None) -> dict[str, tuple[int, object]]:
    """:func:`partition_fingerprints` of the staged rows within ``predicate`` (``None``: all of them)."""
    staged_df = staged_rows(spark, plan.staging_table)
    return partition_fingerprints(staged_df if predicate is None else staged_df.where(predicate), plan.partition_keys)
