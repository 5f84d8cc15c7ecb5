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
