"""A second process on a local home another process has open is refused in one line, before its JVM starts.

The local default's embedded Derby metastore admits one process; a second JVM on the same home used to fail at its
first catalog read after tens of thousands of lines of stack traces (probe s22). Here the test worker's own JVM
holds the home, and a ``backfill history`` process is started on it (``backfill status`` and ``report`` read the
ledger's files without a JVM and answer beside it: tests/e2e/test_crash_safety.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_a_second_process_on_a_home_in_use_ends_with_one_line_naming_it(spark, settings):
    # the holder is this worker's JVM, whose driver (this process) is alive: refused after a short wait
    spark.sql("SHOW DATABASES").collect()  # this worker's JVM has the home's metastore booted
    env = {**os.environ, "BACKFILL_HOME": str(settings.home)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "backfill_lib.cli", "history", "db.t"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    home = settings.home.resolve()
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines() == [
        f"error: home {home} is in use by process {spark.sparkContext._gateway.proc.pid}: its Derby metastore ({settings.metastore_dir}) admits "
        "one process at a time; wait for that process to end, or give this one another home (BACKFILL_HOME) or a "
        'shared metastore (metastore_url in the settings)']
    assert took < 60, f"{took:.0f} s: a JVM was started before the refusal"


HOLD = ("import fcntl, sys, time; f = open(sys.argv[1], 'rb+'); fcntl.lockf(f, fcntl.LOCK_EX); "
        "open(sys.argv[2], 'w').close(); time.sleep(float(sys.argv[3]))")


def _holder(lock: Path, ready: Path, seconds: float, orphaned: bool) -> int:
    """Start a process holding ``lock`` as Derby's JVM does (a POSIX lock of the whole file) for ``seconds``; with
    ``orphaned`` its parent exits at once (a JVM whose command has returned); its process ID once it holds it."""
    hold = [sys.executable, "-c", HOLD, str(lock), str(ready), str(seconds)]
    if orphaned:
        started = subprocess.run(["bash", "-c", '"$@" >/dev/null 2>&1 & echo $!', "bash", *hold],
                                 capture_output=True, text=True, check=True)
        pid = int(started.stdout.strip())
    else:
        pid = subprocess.Popen(hold).pid
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline, "the holder did not take the lock"
        time.sleep(0.05)
    return pid


def _home(tmp_path: Path):
    from backfill_lib.core.settings import Settings

    settings = Settings(home=tmp_path / "home")
    settings.metastore_dir.mkdir(parents=True)
    (settings.metastore_dir / "dbex.lck").write_bytes(b"")
    return settings


def test_a_start_waits_for_a_holder_whose_driver_has_gone_instead_of_refusing(tmp_path):
    from backfill_lib.adapters.session import refuse_a_home_in_use

    settings = _home(tmp_path)
    _holder(settings.metastore_dir / "dbex.lck", tmp_path / "ready", 4, orphaned=True)
    started = time.monotonic()
    refuse_a_home_in_use(settings)  # returns once the holder let go: no error
    assert 2 < time.monotonic() - started < 30


def test_a_live_holder_is_refused_after_a_short_wait_naming_its_process(tmp_path):
    from backfill_lib.adapters.session import LIVE_HOLDER_WAIT_SECONDS, refuse_a_home_in_use
    from backfill_lib.core.errors import HomeInUseError

    settings = _home(tmp_path)
    pid = _holder(settings.metastore_dir / "dbex.lck", tmp_path / "ready", 30, orphaned=False)
    started = time.monotonic()
    with pytest.raises(HomeInUseError, match=rf"^home {settings.home.resolve()} is in use by process {pid}: "):
        refuse_a_home_in_use(settings)
    assert LIVE_HOLDER_WAIT_SECONDS <= time.monotonic() - started < 20
    os.kill(pid, 9)
