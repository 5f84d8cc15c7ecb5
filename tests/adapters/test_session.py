"""The session's error reporting: a data error Spark converts reaches the user as our one line, not as a JSON trace."""

import logging
from decimal import Decimal

import pytest
from pyspark.errors import PySparkException
from pyspark.logger import PySparkLogger
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, StructField, StructType

from backfill_lib.adapters.session import QUERY_CONTEXT_LOGGERS, quiet_spark_query_errors


def test_an_overflow_in_a_dataframe_expression_and_in_sql_text_writes_nothing_to_stderr(spark, capfd):
    for name in QUERY_CONTEXT_LOGGERS:  # as a fresh process has them
        PySparkLogger.getLogger(name).setLevel(logging.NOTSET)
    quiet_spark_query_errors()
    schema = StructType([StructField("v", DecimalType(38, 0))])
    df = spark.createDataFrame([(Decimal(9 * 10**37),), (Decimal(9 * 10**37),)], schema)
    capfd.readouterr()

    with pytest.raises(PySparkException) as in_frame:
        df.agg(F.sum("v")).collect()
    with pytest.raises(PySparkException) as in_text:
        spark.sql("SELECT CAST('x' AS INT) AS i").collect()

    assert in_frame.value.getCondition() == "ARITHMETIC_OVERFLOW"
    assert in_text.value.getCondition() == "CAST_INVALID_INPUT"
    assert capfd.readouterr().err == ""
