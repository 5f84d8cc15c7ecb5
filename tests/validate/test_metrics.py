from datetime import date
from decimal import Decimal

import pytest
from pyspark.sql.types import DateType, DecimalType, DoubleType, IntegerType, StringType, StructField, StructType

from backfill_lib.core.errors import IntakeError
from backfill_lib.intake.rules import MetricSpec
from backfill_lib.validate.metrics import compare, difference, profile, profile_frame

D9, D10 = date(2024, 3, 9), date(2024, 3, 10)
AMOUNTS = StructType([StructField("dt", DateType()), StructField("amount", DecimalType(17, 0))])
FLOATS = StructType([StructField("dt", DateType()), StructField("x", DoubleType()), StructField("y", DoubleType())])


def by_name(checks):
    return {c.name: c for c in checks}


def test_decimal_sum_differs_by_exactly_one(spark):
    source = spark.createDataFrame([(D9, Decimal("12345678901234567")), (D9, Decimal("22345678901234567"))], AMOUNTS)
    staged = spark.createDataFrame([(D9, Decimal("12345678901234567")), (D9, Decimal("22345678901234568"))], AMOUNTS)
    spec = MetricSpec(sum=("amount",))

    src, stg = profile(source, "dt", spec), profile(staged, "dt", spec)

    assert src == {"2024-03-09": {"row_count": 2, "sum(amount)": Decimal("34691357802469134")}}
    assert isinstance(stg["2024-03-09"]["sum(amount)"], Decimal)
    assert difference(stg["2024-03-09"]["sum(amount)"], src["2024-03-09"]["sum(amount)"]) == Decimal(1)
    checks = by_name(compare(src, stg, spec, ["2024-03-09"], "amounts", batch=0))
    assert checks["amounts.row_count"].success is True
    failed = checks["amounts.sum(amount)"]
    assert (failed.success, failed.kind, failed.partition, failed.batch) == (False, "reconciliation", "2024-03-09", 0)
    assert (failed.observed, failed.expected) == ("34691357802469135", "34691357802469134")
    assert failed.message == "staged sum(amount) = 34691357802469135, source = 34691357802469134, difference 1"


def test_tolerance_lets_a_difference_within_it_pass():
    spec = MetricSpec(sum=("amount",), tolerance=Decimal("1"))
    src = {"p": {"row_count": 2, "sum(amount)": Decimal("10")}}
    checks = by_name(compare(src, {"p": {"row_count": 2, "sum(amount)": Decimal("11")}}, spec, ["p"], "r"))
    assert checks["r.sum(amount)"].success is True
    checks = by_name(compare(src, {"p": {"row_count": 2, "sum(amount)": Decimal("12")}}, spec, ["p"], "r"))
    assert checks["r.sum(amount)"].message == "staged sum(amount) = 12, source = 10, difference 2"


def test_difference_is_exact_beyond_28_digits():
    # Python's default decimal context would round both to 28 digits and call them equal.
    assert difference(Decimal("1" * 38), Decimal("1" * 37 + "2")) == Decimal(-1)
    assert difference(12345678901234567890123, 12345678901234567890120) == Decimal(3)
    assert difference(float("nan"), 1.0) is None and difference("a", "a") is None


def test_nan_and_null_are_counted_apart_and_all_null_columns_match(spark):
    source = spark.createDataFrame([(D9, 1.0, None), (D9, float("nan"), None), (D9, 2.0, None)], FLOATS)
    staged = spark.createDataFrame([(D9, 1.0, None), (D9, None, None), (D9, 2.0, None)], FLOATS)
    spec = MetricSpec(null_count=("x", "y"), nan_count=("x", "y"))

    src, stg = profile(source, "dt", spec), profile(staged, "dt", spec)
    checks = by_name(compare(src, stg, spec, ["2024-03-09"], "floats"))

    got = {name: (c.success, c.observed, c.expected) for name, c in checks.items()}
    assert got == {
        "floats.row_count": (True, "3", "3"),
        "floats.null_count(x)": (False, "1", "0"),
        "floats.null_count(y)": (True, "3", "3"),
        "floats.nan_count(x)": (False, "0", "1"),
        "floats.nan_count(y)": (True, "0", "0"),
    }
    assert checks["floats.nan_count(x)"].message == "staged nan_count(x) = 0, source = 1, difference -1"


def test_min_max_checksum_and_a_partition_missing_on_one_side(spark):
    schema = StructType([StructField("dt", DateType()), StructField("id", IntegerType()), StructField("s", StringType())])
    rows = [(D9, 1, "a"), (D9, 2, "b"), (D10, 3, "c")]
    spec = MetricSpec(sum=("id",), min_max=("id", "s"), checksum=("id", "s"))
    source = profile(spark.createDataFrame(rows, schema), "dt", spec)
    reordered = profile(spark.createDataFrame([rows[1], rows[0]], schema), "dt", spec)

    checks = compare(source, reordered, spec, ["2024-03-09", "2024-03-10"], "r", batch=1)

    by_key = {(c.partition, c.name): c for c in checks}
    assert all(c.success for c in checks if c.partition == "2024-03-09")  # same rows, other order
    assert (by_key[("2024-03-09", "r.sum(id)")].observed, by_key[("2024-03-09", "r.max(s)")].observed) == ("3", "b")
    missing = by_key[("2024-03-10", "r.row_count")]
    assert (missing.success, missing.message) == (False, "staged row_count = 0, source = 1, difference -1")
    assert by_key[("2024-03-10", "r.max(s)")].message == "staged max(s) = NULL, source = c"
    assert by_key[("2024-03-10", "r.checksum(id,s)")].observed is None

    changed = profile(spark.createDataFrame([(D9, 1, "a"), (D9, 2, "B")], schema), "dt", spec)
    assert changed["2024-03-09"]["checksum(id,s)"] != source["2024-03-09"]["checksum(id,s)"]
    assert isinstance(source["2024-03-09"]["sum(id)"], Decimal)


def test_float_column_in_sum_is_an_error_naming_it(spark):
    df = spark.createDataFrame([(D9, 1.0, 2.0)], FLOATS)
    with pytest.raises(IntakeError, match=r"^metrics: metric sum\(x\) needs an integer or decimal column, 'x' is double$"):
        profile(df, "dt", MetricSpec(sum=("x",)))
    with pytest.raises(IntakeError, match=r"^db.src: metric min_max names column 'nope', which does not exist$"):
        profile(df, "dt", MetricSpec(min_max=("nope",)), at="db.src")


def test_profile_is_one_aggregation_over_one_scan(spark, capsys):
    df = spark.createDataFrame([(D9, 1.0, None), (D10, 2.0, 3.0)], FLOATS)
    spec = MetricSpec(null_count=("x", "y"), nan_count=("x",), sum=(), min_max=("x",), checksum=("x", "y"))

    profile_frame(df, "dt", spec).explain()

    plan = capsys.readouterr().out
    # One scan, one shuffle, and the partial + final halves of a single hash aggregation.
    assert (plan.count("Scan "), plan.count("Exchange "), plan.count("HashAggregate(")) == (1, 1, 2), plan
