"""A second process on a local home another process has open is refused in one line, before its JVM starts.

The local default's embedded Derby metastore admits one process; a second JVM on the same home used to fail at its
first catalog read after tens of thousands of lines of stack traces (probe s22). Here the test worker's own JVM
holds the home, and a ``backfill status`` process is started on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import ROOT


def test_a_second_process_on_a_home_in_use_ends_with_one_line_naming_it(spark, settings):
    # the holder is this worker's JVM, whose driver (this process) is alive: refused after a short wait
    spark.sql("SHOW DATABASES").collect()  # this worker's JVM has the home's metastore booted
    env = {**os.environ, "BACKFILL_HOME": str(settings.home)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "backfill_lib.cli", "status", "bf_none"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    home = settings.home.resolve()
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines() == [
        f"error: home {home} is in use by process {spark.sparkContext._gateway.proc.pid}: its Derby metastore ({settings.metastore_dir}) admits "
        "one process at a time; wait for that process to end, or give this one another home (BACKFILL_HOME) or a "
        'shared metastore (see "Running on clusters")']
    assert took < 60, f"{took:.0f} s: a JVM was started before the refusal"
