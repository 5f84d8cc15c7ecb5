"""Source sizing by :func:`~backfill_lib.adapters.kernel_scan.kernel_input_files` against Spark's ``inputFiles()`` on inputs the main sizing tests leave out:
names that need quoting, TIMESTAMP_NTZ partitions in a session zone with a gap, BETWEEN on INT and STRING
partitions and views over a Delta table."""

from __future__ import annotations

from datetime import date, datetime

from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from tests.plan.test_source_sizing import _kernel_input, _spark_input


def _assert_sized_as_spark_sizes(spark, cases: dict[str, int]) -> None:
    """Each query's (files, bytes) from Kernel equals Spark's, and its file count is the one given."""
    for query, files in cases.items():
        kernel, spark_found = _kernel_input(spark, query), _spark_input(spark, query)
        assert kernel == spark_found, query
        assert kernel[0] == files, query


def test_a_table_and_partition_column_that_need_backticks(spark, db):
    name = f"{db}.`order`"  # a reserved word (the session catalog refuses `odd-name` outright)
    days = [date(2024, 3, 9), date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 11), None]
    # a space in a column name needs column mapping in Delta
    spark.sql(f"CREATE TABLE {name} (id INT, `ship date` DATE, v INT) USING delta PARTITIONED BY (`ship date`) "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
              "'delta.minWriterVersion' = '5')")
    schema = StructType([StructField("id", IntegerType()), StructField("ship date", DateType()),
                         StructField("v", IntegerType())])
    spark.createDataFrame([(i, d, i * 10) for i, d in enumerate(days)], schema) \
        .repartition(5, "id").writeTo(name).append()
    cases = {
        f"SELECT * FROM {name} WHERE `ship date` = DATE'2024-03-09'": 2,
        f"SELECT * FROM {name} WHERE `ship date` >= DATE'2024-03-10'": 2,
        f"SELECT * FROM {name} WHERE `ship date` IS NULL": 1,
        f"SELECT * FROM {name} WHERE `ship date` > DATE'2024-03-09' AND v >= 30": 1,  # partition and statistics
    }
    _assert_sized_as_spark_sizes(spark, cases)


def test_timestamp_ntz_partitions_in_new_york(spark, db):
    name = f"{db}.ntz_hours"
    # local wall-clock hours 00:00 to 05:00 on 2024-03-10: 02:00 does not exist in New York that night, but a
    # TIMESTAMP_NTZ value holds no zone, and no session zone may shift it
    hours = [datetime(2024, 3, 10, h) for h in range(6)]
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        spark.createDataFrame(list(enumerate(hours)), "id INT, hour TIMESTAMP_NTZ").repartition(6, "id") \
            .write.format("delta").partitionBy("hour").saveAsTable(name)
        cases = {
            f"SELECT * FROM {name} WHERE hour >= TIMESTAMP_NTZ'2024-03-10 01:00:00' "
            f"AND hour < TIMESTAMP_NTZ'2024-03-10 04:00:00'": 3,  # 01:00, 02:00 and 03:00
            f"SELECT * FROM {name} WHERE hour > TIMESTAMP_NTZ'2024-03-10 01:30:00' "
            f"AND hour <= TIMESTAMP_NTZ'2024-03-10 02:00:00'": 1,  # the hour New York skips
            f"SELECT * FROM {name} WHERE hour = TIMESTAMP_NTZ'2024-03-10 05:00:00'": 1,
        }
        _assert_sized_as_spark_sizes(spark, cases)
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_between_on_int_and_string_partitions_and_through_a_view(spark, db):
    name = f"{db}.by_bucket"
    rows = [(i, i % 4, f"r{i % 3}", i * 10) for i in range(8)]  # bucket 0..3 twice; region r0, r1, r2
    spark.createDataFrame(rows, "id INT, bucket INT, region STRING, v INT").repartition(8, "id") \
        .write.format("delta").partitionBy("bucket", "region").saveAsTable(name)
    spark.sql(f"CREATE VIEW {db}.recent AS SELECT id, bucket, region, v FROM {name} WHERE bucket >= 1")
    spark.sql(f"CREATE TEMPORARY VIEW probe_temp_view AS SELECT * FROM {name}")
    try:
        cases = {
            # buckets: id 0,4 -> 0; 1,5 -> 1; 2,6 -> 2; 3,7 -> 3
            f"SELECT * FROM {name} WHERE bucket BETWEEN 1 AND 2": 4,
            f"SELECT * FROM {name} WHERE bucket NOT BETWEEN 1 AND 2": 4,
            # regions: r0 ids 0,3,6; r1 ids 1,4,7; r2 ids 2,5
            f"SELECT * FROM {name} WHERE region BETWEEN 'r1' AND 'r2'": 5,
            f"SELECT * FROM {name} WHERE region BETWEEN 'r0' AND 'r0~' AND bucket BETWEEN 0 AND 2": 2,  # ids 0, 6
            # the view's own filter (bucket >= 1) and one from outside it
            f"SELECT * FROM {db}.recent WHERE region BETWEEN 'r1' AND 'r1'": 2,  # ids 1, 7 (4 is bucket 0)
            f"SELECT * FROM {db}.recent WHERE bucket BETWEEN 3 AND 9": 2,  # ids 3, 7
            "SELECT * FROM probe_temp_view WHERE bucket BETWEEN 2 AND 3 AND region = 'r0'": 2,  # ids 3, 6
        }
        _assert_sized_as_spark_sizes(spark, cases)
    finally:
        spark.sql("DROP VIEW IF EXISTS probe_temp_view")
