"""The diff's two ways of pairing rows give the same diff, samples included: a Spark join, and (sides of at most
``DRIVER_ROWS`` rows) one collect paired in the driver; on keys and values where Python's own comparisons differ
from Spark's."""

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from pyspark.sql.types import (DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import Grain
from backfill_lib.validate import diff
from backfill_lib.validate.diff import PartitionDiff, _collected, diff_by_key


def _both_ways(staged, current, keys, partition, **options) -> dict[str, tuple[PartitionDiff, tuple]]:
    joined = diff_by_key(staged, current, keys, partition, **options)
    collects = []
    with pytest.MonkeyPatch.context() as patch:  # the driver's pairing is taken, not the join again
        patch.setattr(diff, "_collected", lambda *a: collects.append(1) or _collected(*a))
        paired = diff_by_key(staged, current, keys, partition, rows_at_most=0, **options)
    assert collects == [1]
    assert {p: (d, d.samples) for p, d in paired.items()} == {p: (d, d.samples) for p, d in joined.items()}
    return paired


def test_repeated_and_null_keys_moved_keys_floats_and_wide_decimals_over_many_partitions(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("sub", StringType()),
                         StructField("dt", DateType()), StructField("f", FloatType()),
                         StructField("d", DecimalType(38, 18)), StructField("t", StringType())])
    days = [date(2024, 1, d) for d in range(1, 29)]
    current = [(i, None if i % 5 == 0 else "a", day, 0.1 * i, Decimal(f"{i}.000000000000000001"), f"t{i}")
               for n, day in enumerate(days) for i in range(n, n + 4)]
    staged = [(i, sub, day, f if i % 3 else (f or 0) + 0.2, d if i % 4 else d + Decimal("1e-18"), t if i % 7 else None)
              for i, sub, day, f, d, t in current if i % 11]
    staged += [(1, "a", date(2024, 1, 5), 0.3, Decimal(1), "moved"), (99, None, date(2024, 1, 3), None, None, "new"),
               (2, "a", date(2024, 1, 1), -0.0, None, "twice"), (2, "a", date(2024, 1, 1), 0.0, None, "twice")]
    diffs = _both_ways(spark.createDataFrame(staged, schema), spark.createDataFrame(current, schema),
                       ["id", "sub"], "dt", corrected_columns=["f"])

    assert len(diffs) == 28
    # id 4's 1E-18 at the scale Spark gives a DECIMAL(38, 18) difference
    assert (diffs["2024-01-02"].changed_columns["d"], str(diffs["2024-01-02"].abs_change["d"])) == (1, "0E-17")
    assert (diffs["2024-01-05"].inserted, diffs["2024-01-03"].inserted) == (1, 1)
    assert sum(d.inserted for d in diffs.values()) == 2
    assert sum(d.deleted for d in diffs.values()) == 9  # id 0 on Jan 1, ids 11 and 22 on four days each
    jan1 = diffs["2024-01-01"]
    assert (jan1.inserted, jan1.deleted, jan1.updated + jan1.unchanged) == (0, 1, 5)  # id 2's three staged rows


def test_timestamp_keys_an_hour_apart_on_the_same_wall_clock_stay_apart(spark):
    schema = StructType([StructField("id", LongType()), StructField("at", TimestampType()),
                         StructField("v", DoubleType())])
    first = datetime(2024, 11, 3, 5, tzinfo=timezone.utc)  # 01:00 EDT in New York
    second = datetime(2024, 11, 3, 6, tzinfo=timezone.utc)  # 01:00 EST, an hour later
    current = spark.createDataFrame([(1, first, 1.0), (1, second, 2.0)], schema)
    staged = spark.createDataFrame([(1, first, 1.0), (1, second, 5.0)], schema)

    diffs = _both_ways(staged, current, ["id"], PartitionKeys("at", Grain.HOUR, "America/New_York"),
                       value_columns=["v"])

    assert diffs == {
        "2024-11-03T01:00:00-04:00": PartitionDiff("2024-11-03T01:00:00-04:00", 0, 0, 0, 1, {"v": 0},
                                                   {"v": Decimal(0)}),
        "2024-11-03T01:00:00-05:00": PartitionDiff("2024-11-03T01:00:00-05:00", 0, 0, 1, 0, {"v": 1},
                                                   {"v": Decimal("3.0")}, (), 1),
    }


def test_a_float_column_changes_in_single_precision_and_past_its_range(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("f", FloatType())])
    current = spark.createDataFrame([(1, date(2024, 3, 10), 0.2), (2, date(2024, 3, 10), -3e38)], schema)
    staged = spark.createDataFrame([(1, date(2024, 3, 10), 0.1), (2, date(2024, 3, 10), 3e38)], schema)

    d = _both_ways(staged, current, ["id"], "dt")["2024-03-10"]

    assert (d.updated, d.changed_columns) == (2, {"f": 2})
    assert d.abs_change["f"] == Decimal("Infinity")  # |3e38 - -3e38| is past FLOAT's range
    one = _both_ways(staged.where("id = 1"), current.where("id = 1"), ["id"], "dt")["2024-03-10"]
    assert one.abs_change == {"f": Decimal("0.10000000149011612")}  # 0.2f - 0.1f, in single precision


def test_a_decimal_sum_past_28_digits_stays_exact(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("c", DecimalType(38, 0))])
    current = spark.createDataFrame([(1, date(2024, 1, 1), Decimal(0)), (2, date(2024, 1, 1), Decimal(0))], schema)
    staged = spark.createDataFrame([(1, date(2024, 1, 1), Decimal(10**37)), (2, date(2024, 1, 1), Decimal(10**37 + 1))],
                                   schema)

    d = _both_ways(staged, current, ["id"], "dt")["2024-01-01"]

    assert str(d.abs_change["c"]) == "20000000000000000000000000000000000001"
