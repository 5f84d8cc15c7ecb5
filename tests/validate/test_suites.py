"""GX suites from files, run on real Spark DataFrames."""

import json
from datetime import date

import pytest
from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from backfill_lib.core.errors import SuiteError
from backfill_lib.validate.suites import SuiteRunner, load_suite

SCHEMA = StructType([StructField("dt", DateType()), StructField("customer_id", IntegerType())])


def suite_file(tmp_path, expectations):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"name": "s", "expectations": expectations}))
    return path


def test_unparsable_suite_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "s", "expectations": [')
    with pytest.raises(SuiteError, match=r"broken.json: not valid JSON"):
        load_suite(path)
    with pytest.raises(SuiteError, match=r"missing.json: expectation suite file not found"):
        load_suite(tmp_path / "missing.json")


def test_unknown_expectation_type_is_refused_naming_the_file(tmp_path):
    path = suite_file(tmp_path, [{"type": "expect_column_to_be_perfect", "kwargs": {"column": "a"}}])
    with pytest.raises(SuiteError, match=r"suite.json: "):
        load_suite(path)


def test_not_null_counts_the_null_and_a_missing_column_fails_naming_it(spark, tmp_path):
    path = suite_file(tmp_path, [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "customer_id"}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "customer_name"}},
    ])
    df = spark.createDataFrame([(date(2024, 3, 9), 1), (date(2024, 3, 9), None), (date(2024, 3, 10), 3)], SCHEMA)
    checks = SuiteRunner(load_suite(path), "dt").validate(df, {}, batch=0)
    by_name = {c.name: c for c in checks}
    null_check = by_name["expect_column_values_to_not_be_null(customer_id)"]
    assert (null_check.success, null_check.partition, null_check.observed) == (False, "2024-03-09", "1 unexpected")
    missing = by_name["expect_column_values_to_not_be_null(customer_name)"]
    assert missing.success is False
    assert "customer_name" in missing.message


def test_data_docs_show_the_result_each_validation_ends_with(spark, tmp_path):
    path = suite_file(tmp_path, [{"type": "expect_column_values_to_be_between",
                                  "kwargs": {"column": "customer_id", "min_value": 0, "max_value": 5}}])
    out = tmp_path / "run"
    runner = SuiteRunner(load_suite(path), "dt", out)
    failing = spark.createDataFrame([(date(2024, 3, 9), 1), (date(2024, 3, 10), 7)], SCHEMA)
    passing = spark.createDataFrame([(date(2024, 3, 9), 2)], SCHEMA)

    [failed] = runner.validate(failing, {}, batch=0)
    [passed] = runner.validate(passing, {}, batch=1)  # the first one's docs are written before this validates
    runner.docs_built()

    assert (failed.success, failed.partition, failed.observed, passed.success) == (False, "2024-03-10", "1 unexpected", True)
    pages = sorted(p.read_text() for p in (out / "data_docs" / "validations").rglob("*.html"))
    assert len(pages) == 2  # the failing suite's complete result (not its quick first pass), and the passing one
    assert [p.count("customer_id") > 0 for p in pages] == [True, True]
    assert (out / "data_docs" / "index.html").exists()
    runner.docs_built()  # nothing pending: returns at once
