from datetime import date
from decimal import Decimal

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, IntegerType, StructField, StructType

from backfill_lib.core.errors import RequestError
from backfill_lib.core.partition_keys import keys_of
from backfill_lib.intake.rules import MetricSpec
from backfill_lib.validate.fingerprints import fingerprint_aggregates, fingerprints_of, partition_fingerprints
from backfill_lib.validate.metrics import profile, profile_aggregates, profile_of
from backfill_lib.validate.reconcile import metric_per_partition
from backfill_lib.validate.shared_pass import SharedPass

ROWS = StructType([StructField("dt", DateType()), StructField("k", IntegerType()),
                   StructField("amount", DecimalType(17, 2))])


def test_one_job_gives_every_audit_what_its_own_aggregation_gives(spark):
    df = spark.createDataFrame([(date(2024, 3, 9), 1, Decimal("1.50")), (date(2024, 3, 9), 2, None),
                                (date(2024, 3, 10), 3, Decimal("-2.25"))], ROWS)
    keys = keys_of("dt")
    spec = MetricSpec(sum=("amount",), null_count=("amount",))
    shared = SharedPass(df, keys)
    metric = shared.add([F.expr("sum(amount)")], ["m"])
    metrics = shared.add(*profile_aggregates(df, keys, spec, at="staged"))
    fingerprints = shared.add(*fingerprint_aggregates(df))

    sc = spark.sparkContext

    def jobs_of(group, fn):
        sc.setJobGroup(group, group)
        try:
            return fn(), len(sc.statusTracker().getJobIdsForGroup(group))
        finally:
            sc.setJobGroup("", "")

    (got_metric, got_profile, got_fingerprints), shared_jobs = jobs_of("shared-pass-test", lambda: (
        keys.rekey({r["p"]: r["m"] for r in shared.rows(metric)}),
        profile_of(shared.rows(metrics), keys, spec),
        fingerprints_of(shared.rows(fingerprints), keys)))
    alone, one_audit_jobs = jobs_of("one-audit-test", lambda: partition_fingerprints(df, keys))

    assert shared_jobs == one_audit_jobs  # three audits' aggregates cost the Spark jobs of one
    assert got_metric == {"2024-03-09": Decimal("1.50"), "2024-03-10": Decimal("-2.25")}
    assert got_metric == metric_per_partition(df, keys, "sum(amount)")
    assert got_profile["2024-03-09"] == {"row_count": 2, "null_count(amount)": 1, "sum(amount)": Decimal("1.50")}
    assert got_profile == profile(df, keys, spec)
    assert got_fingerprints["2024-03-10"][0] == 1
    assert got_fingerprints == alone


def test_a_metric_that_fails_on_the_data_is_named_once_for_every_reader(spark):
    # ANSI casts: 'x' is not a number. The aggregation fails; the labelled rule whose metric fails alone is named,
    # and every later reader gets that same error without the aggregation running again.
    df = spark.createDataFrame([(date(2024, 3, 9), 1, Decimal("1.50")), (date(2024, 3, 10), 2, None)], ROWS)
    shared = SharedPass(df, keys_of("dt"))
    good = shared.add([F.expr("sum(amount)")], ["m"], "r.yml: field 'reconciliation.0.metric': 'sum(amount)' of db.t")
    shared.add([F.expr("sum(CAST(concat(k, 'x') AS INT))")], ["m"],
               "r.yml: field 'reconciliation.1.metric': 'sum(CAST(concat(k, 'x') AS INT))' of db.t")
    sc = spark.sparkContext
    sc.setJobGroup("shared-pass-failure", "shared-pass-failure")
    try:
        with pytest.raises(RequestError) as first:
            shared.rows(good)
        jobs = len(sc.statusTracker().getJobIdsForGroup("shared-pass-failure"))
        with pytest.raises(RequestError) as again:
            shared.rows(good)
        assert len(sc.statusTracker().getJobIdsForGroup("shared-pass-failure")) == jobs  # not run again
    finally:
        sc.setJobGroup("", "")
    assert again.value is first.value
    assert first.value.exit_code == 2
    assert str(first.value).startswith(
        "r.yml: field 'reconciliation.1.metric': 'sum(CAST(concat(k, 'x') AS INT))' of db.t failed on the staged "
        "rows; nothing was published: [CAST_INVALID_INPUT] The value '1x'")


def test_an_unlabelled_failure_is_raised_as_spark_raised_it(spark):
    df = spark.createDataFrame([(date(2024, 3, 9), 1, Decimal("1.50"))], ROWS)
    shared = SharedPass(df, keys_of("dt"))
    handle = shared.add([F.expr("sum(CAST(concat(k, 'x') AS INT))")], ["m"])
    with pytest.raises(PySparkException, match="CAST_INVALID_INPUT") as first:
        shared.rows(handle)
    assert not isinstance(first.value, RequestError)
    with pytest.raises(PySparkException) as again:
        shared.run()
    assert again.value is first.value
