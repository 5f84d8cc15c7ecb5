"""The plan's reads of a target's state: Delta Kernel's file list against Delta's Spark snapshot, and the
snapshot's metadata against ``DESCRIBE DETAIL`` (issue 22 item 3: neither read runs Delta's log replay job)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import (
    _snapshot_detail,
    add_files,
    latest_snapshot,
    partition_stats,
    read_table_state,
)
from backfill_lib.adapters import kernel_log
from backfill_lib.adapters.kernel_log import kernel_add_files

SCHEMA = "id INT, `event day` DATE, region STRING, v INT"
PLAIN = "id INT, event_day DATE, region STRING, v INT"  # no column mapping on a path table written by save()
ROWS = [(1, date(2024, 3, 9), "a b=c", 10), (2, date(2024, 3, 9), "a b=c", 20), (3, date(2024, 3, 10), "x", 30),
        (4, date(2024, 3, 10), "x", 40), (5, date(2024, 3, 10), "y%", 50)]


def _table(spark, name: str) -> None:
    """Two partition columns (one whose name needs quoting, values with a space, `=` and `%`), column mapping
    by name, deletion vectors: three commits, the last a DELETE that leaves a vector on the file of 2024-03-09."""
    spark.sql(f"CREATE TABLE {name} ({SCHEMA}) USING delta PARTITIONED BY (`event day`, region) "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true', "
              "'delta.minReaderVersion' = '3', 'delta.minWriterVersion' = '7')")
    spark.createDataFrame(ROWS[:3], SCHEMA).coalesce(1).writeTo(name).append()
    spark.createDataFrame(ROWS[3:], SCHEMA).coalesce(1).writeTo(name).append()
    spark.sql(f"DELETE FROM {name} WHERE id = 2")


def _comparable(files: DataFrame) -> DataFrame:
    return files.select("path", F.to_json("partitionValues").alias("values"), "size", "stats",
                        F.to_json("deletionVector").alias("dv"))


def test_kernel_reads_the_add_actions_delta_spark_reads(spark, db):
    name = f"{db}.events"
    _table(spark, name)
    snapshot = latest_snapshot(spark, name)
    kernel = kernel_add_files(spark, snapshot)
    assert kernel is not None  # a checksum file says 4 files: Kernel read them
    spark_files = DataFrame(snapshot.allFiles().toDF(), spark)
    assert_df_equality(_comparable(kernel), _comparable(spark_files), ignore_row_order=True, ignore_nullable=True)
    assert kernel.where(F.col("deletionVector").isNotNull()).count() == 1
    stats = partition_stats(spark, name, "event day", snapshot)
    assert {k: (s.files, s.rows) for k, s in stats.items()} == {"2024-03-09": (1, 2 - 1), "2024-03-10": (3, 3)}


def test_without_a_checksum_file_the_spark_snapshot_lists_the_files(spark, db, tmp_path):
    path = tmp_path / "events"
    name = f"delta.`{path}`"
    checksums = "spark.databricks.delta.writeChecksumFile.enabled"  # a writer that writes no checksum file
    spark.conf.set(checksums, "false")
    try:
        spark.createDataFrame(ROWS, PLAIN).coalesce(1).write.format("delta").partitionBy("region").save(str(path))
    finally:
        spark.conf.unset(checksums)
    assert not list(Path(path, "_delta_log").glob("0*.crc"))  # (.0...json.crc are the local file system's)
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the writer's snapshot holds one
    snapshot = latest_snapshot(spark, name)
    assert snapshot.checksumOpt().isEmpty()
    assert kernel_add_files(spark, snapshot) is None
    assert add_files(spark, snapshot).count() == 3
    stats = partition_stats(spark, name, "region", snapshot)
    assert {k: s.rows for k, s in stats.items()} == {"a b=c": 2, "x": 2, "y%": 1}


def test_the_snapshot_says_what_describe_detail_says(spark, db, tmp_path):
    catalog = f"{db}.events"
    _table(spark, catalog)
    spark.sql(f"ALTER TABLE {catalog} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true', 'team' = 'x y')")
    path = f"delta.`{tmp_path / 'by path'}`"
    spark.createDataFrame(ROWS, PLAIN).write.format("delta").partitionBy("region").save(str(tmp_path / "by path"))
    for name, columns in ((catalog, ["event day", "region"]), (path, ["region"])):
        _, detail = _snapshot_detail(spark, name)
        described = spark.sql(f"DESCRIBE DETAIL {name}").first()
        assert detail["partitionColumns"] == list(described["partitionColumns"]) == columns
        assert detail["properties"] == dict(described["properties"])
        assert detail["location"] == described["location"]
    state = read_table_state(spark, catalog, partition_column="event day")
    assert (state.change_data_feed, state.column_mapping, state.clustering_columns) == (True, "name", ())
    assert sorted(state.partitions) == ["2024-03-09", "2024-03-10"]


def test_a_clustered_table_is_described_by_describe_detail(spark, db):
    name = f"{db}.clustered"
    spark.sql(f"CREATE TABLE {name} (id INT, d DATE) USING delta CLUSTER BY (d)")
    assert _snapshot_detail(spark, name) == (None, None)
    assert read_table_state(spark, name, with_partitions=False).clustering_columns == ("d",)


def _kernel_equals_spark(spark, snapshot) -> DataFrame:
    """Kernel's file list of ``snapshot``, asserted equal to Delta's Spark snapshot's."""
    kernel = kernel_add_files(spark, snapshot)
    assert kernel is not None
    spark_files = DataFrame(snapshot.allFiles().toDF(), spark)
    assert_df_equality(_comparable(kernel), _comparable(spark_files), ignore_row_order=True, ignore_nullable=True)
    return kernel


def _spark_stats(monkeypatch, spark, name, column, snapshot, where=None) -> dict:
    """:func:`partition_stats` through Delta's Spark snapshot (Kernel's file-count limit below any table)."""
    with monkeypatch.context() as m:
        m.setattr(kernel_log, "MAX_FILES", -1)
        assert kernel_add_files(spark, snapshot) is None
        return partition_stats(spark, name, column, snapshot, where=where)


def test_kernel_replays_a_checkpoint_and_the_removes_after_it(spark, db, monkeypatch):
    name = f"{db}.checkpointed"
    schema = "id INT, region STRING, v INT"
    spark.sql(f"CREATE TABLE {name} ({schema}) USING delta PARTITIONED BY (region) "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")  # a checkpoint at version 2
    spark.createDataFrame([(0, "a", 0), (1, "b", 10), (2, "c", 20)], schema).writeTo(name).append()  # 3 files
    spark.sql(f"DELETE FROM {name} WHERE id = 0")  # version 2: a's file removed, a tombstone in the checkpoint
    spark.createDataFrame([(9, "b", 90), (8, "b", 80)], schema).coalesce(1).write.format("delta") \
        .mode("overwrite").option("replaceWhere", "region = 'b'").saveAsTable(name)  # version 3: b's file replaced
    location = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
    assert Path(location.removeprefix("file:"), "_delta_log", "00000000000000000002.checkpoint.parquet").exists()
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # replay from the checkpoint
    snapshot = latest_snapshot(spark, name)
    assert snapshot.version() == 3
    assert _kernel_equals_spark(spark, snapshot).count() == 2
    stats = partition_stats(spark, name, "region", snapshot)
    assert {k: (s.files, s.rows) for k, s in stats.items()} == {"b": (1, 2), "c": (1, 1)}
    assert stats == _spark_stats(monkeypatch, spark, name, "region", snapshot)


def test_kernel_reads_null_partition_values(spark, db, monkeypatch):
    name = f"{db}.nulls"
    schema = "id INT, d DATE, region STRING"
    rows = [(1, None, "a"), (2, date(2024, 3, 9), None), (3, None, None), (4, date(2024, 3, 9), "a")]
    spark.createDataFrame(rows, schema).write.format("delta").partitionBy("d", "region").saveAsTable(name)
    snapshot = latest_snapshot(spark, name)
    kernel = _kernel_equals_spark(spark, snapshot)
    assert kernel.where(F.col("partitionValues")["d"].isNull()).count() == 2
    by_day = partition_stats(spark, name, "d", snapshot)
    assert {k: s.rows for k, s in by_day.items()} == {None: 2, "2024-03-09": 2}
    assert by_day == _spark_stats(monkeypatch, spark, name, "d", snapshot)
    where = "d IS NULL OR region IS NULL"
    by_region = partition_stats(spark, name, "region", snapshot, where=where)
    assert {k: s.rows for k, s in by_region.items()} == {None: 2, "a": 1}
    assert by_region == _spark_stats(monkeypatch, spark, name, "region", snapshot, where=where)
    state = read_table_state(spark, name, partition_column="region")
    assert {k: s.files for k, s in state.partitions.items()} == {None: 2, "a": 2}


def test_kernel_reads_values_holding_unicode_line_separators(spark, db):
    # JSON leaves U+2028 and U+0085 unescaped; Python's str.splitlines splits lines at them
    name = f"{db}.separators"
    schema = "id INT, region STRING, s STRING"
    rows = [(1, "a\u2028b", "s\u0085t"), (2, "plain", "u")]
    spark.createDataFrame(rows, schema).coalesce(1).write.format("delta").partitionBy("region").saveAsTable(name)
    snapshot = latest_snapshot(spark, name)
    kernel = _kernel_equals_spark(spark, snapshot)
    assert sorted(r["v"] for r in kernel.select(F.col("partitionValues")["region"].alias("v")).collect()) == \
        ["a\u2028b", "plain"]


STATS_SCHEMA = "id INT, region STRING, v INT"


def _checkpointed_without_json_stats(spark, name: str) -> str:
    """A table whose version 2 is checkpointed with ``delta.checkpoint.writeStatsAsJson`` false: such a checkpoint
    holds each file's statistics as a struct (stats_parsed) only, its `stats` column null. Returns its log folder."""
    spark.sql(f"CREATE TABLE {name} ({STATS_SCHEMA}) USING delta PARTITIONED BY (region) "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2', 'delta.checkpoint.writeStatsAsJson' = 'false')")
    spark.createDataFrame([(0, "a", 0), (1, "b", 10), (2, "c", 20)], STATS_SCHEMA).writeTo(name).append()  # v1
    spark.createDataFrame([(3, "a", 30), (4, "b", 40)], STATS_SCHEMA).writeTo(name).append()  # v2, checkpointed
    log_folder = Path(spark.sql(f"DESCRIBE DETAIL {name}").first()["location"].removeprefix("file:"), "_delta_log")
    assert (log_folder / "00000000000000000002.checkpoint.parquet").exists()
    return log_folder


def _stats_replayed_from_the_checkpoint(spark, monkeypatch, name: str) -> dict:
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # replay from the checkpoint
    snapshot = latest_snapshot(spark, name)
    stats = partition_stats(spark, name, "region", snapshot)
    assert stats == _spark_stats(monkeypatch, spark, name, "region", snapshot)
    return {k: (s.files, s.rows) for k, s in stats.items()}


def test_a_checkpoint_without_json_stats_still_counts_the_rows(spark, db, monkeypatch):
    name = f"{db}.struct_stats"
    _checkpointed_without_json_stats(spark, name)
    spark.createDataFrame([(5, "c", 50), (6, "c", 60)], STATS_SCHEMA).coalesce(1).writeTo(name).append()  # v3
    assert _stats_replayed_from_the_checkpoint(spark, monkeypatch, name) == {"a": (2, 2), "b": (2, 2), "c": (2, 3)}


def test_a_checkpoint_without_json_stats_counts_the_rows_after_the_setting_is_turned_back_on(spark, db, monkeypatch):
    # the setting says true now, but the checkpoint Kernel replays from was written while it was false
    name = f"{db}.struct_stats_then_json"
    log_folder = _checkpointed_without_json_stats(spark, name)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.checkpoint.writeStatsAsJson' = 'true')")  # v3
    assert not (log_folder / "00000000000000000003.checkpoint.parquet").exists()
    assert _stats_replayed_from_the_checkpoint(spark, monkeypatch, name) == {"a": (2, 2), "b": (2, 2), "c": (1, 1)}
