"""The start-up check of the Spark and Delta releases found (backfill_lib.core.platform). Pure."""

from __future__ import annotations

import pytest

from backfill_lib.core.errors import PlatformError
from backfill_lib.core.platform import check_python_packages, check_session_spark, spark_supported

PY = "/opt/venv/bin/python"


@pytest.mark.parametrize("version, supported", [
    ("4.1.4", True), ("4.1.3", True), ("4.1.0.dev0", True), ("4.1.0-amzn-0", True),
    ("4.0.1", False), ("4.2.0", False), ("3.5.1", False), ("4", False), ("unknown", False),
])
def test_spark_releases(version, supported):
    assert spark_supported(version) is supported


def test_supported_packages_pass_including_a_platform_delta_without_distribution():
    check_python_packages("4.1.3", "4.4.0", True, PY)
    check_python_packages("4.1.4", None, True, PY)  # Databricks Runtime: module `delta` without delta-spark


@pytest.mark.parametrize("pyspark, delta, module, message", [
    (None, "4.4.0", True, f"PySpark is not installed for {PY}: the embedded local default needs pip install "
                          f"'delta-backfill[local]'"),
    ("3.5.1", "3.2.0", True, f"PySpark 3.5.1 found for {PY}; delta-backfill supports Spark 4.1 (verified with 4.1.4)"),
    ("4.1.4", None, False, f"Delta Lake's Python module `delta` is not installed for {PY}"),
    ("4.1.4", "3.3.2", True, f"delta-spark 3.3.2 found for {PY}; delta-backfill supports Delta Lake 4"),
])
def test_unsupported_packages_are_named(pyspark, delta, module, message):
    with pytest.raises(PlatformError) as caught:
        check_python_packages(pyspark, delta, module, PY)
    assert str(caught.value).startswith(message)
    assert caught.value.exit_code == 2


def test_session_spark_is_checked():
    check_session_spark("4.1.4")
    with pytest.raises(PlatformError, match=r"^the Spark session runs Spark 4\.0\.0; delta-backfill supports Spark 4\.1"):
        check_session_spark("4.0.0")
