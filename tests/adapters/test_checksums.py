"""The canonical row hash: NULL-aware, alike for alike values of every column type, refused by none."""

from datetime import datetime

from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, MapType, StringType, StructField,
                               StructType, TimestampNTZType)

from backfill_lib.adapters.checksums import checksum_of, row_hash


def hashes(spark, schema, rows, columns=None):
    df = spark.createDataFrame(rows, schema)
    return [r["h"] for r in df.select(row_hash(df, columns or df.columns).alias("h")).collect()]


def test_a_null_is_told_from_its_neighbour_from_an_empty_string_and_from_zero(spark):
    two = StructType([StructField("a", StringType()), StructField("b", StringType())])
    swapped = hashes(spark, two, [(None, "x"), ("x", None)])
    text_and_int = StructType([StructField("s", StringType()), StructField("i", IntegerType())])
    empty = hashes(spark, text_and_int, [(None, None), ("", None), (None, 0), ("", 0)])

    assert swapped[0] != swapped[1]  # xxhash64 alone skips NULLs: both would hash as 'x'
    assert hashes(spark, two, [(None, "x"), ("x", None)], ["A", "B"]) == swapped  # names resolve as Spark's do
    assert len(set(empty)) == 4


def test_nested_nulls_keep_their_place(spark):
    schema = StructType([StructField("arr", ArrayType(StringType())),
                         StructField("st", StructType([StructField("a", StringType()), StructField("b", StringType())]))])
    got = hashes(spark, schema, [([None, "x"], (None, "x")), (["x", None], ("x", None)), ([], None), ([None], (None, None))])

    assert len(set(got)) == 4


def test_maps_compare_by_their_entries_at_any_depth(spark):
    m = MapType(StringType(), IntegerType())
    schema = StructType([StructField("m", m), StructField("st", StructType([StructField("m", m)])),
                         StructField("am", ArrayType(m))])
    rows = [
        ({"a": 1, "b": None}, ({"x": 1, "y": 2},), [{"p": 1, "q": 2}]),
        ({"b": None, "a": 1}, ({"y": 2, "x": 1},), [{"q": 2, "p": 1}]),  # the same entries in another order
        ({"a": 1}, ({"x": 1, "y": 2},), [{"p": 1, "q": 2}]),  # a NULL value is an entry
        ({"a": 1, "b": None}, ({"x": 1, "y": 3},), [{"p": 1, "q": 2}]),
        ({"a": 1, "b": None}, ({"x": 1, "y": 2},), [{"p": 1, "q": 2}, {}]),
    ]
    got = hashes(spark, schema, rows)

    assert got[0] == got[1]
    assert len(set(got)) == 4


def test_floats_keep_the_sign_of_zero_and_every_nan_is_alike(spark):
    schema = StructType([StructField("d", DoubleType()), StructField("ad", ArrayType(DoubleType()))])
    got = hashes(spark, schema, [(0.0, [0.0]), (-0.0, [0.0]), (0.0, [-0.0]), (float("nan"), [float("nan")])])
    df = spark.createDataFrame([(1,)], "i int").select(
        F.expr("CAST('NaN' AS DOUBLE)").alias("d"), F.expr("array(-CAST('NaN' AS DOUBLE))").alias("ad"))

    assert len(set(got)) == 4
    assert df.select(row_hash(df, ["d", "ad"])).first()[0] == got[3]


def test_variant_binary_and_timestamp_ntz_hash_and_sum(spark):
    df = spark.sql("""SELECT * FROM VALUES
        (parse_json('{"b": 1, "a": [1, null]}'), X'00FF', TIMESTAMP_NTZ'2024-03-10 02:30:00'),
        (parse_json('{"a": [1, null], "b": 1}'), X'00FF', TIMESTAMP_NTZ'2024-03-10 02:30:00'),
        (parse_json('{"a": [null, 1], "b": 1}'), X'FF00', TIMESTAMP_NTZ'2024-03-10 03:30:00') AS t(v, bin, ntz)""")
    got = [r["h"] for r in df.select(row_hash(df, ["v"]).alias("h")).collect()]
    by_column = [df.select(row_hash(df, [c]).alias("h")).distinct().count() for c in ("v", "bin", "ntz")]
    total = df.agg(checksum_of(df, ["v", "bin", "ntz"]).alias("c")).first()["c"]
    ntz = spark.createDataFrame([(datetime(2024, 3, 10, 2, 30),)], StructType([StructField("ntz", TimestampNTZType())]))

    assert got[0] == got[1] != got[2]  # a variant object's fields in any order are the same value
    assert by_column == [2, 2, 2]
    assert total == sum(r["h"] for r in df.select(row_hash(df, ["v", "bin", "ntz"]).alias("h")).collect())
    assert ntz.select(row_hash(ntz, ["ntz"])).first()[0] == df.select(row_hash(df, ["ntz"])).first()[0]
