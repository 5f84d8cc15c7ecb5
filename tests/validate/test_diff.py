from datetime import date
from decimal import Decimal

import pytest
from pydantic import ValidationError
from pyspark.sql.types import DateType, DecimalType, IntegerType, StringType, StructField, StructType

from backfill_lib.core.errors import IntakeError
from backfill_lib.intake.rules import DiffGate
from backfill_lib.validate.diff import PartitionDiff, diff_by_key, evaluate

pytestmark = pytest.mark.usefixtures("pairing")  # each test with the pairs made by Spark and in the driver

D10, D11 = date(2024, 3, 10), date(2024, 3, 11)
ROWS = StructType([StructField("id", IntegerType()), StructField("dt", DateType()), StructField("v", IntegerType())])


def test_inserted_deleted_updated_unchanged_by_key(spark):
    current = spark.createDataFrame([(k, D10, k * 10) for k in range(1, 6)], ROWS)
    staged = spark.createDataFrame([(k, D10, 37 if k == 3 else k * 10) for k in range(2, 7)], ROWS)

    diffs = diff_by_key(staged, current, ["id"], "dt", ["v"])

    # Keys 2, 4 and 5 are on both sides with the same v: three unchanged, so rows before 5 = 1 + 1 + 3.
    assert diffs == {"2024-03-10": PartitionDiff("2024-03-10", 1, 1, 1, 3, {"v": 1}, {"v": Decimal(7)}, (), 1)}
    assert (diffs["2024-03-10"].rows_before, diffs["2024-03-10"].rows_after) == (5, 5)
    # Samples: per bucket of the key hash, the changed row with the smallest hash (keys 3, 6 and 1 fall in
    # buckets 2, 0 and 1), in ascending hash; values as Spark's JSON text.
    samples = diffs["2024-03-10"].samples
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in samples] == [
        ("updated", {"id": "3", "dt": "2024-03-10"}, {"v": "30"}, {"v": "37"}),
        ("inserted", {"id": "6", "dt": "2024-03-10"}, None, {"v": "60"}),
        ("deleted", {"id": "1", "dt": "2024-03-10"}, {"v": "10"}, None),
    ]
    assert samples[0]["h"] < samples[1]["h"] < samples[2]["h"]


def test_no_deletes_gate_fails_naming_the_partition(spark):
    current = spark.createDataFrame([(k, D10, k) for k in range(1, 6)] + [(9, D11, 9)], ROWS)
    staged = spark.createDataFrame([(k, D10, k) for k in range(2, 7)] + [(9, D11, 9)], ROWS)

    diffs = diff_by_key(staged, current, ["id"], "dt")
    checks = evaluate(diffs, DiffGate(max_deleted=0, max_inserted=1), batch=2)

    got = [(c.partition, c.name, c.success, c.observed, c.expected, c.message) for c in checks]
    assert got == [
        ("2024-03-10", "diff.max_deleted", False, "1", "0", "2024-03-10: 1 deleted keys, at most 0 allowed"),
        ("2024-03-10", "diff.max_inserted", True, "1", "1", None),
        ("2024-03-11", "diff.max_deleted", True, "0", "0", None),
        ("2024-03-11", "diff.max_inserted", True, "0", "1", None),
    ]
    assert {(c.kind, c.batch) for c in checks} == {("diff", 2)}
    assert diffs["2024-03-11"].samples == ()  # min_by skips rows whose ordering is NULL: no change, no sample


def test_null_key_part_on_both_sides_is_unchanged(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("sub", StringType()),
                         StructField("dt", DateType()), StructField("v", IntegerType())])
    rows = [(1, None, D10, 5), (1, "a", D10, 6)]
    current = spark.createDataFrame(rows, schema)
    staged = spark.createDataFrame([(1, None, D10, 5), (1, "a", D10, None)], schema)

    d = diff_by_key(staged, current, ["id", "sub"], "dt", ["v"])["2024-03-10"]

    assert (d.inserted, d.deleted, d.updated, d.unchanged) == (0, 0, 1, 1)
    # A change to NULL is a change, but has no size.
    assert (d.changed_columns, d.abs_change) == ({"v": 1}, {"v": Decimal(0)})


def test_changed_columns_abs_change_and_the_fraction_outside_the_corrected_column(spark):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("amount", DecimalType(10, 2)), StructField("note", StringType())])
    current = spark.createDataFrame(
        [(1, D10, Decimal("1.00"), "a"), (2, D10, Decimal("2.00"), "b"), (3, D10, Decimal("3.00"), "c"),
         (4, D10, Decimal("4.00"), "d")], schema)
    staged = spark.createDataFrame(
        [(1, D10, Decimal("1.25"), "a"), (2, D10, Decimal("1.50"), "B"), (3, D10, Decimal("3.00"), "C"),
         (4, D10, Decimal("4.00"), "d")], schema)

    d = diff_by_key(staged, current, ["id"], "dt", corrected_columns=["amount"])["2024-03-10"]

    assert (d.updated, d.unchanged, d.updated_outside) == (3, 1, 2)
    assert d.changed_columns == {"amount": 2, "note": 2}
    assert d.abs_change == {"amount": Decimal("0.75")}
    gate = DiffGate(max_updated_fraction=0.75, allowed_changed_columns=("amount",), max_updated_fraction_outside=0.25)
    checks = {c.name: c for c in evaluate({"2024-03-10": d}, gate)}
    assert checks["diff.max_updated_fraction"].success is True  # 3 of 4 is exactly the limit
    outside = checks["diff.max_updated_fraction_outside"]
    assert (outside.success, outside.observed) == (False, "0.5")
    assert outside.message == (
        "2024-03-10: 2 of 4 rows updated outside the corrected columns (50.00%, in note), at most 25.00% allowed"
    )


def test_a_missing_column_and_a_bad_gate_are_errors(spark):
    df = spark.createDataFrame([(1, D10, 1)], ROWS)
    with pytest.raises(IntakeError, match=r"^diff: column 'w' does not exist in the staged rows$"):
        diff_by_key(df, df, ["id"], "dt", ["w"])
    with pytest.raises(ValidationError):
        DiffGate(max_updated_fraction=1.5)


def test_zero_to_negative_zero_is_an_update_since_the_publish_writes_the_other_bits(spark, db):
    from pyspark.sql.types import DoubleType

    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", DoubleType())])
    current = spark.createDataFrame([(1, D10, 0.0), (2, D10, 0.0), (3, D10, -0.0), (4, D10, None)], schema)
    staged = spark.createDataFrame([(1, D10, -0.0), (2, D10, 0.0), (3, D10, -0.0), (4, D10, None)], schema)
    assert staged.where("id = 1 AND v = 0.0").count() == 1  # Spark's equality holds them equal ...
    # ... but a Delta write keeps the sign, so a published -0.0 is another value than the 0.0 it replaced
    staged.write.format("delta").saveAsTable(f"{db}.zeros")
    assert spark.sql(f"SELECT CAST(v AS STRING) AS v FROM {db}.zeros WHERE id = 1").first()["v"] == "-0.0"

    d = diff_by_key(staged, current, ["id"], "dt", ["v"])["2024-03-10"]

    assert (d.updated, d.unchanged, d.changed_columns, d.abs_change) == (1, 3, {"v": 1}, {"v": Decimal(0)})


def test_values_swapped_with_null_maps_reordered_and_repeated_keys(spark):
    from pyspark.sql.types import MapType

    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("a", StringType()), StructField("b", StringType()),
                         StructField("m", MapType(StringType(), IntegerType()))])
    current = spark.createDataFrame(
        [(1, D10, None, "x", {"p": 1, "q": 2}), (2, D10, "", None, {"p": 1}), (3, D10, "c", "c", {}),
         (3, D10, "c", "d", {})], schema)  # the target repeats key 3
    staged = spark.createDataFrame(
        [(1, D10, "x", None, {"q": 2, "p": 1}), (2, D10, "", None, {"p": 1, "q": None}), (3, D10, "c", "c", {})],
        schema)

    d = diff_by_key(staged, current, ["id"], "dt")["2024-03-10"]

    # key 1: a NULL and a value swapped places (the map only changed order); key 2: a map gained a NULL entry;
    # key 3 pairs with both target rows, one alike and one not, as a join would pair them
    assert d == PartitionDiff("2024-03-10", 0, 0, 3, 1, {"a": 1, "b": 2, "m": 1}, {}, (), 3)
    # the three keys fall in buckets 0, 2 and 1 of the key hash, in ascending hash; key 3 shows the target row
    # that differs
    assert [(x["change"], x["key"], x["before"], x["after"]) for x in d.samples] == [
        ("updated", {"id": "2", "dt": "2024-03-10"}, {"a": "", "b": None, "m": '{"p":1}'},
         {"a": "", "b": None, "m": '{"p":1,"q":null}'}),
        ("updated", {"id": "3", "dt": "2024-03-10"}, {"a": "c", "b": "d", "m": "{}"}, {"a": "c", "b": "c", "m": "{}"}),
        ("updated", {"id": "1", "dt": "2024-03-10"}, {"a": None, "b": "x", "m": '{"p":1,"q":2}'},
         {"a": "x", "b": None, "m": '{"p":1,"q":2}'})]
    # alone, key 3 is its partition's sample: of its two target rows, the one that differs is shown
    three = diff_by_key(staged.where("id = 3"), current.where("id = 3"), ["id"], "dt")["2024-03-10"]
    assert [(x["before"], x["after"]) for x in three.samples] == [
        ({"a": "c", "b": "d", "m": "{}"}, {"a": "c", "b": "c", "m": "{}"})]


def test_wide_decimal_changes_sum_exactly_and_a_repeated_key_pairs_as_a_join(spark):
    # decimal(38,18): a change of 1e-17 must count in abs_change, not round away; key 2 is repeated alike on
    # the target side, so its one staged row pairs twice (2 updated pairs, both changed by 0.5)
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("v", DecimalType(38, 18))])
    current = spark.createDataFrame([(1, D10, Decimal("1.00000000000000000")), (2, D10, Decimal("2")),
                                     (2, D10, Decimal("2"))], schema)
    staged = spark.createDataFrame([(1, D10, Decimal("1.00000000000000001")), (2, D10, Decimal("2.5"))], schema)

    d = diff_by_key(staged, current, ["id"], "dt")["2024-03-10"]

    assert (d.inserted, d.deleted, d.updated, d.unchanged) == (0, 0, 3, 0)
    assert d.changed_columns == {"v": 3}
    assert d.abs_change == {"v": Decimal("1.00000000000000001")}


def test_a_diff_of_many_partitions_reads_the_runs_twenty_smallest_samples(spark, monkeypatch):
    import backfill_lib.validate.diff as diff

    # 30 partitions, each with one updated key and one inserted key: 60 changed keys; in 6 partitions both fall
    # in one bucket of the key hash, so 54 sample candidates
    days = [date(2024, 1, d) for d in range(1, 31)]
    current = spark.createDataFrame([(k, d, 1) for d in days for k in (1, 2)], ROWS)
    staged = spark.createDataFrame([(k, d, 1 if k == 2 else 5) for d in days for k in (1, 2, 3)], ROWS)

    kept = diff_by_key(staged, current, ["id"], "dt", ["v"])
    monkeypatch.setattr(diff, "SAMPLE_ROWS", 1000)
    every = diff_by_key(staged, current, ["id"], "dt", ["v"])

    assert sum(len(d.samples) for d in every.values()) == 54
    smallest = sorted((x["h"], p, x["change"], x["after"]["v"]) for p, d in every.items() for x in d.samples)[:20]
    got = sorted((x["h"], p, x["change"], x["after"]["v"]) for p, d in kept.items() for x in d.samples)
    assert got == smallest  # the same rows, read whole from the few partitions that hold them
    assert {c for _, _, c, _ in got} == {"updated", "inserted"}
    assert kept == every  # counts and columns are the same; only the samples (left out of equality) differ
    assert kept["2024-01-07"].updated == 1 and kept["2024-01-07"].inserted == 1
