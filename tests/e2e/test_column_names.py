"""Issue 17 item 9: dotted and spaced column names work end to end (staging, validation, publish, post-publish
check, rollback), on a plain target and on a column-mapped one."""

import json

from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version, read_table_state
from tests.validate.test_keys_and_constraints import D8, D9, D10, request, run


def test_a_dotted_column_name_works_end_to_end(spark, settings, db, tmp_path):
    schema = "id INT, dt DATE, `a.b` INT"
    spark.createDataFrame([(1, D9, 10), (2, D9, 20), (3, D10, 30)], schema).write.format("delta") \
        .partitionBy("dt").saveAsTable(f"{db}.dotted")
    spark.sql(f"ALTER TABLE {db}.dotted ADD CONSTRAINT positive CHECK (`a.b` > 0)")
    spark.createDataFrame([(1, D9, 11), (2, D9, 21), (4, D9, 41)], schema).write.format("delta") \
        .partitionBy("dt").saveAsTable(f"{db}.dotted_src")
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "dotted", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "a.b", "min_value": 1, "max_value": 100}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a.b"}}]}))
    path = request(tmp_path, f"{db}.dotted", f"SELECT * FROM {db}.dotted_src WHERE dt >= :range_start AND dt < :range_end",
                   keys=("id",), expectations=str(suite), gates={"allow_row_growth": True},
                   reconciliation=[{"name": "sum_ab", "metric": "sum(`a.b`)",
                                    "source": {"table": f"{db}.dotted_src", "partition_column": "dt",
                                               "metric": "sum(`a.b`)"}}],
                   metric_rules=[{"name": "ab_metrics", "source": {"table": f"{db}.dotted_src", "partition_column": "dt"},
                                  "metrics": {"null_count": ["a.b"], "sum": ["a.b"], "min_max": ["a.b"],
                                              "checksum": ["id", "a.b"]}}])
    before = current_version(spark, f"{db}.dotted")
    result = run(spark, settings, path)

    assert result.status == "published", result.failures
    assert result.published_version == before + 1 == current_version(spark, f"{db}.dotted")
    expected = spark.createDataFrame([(1, D9, 11), (2, D9, 21), (3, D10, 30), (4, D9, 41)], schema)
    # ordered here: chispa's ignore_row_order sorts by unquoted column names, which a dot breaks
    assert_df_equality(spark.table(f"{db}.dotted").orderBy("id"), expected)
    names = {c.name for c in result.checks if c.success}
    assert {"positive: CHECK (`a.b` > 0)", "sum_ab"} <= names
    assert any(c.kind == "expectation" and "a.b" in c.name for c in result.checks)
    assert [c.success for c in result.checks if c.kind == "post_publish"] == [True, True]


def test_a_column_mapped_target_with_spaces_works_end_to_end(spark, settings, db, tmp_path, runner):
    cols = "`order id` INT, `unit price` INT, `order date` DATE"
    spark.sql(f"CREATE TABLE {db}.mapped ({cols}) USING delta PARTITIONED BY (`order date`) TBLPROPERTIES "
              "('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    original = [(1, 10, D9), (2, 20, D9), (3, 30, D10)]
    spark.createDataFrame(original, cols).writeTo(f"{db}.mapped").append()
    spark.sql(f"CREATE TABLE {db}.mapped_src ({cols}) USING delta TBLPROPERTIES "
              "('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    spark.createDataFrame([(1, 11, D9), (2, 21, D9), (5, 51, D9)], cols).writeTo(f"{db}.mapped_src").append()
    path = request(tmp_path, f"{db}.mapped",
                   f"SELECT * FROM {db}.mapped_src WHERE `order date` >= :range_start AND `order date` < :range_end",
                   keys=("order id",), partition_column="order date", gates={"allow_row_growth": True},
                   staging="durable",  # the staging table of a column-mapped target is looked at below
                   reconciliation=[{"name": "rows", "metric": "count(*)",
                                    "source": {"table": f"{db}.mapped_src", "partition_column": "order date",
                                               "metric": "count(*)"}}])
    before = current_version(spark, f"{db}.mapped")
    result = run(spark, settings, path)

    assert result.status == "published", result.failures
    assert result.published_version == before + 1 == current_version(spark, f"{db}.mapped")
    expected = spark.createDataFrame([(1, 11, D9), (2, 21, D9), (5, 51, D9), (3, 30, D10)], cols)
    assert_df_equality(spark.table(f"{db}.mapped"), expected, ignore_row_order=True)
    staging = spark.sql(f"DESCRIBE DETAIL {result.plan.staging_table}").first()["properties"]
    assert staging["delta.columnMapping.mode"] == "name"
    # the post-publish check proved the commit from the Delta log (partition values by physical name)
    assert [c.name for c in result.checks if c.kind == "post_publish"] == [
        "written_rows_and_checksum_equal_staging", "rows_equal_staging_and_files_replaced"]
    assert all(c.success for c in result.checks)

    runner.rollback(result.plan.run_id, "ana", "test rollback")
    assert_df_equality(spark.table(f"{db}.mapped"), spark.createDataFrame(original, cols), ignore_row_order=True)
    assert current_version(spark, f"{db}.mapped") == before + 2


def test_a_column_mapped_target_with_spaces_rebuilds(spark, settings, db, tmp_path):
    cols = "`order id` INT, `unit price` INT, `order date` DATE"
    mapped = "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', " \
             "'delta.minWriterVersion' = '5')"
    spark.sql(f"CREATE TABLE {db}.mapped ({cols}) USING delta PARTITIONED BY (`order date`) {mapped}")
    spark.createDataFrame([(1, 10, D9), (3, 30, D10)], cols).writeTo(f"{db}.mapped").append()
    spark.sql(f"CREATE TABLE {db}.mapped_src ({cols}) USING delta {mapped}")
    rebuilt = [(1, 11, D9), (2, 21, D9), (4, 41, D8)]
    spark.createDataFrame(rebuilt, cols).writeTo(f"{db}.mapped_src").append()
    path = request(tmp_path, f"{db}.mapped", f"SELECT * FROM {db}.mapped_src", strategy="rebuild", start=None,
                   keys=("order id",), partition_column="order date",
                   gates={"allow_row_growth": True, "allow_row_loss": True})
    before = current_version(spark, f"{db}.mapped")
    result = run(spark, settings, path)

    assert result.status == "published", result.failures
    assert result.published_version == before + 1 == current_version(spark, f"{db}.mapped")
    assert_df_equality(spark.table(f"{db}.mapped"), spark.createDataFrame(rebuilt, cols), ignore_row_order=True)
    assert read_table_state(spark, f"{db}.mapped").column_mapping == "name"
    assert all(c.success for c in result.checks)
