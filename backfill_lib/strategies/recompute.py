"""recompute: re-derive every row of each partition in range; publish replaces exactly those partitions."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.publish.commit import Written, publish_options
from backfill_lib.run.staging import pinned_layout, staged_rows
from backfill_lib.strategies.base import StrategyImpl
from backfill_lib.strategies.commit_check import observed, written
from backfill_lib.plan.kinds import RecomputeKind


class Recompute(RecomputeKind, StrategyImpl):

    def write(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...], pre: int) -> Written | None:
        """Replace exactly the planned partitions with the staged rows (``replaceWhere``), one commit; the rows'
        count and checksum are observed as they are written, for :func:`verify_commit`.

        A new column found by the schema guard is added in the same commit (``mergeSchema``). The rows are
        repartitioned by the partition column into at most ``defaultParallelism`` tasks, so each target
        partition (of every partition column) is written as one file by one task and the tasks write in parallel (the layout Delta's
        optimized writes aim at; cap very large partitions' files with ``spark.sql.files.maxRecordsPerFile``).
        Pinned rows that already lie so (each partition's rows in one Spark partition, as a source read by
        partition leaves them; :class:`~backfill_lib.run.staging.Layout`) are written as they lie, without the
        shuffle.
        A range on a data column is ranged instead (``repartitionByRange``): each task writes a contiguous span of
        the column's values, so the new files' min/max statistics stay narrow.
        """
        predicate = self.publish_predicate(plan)
        # Staging files hold whole batches: read as they are, one small batch is one task writing every
        # partition's file in turn (one core busy), and a large one writes a file per task and partition.
        tasks = max(1, min(len(plan.partitions), _parallelism(spark)))
        spec = [F.col(quote_ident(c)) for c in plan.partition_spec]
        rows = staged_rows(spark, plan.staging_table).where(predicate).select(*[F.col(quote_ident(c.name)) for c in casts])
        layout = pinned_layout(plan.staging_table)
        if plan.range_in_data:
            # Each task writes a contiguous span of the range's values, so each new file overlaps few partitions
            # and the next backfill's cost and fence (from per-file min/max statistics) stay narrow.
            rows = rows.repartitionByRange(tasks, *spec, *(F.col(quote_ident(c)) for c in plan.range_columns))
        elif layout is None or not layout.written_as_is(tasks):
            rows = rows.repartition(tasks, *spec)
        rows, observation = observed(rows)
        writer = rows.writeTo(plan.target_table).options(**publish_options(plan))
        if any(c.new for c in casts):
            writer = writer.option("mergeSchema", "true")
        # The v2 writer's overwrite(condition) is Delta's replaceWhere; unlike saveAsTable it does not rewrite the
        # table's catalog entry (two ALTER TABLE and about 25 metastore calls per commit).
        writer.overwrite(F.expr(predicate))
        return written(observation)


def _parallelism(spark: SparkSession) -> int:
    """The session's ``defaultParallelism``; under Spark Connect (no SparkContext in the driver) the shuffle
    partitions the server's session runs with."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:
        return int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
