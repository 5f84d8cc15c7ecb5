"""Retrying Delta commit conflicts with bounded, jittered exponential back-off.

Delta's optimistic concurrency control raises ``ConcurrentAppendException`` and its siblings (listed in
``delta.exceptions``) when another writer committed something the transaction read. Staging writes and the
publishing commit are idempotent (``replaceWhere`` on exactly their partitions; the publish is guarded by the run
ID), so running them again is safe.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from backfill_lib.core.errors import ConflictError

T = TypeVar("T")


def _conflict_types() -> tuple[type[BaseException], ...]:
    from delta import exceptions as d

    return tuple(getattr(d, name) for name in d.__all__)


def is_conflict(exc: BaseException) -> bool:
    """True for Delta's commit-conflict exceptions (also when they arrive unconverted, by Delta's error class)."""
    if isinstance(exc, _conflict_types()):
        return True
    text = str(exc)
    return "DELTA_CONCURRENT_" in text or "io.delta.exceptions.Concurrent" in text


def backoff_seconds(attempt: int, base: float, cap: float, rng: Callable[[], float] = random.random) -> float:
    """Delay before retry number ``attempt`` (1-based): ``min(cap, base * 2**(attempt-1))``, scaled by a random
    factor in ``[0.5, 1)`` so concurrent retries spread out (seconds)."""
    return min(cap, base * 2 ** (attempt - 1)) * (0.5 + rng() / 2)


def with_conflict_retry(
    action: Callable[[], T],
    *,
    what: str,
    attempts: int,
    base_seconds: float,
    max_seconds: float,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``action``; on a Delta commit conflict, wait and run it again, at most ``attempts`` times in all.

    ``on_retry(attempt_failed, exception, delay_seconds)`` is called before each wait. Any other exception
    propagates at once.

    Raises
    ------
    ConflictError
        When the last attempt also conflicts; the message starts with ``what`` (which names the partitions).
    """
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as exc:
            if not is_conflict(exc):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if attempt == attempts:
                raise ConflictError(
                    f"{what}: Delta commit conflict did not clear after {attempts} attempts: {first}"
                ) from exc
            delay = backoff_seconds(attempt, base_seconds, max_seconds)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")
