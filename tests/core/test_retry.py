"""Back-off and retries of Delta commit conflicts (no Spark)."""

import pytest

from backfill_lib.core.errors import ConflictError
from backfill_lib.core.retry import backoff_seconds, with_conflict_retry


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
