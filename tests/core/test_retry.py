"""Pure parts of the run engine and release: back-off, retries, mart order, intervals, run IDs (no Spark)."""

from datetime import date, timedelta

import pytest

from backfill_lib.core.errors import ConflictError, RequestError
from backfill_lib.core.retry import backoff_seconds, with_conflict_retry
from backfill_lib.intake.request import BackfillRequest, DateRange, Mart, Source, Target, mart_order
from backfill_lib.plan.model import check_run_id
from backfill_lib.publish.release import check_protected, parse_interval, retention


def test_backoff_doubles_and_is_capped():
    assert [backoff_seconds(n, 0.5, 3.0, rng=lambda: 1.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_seconds(2, 0.5, 3.0, rng=lambda: 0.0) == 0.5  # jitter halves at most


def test_retry_reruns_only_conflicts_and_names_what_failed():
    from delta.exceptions import ConcurrentAppendException

    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConcurrentAppendException(message="[DELTA_CONCURRENT_APPEND] files were added")
        return "ok"

    assert with_conflict_retry(flaky, what="x", attempts=5, base_seconds=1, max_seconds=10, sleep=waits.append) == "ok"
    assert len(calls) == 3 and len(waits) == 2

    def always():
        raise ConcurrentAppendException(message="[DELTA_CONCURRENT_APPEND] files were added")

    with pytest.raises(ConflictError, match=r"^staging batch 2 \[2024-03-10 \.\. 2024-03-10\]: Delta commit conflict "
                                            r"did not clear after 2 attempts"):
        with_conflict_retry(always, what="staging batch 2 [2024-03-10 .. 2024-03-10]", attempts=2, base_seconds=0,
                            max_seconds=0, sleep=waits.append)

    def broken():
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        with_conflict_retry(broken, what="x", attempts=5, base_seconds=0, max_seconds=0, sleep=waits.append)


def mart(table, *deps):
    return Mart(table=table, partition_column="month", grain="month", sql="m.sql", keys=["k"], depends_on=deps)


def test_marts_run_after_what_they_depend_on_and_cycles_are_refused():
    ordered = mart_order((mart("d.c", "d.b"), mart("d.a"), mart("d.b", "d.a")))
    assert [m.table for m in ordered] == ["d.a", "d.b", "d.c"]
    with pytest.raises(ValueError, match="dependency cycle d.a -> d.b -> d.a"):
        mart_order((mart("d.a", "d.b"), mart("d.b", "d.a")))
    with pytest.raises(ValueError, match="d.a depends on d.x, which is not a mart"):
        mart_order((mart("d.a", "d.x"),))


def test_a_monthly_mart_covers_the_months_of_the_range():
    request = BackfillRequest(name="r", owner="o", reason="why", target=Target(table="d.t", partition_column="dt"),
                              range=DateRange(start=date(2013, 1, 15), end=date(2013, 3, 2)), strategy="recompute",
                              source=Source(sql="s.sql"), keys=["k"], marts=[mart("d.m")])
    child = request.mart_request(request.marts[0])
    assert (child.range.start, child.range.end) == (date(2013, 1, 1), date(2013, 3, 1))
    assert (child.target.table, child.strategy.value, child.owner) == ("d.m", "recompute", "o")


def test_retention_is_the_shorter_of_file_and_log_retention():
    assert parse_interval("interval 1 week") == timedelta(days=7)
    assert parse_interval("interval 36 hours") == timedelta(hours=36)
    assert retention({}) == timedelta(days=7)
    assert retention({"delta.deletedFileRetentionDuration": "interval 60 days",
                      "delta.logRetentionDuration": "interval 30 days"}) == timedelta(days=30)


def test_run_ids_and_protected_tables():
    assert check_run_id("fix_q1_2013") == "fix_q1_2013"
    with pytest.raises(RequestError, match="run ID 'a-b' must be"):
        check_run_id("a-b")
    check_protected(("prod.sales",), ["prod.sales"], "lead")
    with pytest.raises(Exception, match="table prod.sales is protected"):
        check_protected(("PROD.sales",), ["x.y", "prod.sales"], None)
