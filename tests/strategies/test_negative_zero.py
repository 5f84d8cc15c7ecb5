"""A float's ``0.0`` -> ``-0.0`` is a change for the diff and the patch's MERGE alike (Spark's ``<=>`` holds them
equal, but the published bits differ)."""

from pyspark.sql.types import DateType, DoubleType, IntegerType, StructField, StructType

from tests.strategies.test_strategies import D9, request, run, table


def test_patch_publishes_negative_zero_over_zero_and_the_diff_counts_it_updated(spark, settings, db, tmp_path):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", DoubleType())])
    table(spark, f"{db}.t", schema, [(1, D9, 0.0), (2, D9, 1.0)])
    table(spark, f"{db}.s", schema, [(1, D9, -0.0), (2, D9, 1.0)])
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end", "patch")

    result = run(spark, settings, path)

    assert result.status == "published"  # not "unchanged": the diff saw one updated row
    metrics = spark.sql(f"DESCRIBE HISTORY {db}.t").where(f"version = {result.published_version}").first()
    assert metrics["operationMetrics"]["numTargetRowsUpdated"] == "1"
    got = {r["id"]: r["v"] for r in spark.sql(f"SELECT id, CAST(v AS STRING) AS v FROM {db}.t").collect()}
    assert got == {1: "-0.0", 2: "1.0"}
