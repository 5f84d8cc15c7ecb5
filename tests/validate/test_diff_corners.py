"""Corners of the diff by key: NULL key parts on both sides, a key moving between partitions, a key repeated on
both sides with unlike rows, and an hour partition column with NaN and signed zeros in a DOUBLE column."""

import math
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from pyspark.sql.types import (DateType, DecimalType, DoubleType, IntegerType, StringType, StructField, StructType,
                               TimestampType)

from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import Grain
from backfill_lib.validate.diff import PartitionDiff, diff_by_key

pytestmark = pytest.mark.usefixtures("pairing")  # each test with the pairs made by Spark and in the driver

D10, D11 = date(2024, 3, 10), date(2024, 3, 11)


def test_null_key_parts_on_both_sides_match_only_the_same_null_pattern(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("sub", IntegerType()),
                         StructField("dt", DateType()), StructField("v", IntegerType())])
    current = spark.createDataFrame(
        [(1, None, D10, 10), (None, 1, D10, 20), (None, None, D10, 30), (2, None, D10, 40)], schema)
    staged = spark.createDataFrame(
        [(1, None, D10, 10), (None, 1, D10, 25), (None, None, D10, 27), (None, 2, D10, 50)], schema)

    diffs = diff_by_key(staged, current, ["id", "sub"], "dt", ["v"])

    # (1, NULL) alike: unchanged; (NULL, 1) 20 -> 25 and (NULL, NULL) 30 -> 27: updated by 5 + 3; (2, NULL) only
    # on the current side: deleted; (NULL, 2) only staged: inserted (it does not match (2, NULL)).
    assert diffs == {"2024-03-10": PartitionDiff("2024-03-10", 1, 1, 2, 1, {"v": 2}, {"v": Decimal(8)}, (), 2)}
    assert (diffs["2024-03-10"].rows_before, diffs["2024-03-10"].rows_after) == (4, 4)
    # The key hash tags NULLs (xxhash64 alone hashes (2, NULL) like (NULL, 2), and a sample would mix their
    # rows: an "updated" (NULL, 2) from 40): the four changed keys fall in buckets 0, 3, 2 and 1, in ascending
    # hash, each with rows of its own key only.
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in diffs["2024-03-10"].samples] == [
        ("updated", {"id": None, "sub": None, "dt": "2024-03-10"}, {"v": "30"}, {"v": "27"}),
        ("deleted", {"id": "2", "sub": None, "dt": "2024-03-10"}, {"v": "40"}, None),
        ("inserted", {"id": None, "sub": "2", "dt": "2024-03-10"}, None, {"v": "50"}),
        ("updated", {"id": None, "sub": "1", "dt": "2024-03-10"}, {"v": "20"}, {"v": "25"}),
    ]


def test_a_key_moving_between_partitions_is_deleted_from_one_and_inserted_into_the_other(spark, recorder):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", IntegerType())])
    current = spark.createDataFrame([(1, D10, 1), (2, D10, 2), (3, D11, 3)], schema)
    # key 1 moves from the 10th to the 11th and its value changes on the way: no update, a delete and an insert
    staged = spark.createDataFrame([(1, D11, 9), (2, D10, 2), (3, D11, 3)], schema)
    calls = []

    diffs = diff_by_key(staged, current, ["id"], "dt", ["v"],
                        inserted=recorder(calls, ["id"]))

    assert diffs == {
        "2024-03-10": PartitionDiff("2024-03-10", 0, 1, 0, 1, {"v": 0}, {"v": Decimal(0)}, (), 0),
        "2024-03-11": PartitionDiff("2024-03-11", 1, 0, 0, 1, {"v": 0}, {"v": Decimal(0)}, (), 0),
    }
    # the inserted keys, as given (without the partition column the diff adds), and the inserted row count
    assert calls == [([(1,)], ["id"], 1)]
    # each partition's one changed key is its sample, keyed with its own partition
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in diffs["2024-03-10"].samples] == [
        ("deleted", {"id": "1", "dt": "2024-03-10"}, {"v": "1"}, None)]
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in diffs["2024-03-11"].samples] == [
        ("inserted", {"id": "1", "dt": "2024-03-11"}, None, {"v": "9"})]


def test_a_key_repeated_on_both_sides_with_unlike_rows_pairs_two_by_two(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("a", DecimalType(10, 2)), StructField("b", StringType())])
    # key 1: staged rows A = (1.10, x), B = (4.35, x); current rows A = (1.10, x), C = (1.10, y)
    current = spark.createDataFrame([(1, D10, Decimal("1.10"), "x"), (1, D10, Decimal("1.10"), "y"),
                                     (2, D10, Decimal("2.00"), "z")], schema)
    staged = spark.createDataFrame([(1, D10, Decimal("1.10"), "x"), (1, D10, Decimal("4.35"), "x"),
                                    (2, D10, Decimal("2.01"), "z")], schema)

    d = diff_by_key(staged, current, ["id"], "dt", corrected_columns=["a"])["2024-03-10"]

    # key 1's four pairs: A-A unchanged; A-C b changed; B-A a changed by 3.25; B-C a by 3.25 and b changed.
    # key 2, one row against one: a changed by 0.01.
    assert d == PartitionDiff("2024-03-10", 0, 0, 4, 1, {"a": 3, "b": 2}, {"a": Decimal("6.51")}, ("a",), 2)
    assert (d.rows_before, d.rows_after) == (5, 5)
    # the samples are updated keys 1 and 2, each with rows of its own key
    rows = {("1", "1.10", "x"), ("1", "4.35", "x"), ("1", "1.10", "y"), ("2", "2.00", "z"), ("2", "2.01", "z")}
    assert {x["change"] for x in d.samples} == {"updated"}
    for x in d.samples:
        for side in (x["before"], x["after"]):
            assert (x["key"]["id"], side["a"], side["b"]) in rows


def test_hour_partitions_with_nan_and_signed_zeros_in_a_double_column(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("h", TimestampType()),
                         StructField("v", DoubleType())])
    nan = float("nan")

    def at(hour):
        return datetime(2024, 3, 10, hour, tzinfo=timezone.utc)

    current = spark.createDataFrame(
        [(1, at(6), nan), (2, at(6), 0.0), (4, at(6), None),
         (5, at(7), -0.0), (6, at(7), 0.5), (7, at(7), 7.0),
         (3, at(8), 1.5)], schema)
    staged = spark.createDataFrame(
        [(1, at(6), nan), (2, at(6), -0.0), (4, at(6), 2.0),
         (5, at(7), -0.0), (6, at(7), -1.25),
         (3, at(8), nan)], schema)

    # New York's hours: 06:00Z is 01:00 EST; 07:00Z is 03:00 EDT (the spring-forward skips 02:00); 08:00Z 04:00 EDT
    diffs = diff_by_key(staged, current, ["id"], PartitionKeys("h", Grain.HOUR, "America/New_York"), ["v"])

    assert set(diffs) == {"2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"}
    # NaN = NaN unchanged; 0.0 -> -0.0 updated by 0; NULL -> 2.0 updated, no size
    assert diffs["2024-03-10T01:00:00-05:00"] == PartitionDiff(
        "2024-03-10T01:00:00-05:00", 0, 0, 2, 1, {"v": 2}, {"v": Decimal(0)}, (), 2)
    # -0.0 = -0.0 unchanged; 0.5 -> -1.25 updated by 1.75; key 7 deleted
    assert diffs["2024-03-10T03:00:00-04:00"] == PartitionDiff(
        "2024-03-10T03:00:00-04:00", 0, 1, 1, 1, {"v": 1}, {"v": Decimal("1.75")}, (), 1)
    # 1.5 -> NaN is a change, and in float arithmetic |NaN - 1.5| is NaN
    d8 = diffs["2024-03-10T04:00:00-04:00"]
    assert (d8.inserted, d8.deleted, d8.updated, d8.unchanged, d8.changed_columns) == (0, 0, 1, 0, {"v": 1})
    assert d8.abs_change["v"].is_nan() and math.isnan(float(d8.abs_change["v"]))


def test_keys_alike_but_for_where_the_null_is_are_sampled_apart(spark):
    # xxhash64 skips NULL arguments: (2, NULL) and (NULL, 2) would share one key hash, so one sample, read from
    # the rows of both keys. The key hash tags NULLs: each key is its own sample, with rows of its own key only.
    schema = StructType([StructField("id", IntegerType()), StructField("sub", IntegerType()),
                         StructField("dt", DateType()), StructField("v", IntegerType())])
    current = spark.createDataFrame([(2, None, D11, 10), (None, 2, D11, 20), (1, 1, D11, 7)], schema)
    staged = spark.createDataFrame([(2, None, D11, 11), (None, 2, D11, 22), (1, 1, D11, 7)], schema)

    diffs = diff_by_key(staged, current, ["id", "sub"], "dt", ["v"])

    assert diffs == {"2024-03-11": PartitionDiff("2024-03-11", 0, 0, 2, 1, {"v": 2}, {"v": Decimal(3)}, (), 2)}
    # the two keys' hashes fall in buckets 2 and 3; (2, NULL)'s is the smaller
    samples = diffs["2024-03-11"].samples
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in samples] == [
        ("updated", {"id": "2", "sub": None, "dt": "2024-03-11"}, {"v": "10"}, {"v": "11"}),
        ("updated", {"id": None, "sub": "2", "dt": "2024-03-11"}, {"v": "20"}, {"v": "22"}),
    ]
    assert samples[0]["h"] < samples[1]["h"]


def test_a_double_key_of_either_zero_sign_is_one_key_and_its_sample_reads_both_sides(spark):
    # grouping holds 0.0 and -0.0 as one key, so the key hash must too, or the sample would miss a side
    schema = StructType([StructField("id", DoubleType()), StructField("dt", DateType()),
                         StructField("v", IntegerType())])
    current = spark.createDataFrame([(0.0, D10, 1)], schema)
    staged = spark.createDataFrame([(-0.0, D10, 2)], schema)

    d = diff_by_key(staged, current, ["id"], "dt", ["v"])["2024-03-10"]

    assert d == PartitionDiff("2024-03-10", 0, 0, 1, 0, {"v": 1}, {"v": Decimal(1)}, (), 1)
    assert [(x["change"], x["key"]["id"], x["before"], x["after"]) for x in d.samples] == [
        ("updated", "-0.0", {"v": "1"}, {"v": "2"})]


def test_a_decimal_change_or_sum_past_38_digits_is_left_out_of_abs_change_and_still_counted(spark):
    # DECIMAL(38, 0): a change from -9E37 to 9E37 does not fit the difference's 38 digits; two changes of 6E37
    # fit one by one, but not their sum; a DECIMAL(38, 2) column beside them keeps its sum (0.25 + 0.50).
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("a", DecimalType(38, 0)), StructField("b", DecimalType(38, 0)),
                         StructField("c", DecimalType(38, 2))])
    big, six = Decimal("9E37"), Decimal("6E37")
    current = spark.createDataFrame([(1, D10, -big, Decimal(0), Decimal("1.25")),
                                     (2, D10, Decimal(0), Decimal(0), Decimal("2.00")),
                                     (3, D11, Decimal(1), Decimal(0), Decimal(0))], schema)
    staged = spark.createDataFrame([(1, D10, big, six, Decimal("1.00")),
                                    (2, D10, Decimal(0), six, Decimal("2.50")),
                                    (3, D11, Decimal(4), Decimal(0), Decimal(0))], schema)

    diffs = diff_by_key(staged, current, ["id"], "dt", ["a", "b", "c"])

    assert diffs == {
        "2024-03-10": PartitionDiff("2024-03-10", 0, 0, 2, 0, {"a": 1, "b": 2, "c": 2}, {"c": Decimal("0.75")},
                                    (), 2),
        "2024-03-11": PartitionDiff("2024-03-11", 0, 0, 1, 0, {"a": 1, "b": 0, "c": 0},
                                    {"a": Decimal(3), "b": Decimal(0), "c": Decimal(0)}, (), 1),
    }
