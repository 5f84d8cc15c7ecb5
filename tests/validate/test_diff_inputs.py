"""The diff by key on inputs the other diff tests leave out: column names that need quoting or that look
like the diff's internal aliases, keys repeated unevenly on both sides, types that differ between the sides, a
formatted STRING partition column and date-part columns, empty sides, NULLs on one side only, no value columns."""

from datetime import date
from decimal import Decimal

import pytest
from pyspark.sql.types import (DateType, DecimalType, DoubleType, IntegerType, LongType, StringType, StructField,
                               StructType)

from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import Grain
from backfill_lib.validate.diff import PartitionDiff, diff_by_key

pytestmark = pytest.mark.usefixtures("pairing")  # each test with the pairs made by Spark and in the driver

D10, D11 = date(2024, 3, 10), date(2024, 3, 11)


def test_column_names_that_need_quoting(spark, recorder):
    # a space, a dot with mixed case, a backtick, a space with mixed case
    schema = StructType([StructField("my id", IntegerType()), StructField("Part.Date", DateType()),
                         StructField("a`b", IntegerType()), StructField("Amount Value", DecimalType(10, 2))])
    current = spark.createDataFrame([(1, D10, 10, Decimal("1.00")), (2, D10, 20, Decimal("2.00")),
                                     (3, D10, 30, Decimal("3.00"))], schema)
    staged = spark.createDataFrame([(1, D10, 10, Decimal("1.00")), (2, D10, 25, Decimal("2.00")),
                                    (3, D10, 30, Decimal("3.50")), (4, D10, 40, Decimal("4.00"))], schema)
    calls = []

    diffs = diff_by_key(staged, current, ["my id"], "Part.Date", corrected_columns=["Amount Value"],
                        inserted=recorder(calls, ["my id"]))

    # key 1 alike; key 2: a`b 20 -> 25 (outside the corrected column); key 3: Amount Value +0.50; key 4 inserted
    assert diffs == {"2024-03-10": PartitionDiff(
        "2024-03-10", 1, 0, 2, 1, {"a`b": 1, "Amount Value": 1}, {"a`b": Decimal(5), "Amount Value": Decimal("0.50")},
        ("Amount Value",), 1)}
    assert calls == [([(4,)], ["my id"], 1)]
    samples = diffs["2024-03-10"].samples
    assert samples and {x["change"] for x in samples} <= {"inserted", "updated"}
    for x in samples:
        assert set(x["key"]) == {"my id", "Part.Date"}
        assert set(x["after"]) == {"a`b", "Amount Value"}


def test_column_names_alike_the_internal_aliases(spark, recorder):
    # keys v0 and s, the partition column k0; value columns h, sx, srh and k1
    schema = StructType([StructField("v0", IntegerType()), StructField("s", StringType()),
                         StructField("k0", DateType()), StructField("h", IntegerType()),
                         StructField("sx", StringType()), StructField("srh", LongType()),
                         StructField("k1", DoubleType())])
    current = spark.createDataFrame([(1, "a", D10, 1, "x", 100, 1.0), (1, "b", D10, 2, "y", 200, 2.0),
                                     (2, "a", D10, 3, "z", 300, 3.0), (2, "a", D11, 4, "w", 400, 4.0)], schema)
    staged = spark.createDataFrame([(1, "a", D10, 1, "x", 100, 1.0), (1, "b", D10, 2, "Y", 250, 2.0),
                                    (2, "a", D10, 5, "z", 300, 3.5), (2, "a", D11, 4, "w", 400, 4.0),
                                    (3, None, D11, None, None, None, None)], schema)
    calls = []

    diffs = diff_by_key(staged, current, ["v0", "s"], "k0", corrected_columns=["h"],
                        inserted=recorder(calls, ["v0", "s"]))

    # 10th: (1, a) alike; (1, b) sx and srh (+50) changed; (2, a) h (+2) and k1 (+0.5) changed: both outside h
    # 11th: (2, a) alike; (3, NULL) inserted
    assert diffs == {
        "2024-03-10": PartitionDiff("2024-03-10", 0, 0, 2, 1, {"h": 1, "sx": 1, "srh": 1, "k1": 1},
                                    {"h": Decimal(2), "srh": Decimal(50), "k1": Decimal("0.5")}, ("h",), 2),
        "2024-03-11": PartitionDiff("2024-03-11", 1, 0, 0, 1, {"h": 0, "sx": 0, "srh": 0, "k1": 0},
                                    {"h": Decimal(0), "srh": Decimal(0), "k1": Decimal(0)}, ("h",), 0),
    }
    assert calls == [([(3, None)], ["v0", "s"], 1)]
    inserted = [x for x in diffs["2024-03-11"].samples]
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in inserted] == [
        ("inserted", {"v0": "3", "s": None, "k0": "2024-03-11"}, None,
         {"h": None, "sx": None, "srh": None, "k1": None})]


def test_a_key_twice_on_staged_and_three_times_on_current_makes_six_pairs(spark, recorder):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", IntegerType()), StructField("c", StringType())])
    # key 1: staged A = (10, x), B = (12, x); current A = (10, x), C = (10, y), D = (15, x)
    # key 2 only staged, twice; key 3 only current, twice
    current = spark.createDataFrame([(1, D10, 10, "x"), (1, D10, 10, "y"), (1, D10, 15, "x"),
                                     (3, D10, 30, "q"), (3, D10, 31, "q")], schema)
    staged = spark.createDataFrame([(1, D10, 10, "x"), (1, D10, 12, "x"),
                                    (2, D10, 20, "p"), (2, D10, 21, "p")], schema)
    calls = []

    diffs = diff_by_key(staged, current, ["id"], "dt", corrected_columns=["v"], inserted=recorder(calls, ["id"]))

    # pairs: A-A unchanged; A-C c; A-D v by 5; B-A v by 2; B-C v by 2 and c; B-D v by 3
    assert diffs == {"2024-03-10": PartitionDiff(
        "2024-03-10", 2, 2, 5, 1, {"v": 4, "c": 2}, {"v": Decimal(12)}, ("v",), 2)}
    assert calls == [([(2,)], ["id"], 2)]


def test_types_that_differ_between_the_sides_are_compared_widened(spark):
    staged_schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                                StructField("amt", DecimalType(10, 2)), StructField("n", IntegerType())])
    current_schema = StructType([StructField("id", LongType()), StructField("dt", DateType()),
                                 StructField("amt", DecimalType(12, 4)), StructField("n", LongType())])
    current = spark.createDataFrame(
        [(1, D10, Decimal("1.2500"), 10), (2, D10, Decimal("2.0000"), 3_000_000_000),
         (3, D10, Decimal("3.1234"), 30), (4, D10, Decimal("4.0000"), 40)], current_schema)
    staged = spark.createDataFrame(
        [(1, D10, Decimal("1.25"), 10), (2, D10, Decimal("2.00"), 7), (3, D10, Decimal("3.12"), 30),
         (4, D10, None, 40)], staged_schema)

    diffs = diff_by_key(staged, current, ["id"], "dt", corrected_columns=["amt"])

    # key 1: 1.25 = 1.2500 unchanged; key 2: n by 2999999993; key 3: amt by 0.0034; key 4: amt to NULL, no size
    assert diffs == {"2024-03-10": PartitionDiff(
        "2024-03-10", 0, 0, 3, 1, {"amt": 2, "n": 1}, {"amt": Decimal("0.0034"), "n": Decimal(2_999_999_993)},
        ("amt",), 1)}


def test_a_formatted_string_partition_column_and_a_key_moving_between_its_partitions(spark, recorder):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", StringType()),
                         StructField("v", IntegerType())])
    current = spark.createDataFrame([(1, "20240310", 1), (2, "20240310", 2), (3, "20240311", 3)], schema)
    # key 1 moves to the 11th with the same value; key 2 changes by 3
    staged = spark.createDataFrame([(1, "20240311", 1), (2, "20240310", 5), (3, "20240311", 3)], schema)
    calls = []

    diffs = diff_by_key(staged, current, ["id"], PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd"), ["v"],
                        inserted=recorder(calls, ["id"]))

    assert diffs == {
        "20240310": PartitionDiff("20240310", 0, 1, 1, 0, {"v": 1}, {"v": Decimal(3)}, (), 1),
        "20240311": PartitionDiff("20240311", 1, 0, 0, 1, {"v": 0}, {"v": Decimal(0)}, (), 0),
    }
    assert calls == [([(1,)], ["id"], 1)]


def test_date_part_partition_columns(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("y", IntegerType()),
                         StructField("m", IntegerType()), StructField("d", IntegerType()),
                         StructField("v", IntegerType())])
    current = spark.createDataFrame([(1, 2024, 3, 10, 1), (2, 2024, 3, 10, 2), (1, 2024, 3, 11, 7)], schema)
    staged = spark.createDataFrame([(1, 2024, 3, 10, 4), (2, 2024, 3, 10, 2), (2, 2024, 3, 11, 8)], schema)

    diffs = diff_by_key(staged, current, ["id"], PartitionKeys("y/m/d", Grain.DAY, "UTC", parts=("y", "m", "d")),
                        ["v"])

    # the 10th: key 1 1 -> 4, key 2 alike; the 11th: key 1 deleted, key 2 inserted
    assert diffs == {
        "2024-03-10": PartitionDiff("2024-03-10", 0, 0, 1, 1, {"v": 1}, {"v": Decimal(3)}, (), 1),
        "2024-03-11": PartitionDiff("2024-03-11", 1, 1, 0, 0, {"v": 0}, {"v": Decimal(0)}, (), 0),
    }


def test_an_empty_side(spark, recorder):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", IntegerType())])
    rows = spark.createDataFrame([(1, D10, 1), (2, D10, 2), (3, D11, 3)], schema)
    empty = spark.createDataFrame([], schema)
    calls = []

    deleted = diff_by_key(empty, rows, ["id"], "dt", ["v"], inserted=recorder(calls, ["id"]))

    assert deleted == {
        "2024-03-10": PartitionDiff("2024-03-10", 0, 2, 0, 0, {"v": 0}, {"v": Decimal(0)}, (), 0),
        "2024-03-11": PartitionDiff("2024-03-11", 0, 1, 0, 0, {"v": 0}, {"v": Decimal(0)}, (), 0),
    }
    assert calls == []  # nothing inserted: not called
    assert {x["change"] for x in deleted["2024-03-10"].samples} == {"deleted"}

    inserted = diff_by_key(rows, empty, ["id"], "dt", ["v"], inserted=recorder(calls, ["id"]))

    assert inserted == {
        "2024-03-10": PartitionDiff("2024-03-10", 2, 0, 0, 0, {"v": 0}, {"v": Decimal(0)}, (), 0),
        "2024-03-11": PartitionDiff("2024-03-11", 1, 0, 0, 0, {"v": 0}, {"v": Decimal(0)}, (), 0),
    }
    assert calls == [([(1,), (2,), (3,)], ["id"], 3)]

    assert diff_by_key(empty, empty, ["id"], "dt", ["v"]) == {}


def test_nulls_in_value_columns_on_one_side_only(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", IntegerType()), StructField("s", StringType()),
                         StructField("d", DoubleType())])
    current = spark.createDataFrame([(1, D10, None, "a", 1.0), (2, D10, 5, None, 2.0), (3, D10, 7, "c", None),
                                     (4, D10, None, None, None)], schema)
    staged = spark.createDataFrame([(1, D10, 3, "a", 1.0), (2, D10, 5, "", 2.0), (3, D10, 9, "c", 4.5),
                                    (4, D10, None, None, None)], schema)

    d = diff_by_key(staged, current, ["id"], "dt", corrected_columns=["v"])["2024-03-10"]

    # key 1: v NULL -> 3 (no size; only the corrected column); key 2: s NULL -> ''; key 3: v by 2 and d NULL ->
    # 4.5 (no size); key 4: all NULL on both sides, unchanged
    assert d == PartitionDiff("2024-03-10", 0, 0, 3, 1, {"v": 2, "s": 1, "d": 1}, {"v": Decimal(2), "d": Decimal(0)},
                              ("v",), 2)


def test_no_value_columns_and_extra_staged_columns(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", IntegerType())])
    current = spark.createDataFrame([(1, D10, 1), (2, D10, 2)], schema)
    staged = spark.createDataFrame([(1, D10, 9), (3, D10, 3)], schema)

    # no value columns: a matched key is unchanged whatever its other columns hold
    assert diff_by_key(staged, current, ["id"], "dt", []) == {
        "2024-03-10": PartitionDiff("2024-03-10", 1, 1, 0, 1, {}, {}, (), 0)}

    # the default value columns are the current side's: a column only the staged side has is not compared
    wider = staged.withColumn("extra", staged["v"] * 100)
    assert diff_by_key(wider, current, ["id"], "dt") == {
        "2024-03-10": PartitionDiff("2024-03-10", 1, 1, 1, 0, {"v": 1}, {"v": Decimal(8)}, (), 1)}
