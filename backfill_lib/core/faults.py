"""Named crash points and injected commit conflicts, for testing that runs survive them.

Both are off unless asked for, through the environment of the process that runs the backfill:

- ``BACKFILL_CRASH_AT=POINT`` or ``POINT:BATCH`` kills the process (``SIGKILL``: no cleanup, no ``finally``)
  when the runner reaches ``POINT`` (for batch-level points, only at batch ``BATCH``). Points, in run order:
  ``before_stage`` (a batch's source rows are about to be written to staging), ``after_stage`` (written,
  the ledger not yet told), ``after_validate`` (every check recorded, the run not yet marked validated),
  ``before_publish`` (the run is marked publishing, the target commit not yet made), ``after_publish``
  (the target commit made, the ledger not yet told) and ``between_restores`` (a rollback or automatic restore
  made one table's RESTORE commit and is about to restore the next; ``between_restores:N`` stops only before
  the ``N``-th table, counted from 0). ``after_run_id`` is in ``backfill run``: the run ID was just printed.
- ``BACKFILL_PAUSE_AT=POINT[:BATCH]`` instead, the first time the process reaches it, creates the file named by
  ``BACKFILL_PAUSE_FILE`` there and
  sleeps ``BACKFILL_PAUSE_SECONDS`` (default 10) before going on, or until the file is removed, so that a test
  can signal the process (or its whole process group) from outside at exactly that point, or act beside it.
- ``BACKFILL_SIGNAL_AT=POINT[:BATCH]`` sends this process ``SIGTERM`` there instead, as an operator stopping the
  run would (the run should end ``cancelled`` and resume cleanly).
- ``BACKFILL_FAIL_MONITOR=TABLE`` makes the release monitor find a failure on ``TABLE`` (``*``: the first table
  it checks) after everything published, so the whole release is rolled back.
- ``BACKFILL_INJECT_CONFLICT=PARTITION:N`` makes the first ``N`` staging writes of the batch holding
  ``PARTITION`` fail with Delta's own ``ConcurrentAppendException`` before they reach Delta (``N`` may be
  ``always``), so the retry path runs exactly as for a real conflict.
"""

from __future__ import annotations

import os
import signal
import threading
import time

CRASH_ENV = "BACKFILL_CRASH_AT"
SIGNAL_ENV = "BACKFILL_SIGNAL_AT"
CONFLICT_ENV = "BACKFILL_INJECT_CONFLICT"
MONITOR_ENV = "BACKFILL_FAIL_MONITOR"
PAUSE_ENV = "BACKFILL_PAUSE_AT"
PAUSE_FILE_ENV = "BACKFILL_PAUSE_FILE"
PAUSE_SECONDS_ENV = "BACKFILL_PAUSE_SECONDS"
CRASH_POINTS = ("before_stage", "after_stage", "after_validate", "before_publish", "after_publish",
                "between_restores", "after_run_id")

_lock = threading.Lock()
_conflicts_raised: dict[str, int] = {}
_paused: list[str] = []


def _at(env: str, name: str, batch: int | None) -> bool:
    spec = os.environ.get(env)
    if not spec:
        return False
    point, _, at_batch = spec.partition(":")
    return point == name and not (at_batch and batch is not None and int(at_batch) != batch)


def crash_point(name: str, batch: int | None = None) -> None:
    """Kill this process (``SIGKILL``), send it ``SIGTERM`` or pause here, when ``BACKFILL_CRASH_AT``,
    ``BACKFILL_SIGNAL_AT`` or ``BACKFILL_PAUSE_AT`` names ``name`` (and ``batch``, if the setting gives one)."""
    assert name in CRASH_POINTS, name
    if _at(PAUSE_ENV, name, batch) and not _paused:
        _paused.append(name)  # once per process: a later command of the same process goes on at once
        marker = os.environ.get(PAUSE_FILE_ENV)
        if marker:
            with open(marker, "a") as f:
                f.write(f"{name}\n")
        until = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_ENV, "10"))
        while time.monotonic() < until and not (marker and not os.path.exists(marker)):
            time.sleep(0.1)
    if _at(SIGNAL_ENV, name, batch):
        os.kill(os.getpid(), signal.SIGTERM)
    if _at(CRASH_ENV, name, batch):
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_conflict(keys: tuple[str, ...]) -> None:
    """Raise ``ConcurrentAppendException`` when ``BACKFILL_INJECT_CONFLICT`` targets one of ``keys`` and its
    count is not used up. Counts are per process."""
    spec = os.environ.get(CONFLICT_ENV)
    if not spec:
        return
    partition, _, times = spec.rpartition(":")
    if partition not in keys:
        return
    with _lock:
        raised = _conflicts_raised.get(partition, 0)
        if times != "always" and raised >= int(times):
            return
        _conflicts_raised[partition] = raised + 1
    from delta.exceptions import ConcurrentAppendException

    raise ConcurrentAppendException(
        message=f"[DELTA_CONCURRENT_APPEND] injected by {CONFLICT_ENV}: files were added to partition {partition} "
             "by a concurrent update"
    )


def monitor_failure(table: str) -> str | None:
    """The injected monitor failure for ``table``, if ``BACKFILL_FAIL_MONITOR`` asks for one."""
    from backfill_lib.core.table_names import same_table_key

    spec = os.environ.get(MONITOR_ENV)
    if spec and (spec == "*" or same_table_key(spec) == same_table_key(table)):  # however the table is spelt
        return f"injected by {MONITOR_ENV}"
    return None


def reset() -> None:
    """Forget how many conflicts were injected (between tests in one process)."""
    with _lock:
        _conflicts_raised.clear()
