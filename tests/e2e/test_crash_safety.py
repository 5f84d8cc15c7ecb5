"""Crash safety to the last step, in real processes signalled as a scheduler or an operator would.

Three processes (``tests/crash_job.py``, one Spark start each) share one folder and go through one story:

1. ``run`` of a request with a mart, SIGKILL to the process group right after ``run ID: ...`` is printed;
2. ``status`` and ``resume`` of that ID (it publishes target and mart), then ``rollback``, SIGKILL to the
   group between the mart's RESTORE and the target's;
3. ``status`` (``rolling_back``), ``rollback`` again (finishes), ``rollback`` twice more (already rolled back,
   exit 0, with and without ``--force``), then ``run`` of a second request, SIGTERM to the group while staging
   (the run ends ``cancelled``, exit 130; the JVM ignores SIGTERM, so the process lives on), then ``resume`` of
   the cancelled run and its ``status``, as an operator would start them after the stop.

Each process pauses at a named point (``BACKFILL_PAUSE_AT``, :mod:`backfill_lib.core.faults`) and the test signals
its whole process group (``os.killpg``) from outside. The story runs twice: on the embedded default's Derby
metastore, and on a shared one (PostgreSQL on loopback, ``metastore_url``, as in ``test_shared_metastore.py``).
The tables and the ledger are read by path from the test session (Derby admits one JVM).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from backfill_lib.core.faults import (
    CONFLICT_ENV,
    CRASH_ENV,
    MONITOR_ENV,
    PAUSE_ENV,
    PAUSE_FILE_ENV,
    PAUSE_SECONDS_ENV,
    SIGNAL_ENV,
)
from backfill_lib.core.settings import METASTORE_ENV
from tests.conftest import ROOT
from tests.e2e.test_crash_points import _wait_for_jvm_exit
from tests.fixtures import D8, D10, EVENTS_SCHEMA, FULL_EXPECTED, events_request, with_mart
from tests.pg_server import postgres_server

ROLL, TERM = "cs_roll", "cs_term"  # the schemas: a target with a mart (rollback), a target alone (SIGTERM)
#: how long a paused process waits at most while the test runs commands beside it (they must end well within it;
#: on a shared metastore each of the five starts a JVM)
LONG_PAUSE_SECONDS = 420


def _env(home: Path, url: str | None) -> dict[str, str]:
    """The environment of a process on ``home`` and, with ``url``, the shared metastore at that JDBC URL."""
    env = {k: v for k, v in os.environ.items()
           if k not in (CRASH_ENV, SIGNAL_ENV, CONFLICT_ENV, MONITOR_ENV, METASTORE_ENV)}
    env.update(BACKFILL_HOME=str(home), BACKFILL_SPARK_MASTER="local[2]", **({METASTORE_ENV: url} if url else {}))
    return env


def _backfill(home: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess:
    """The ``backfill`` command of this environment, as a user types it in a second terminal on ``home``."""
    env = _env(home, url)
    return subprocess.run([str(Path(sys.executable).parent / "backfill"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=LONG_PAUSE_SECONDS)


def _run_job(home: Path, name: str, commands: list[list[str]], pause: str, sig: int | None,
             while_paused=None, url: str | None = None) -> tuple[int, str, str]:
    """Run ``commands`` (no argument may hold a space: crash_job splits on them) in one crash_job process in its
    own process group; once it pauses at ``pause``, call ``while_paused()`` (if given; the pause then lasts
    :data:`LONG_PAUSE_SECONDS`) and send ``sig`` to the whole group (``None``: let it finish). Returns exit code,
    stdout, stderr."""
    env = _env(home, url)
    marker = home / f"{name}.paused"
    if pause:
        env.update({PAUSE_ENV: pause, PAUSE_FILE_ENV: str(marker)})
    if while_paused:
        env[PAUSE_SECONDS_ENV] = str(LONG_PAUSE_SECONDS)
    argv = [sys.executable, str(ROOT / "tests" / "crash_job.py"), f"{ROLL}+monthly,{TERM}+target"]
    for c in commands:
        argv += ["--", *c]
    out, err = home / f"{name}.out", home / f"{name}.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=o, stderr=e, start_new_session=True)
        try:
            deadline = time.monotonic() + 900
            while sig is not None and not marker.exists():
                assert proc.poll() is None, f"{name} ended ({proc.returncode}) before pausing at {pause}: " \
                                            f"{err.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"{name} never paused at {pause}"
                time.sleep(0.1)
            if while_paused:
                while_paused()
            if sig is not None:
                os.killpg(proc.pid, sig)  # the driver, its Spark JVM and everything else in the group
            if sig == signal.SIGTERM:
                _end_pause_once_handled(proc, err, marker)
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    _wait_for_jvm_exit(home)  # no JVM is left behind, whichever signal ended the driver
    return code, out.read_text(), err.read_text()


def _end_pause_once_handled(proc: subprocess.Popen, err: Path, marker: Path) -> None:
    """End the pause of a process sent SIGTERM once its handler has said so (its batch in flight then finishes
    and the run stops, as after an operator's SIGTERM), rather than when the pause runs out."""
    deadline = time.monotonic() + 120
    while "SIGTERM: finishing the batches in flight" not in err.read_text() and proc.poll() is None:
        assert time.monotonic() < deadline, f"no SIGTERM handled: {err.read_text()[-3000:]}"
        time.sleep(0.1)
    marker.unlink(missing_ok=True)


@pytest.fixture(scope="module", params=["derby", "shared"])
def story(request, tmp_path_factory):
    """The story on the embedded default's Derby metastore, then on a shared one (PostgreSQL, ``metastore_url``):
    ``(home, run_id of the first run, steps, shared)``."""
    if request.param == "derby":
        yield _story(tmp_path_factory, None)
        return
    with postgres_server() as url:
        yield _story(tmp_path_factory, url)


def _story(tmp_path_factory, url: str | None):
    home = tmp_path_factory.mktemp("crash_safety_home")
    roll = with_mart(tmp_path_factory.mktemp("roll_request"), ROLL)  # 2024-03-09 and the mart's March
    # the SIGTERM's target reads the rollback story's source (only ever read): one table less to write on a cold JVM
    term = events_request(tmp_path_factory.mktemp("term_request"), TERM, start=D8, end=D10, source_db=ROLL,
                          batch_size=1)
    steps = {}
    steps["run"] = _run_job(home, "p1", [["run", str(roll)]], "after_run_id", signal.SIGKILL, url=url)
    found = re.search(r"run ID: (\S+)", steps["run"][1])
    assert found, steps["run"][1][-2000:]
    run_id = found.group(1)
    rollback = ["rollback", run_id, "--by", "ana@example.com", "--reason", "TEST-20-undo"]
    steps["resume_and_rollback"] = _run_job(home, "p2", [["status", run_id], ["resume", run_id], rollback],
                                            "between_restores", signal.SIGKILL, url=url)
    # one process for the SIGTERM and the resume after it (crash_job goes on after a non-zero exit code and
    # prints each command's code): SIGTERM leaves the JVM running, so a fourth JVM start would test nothing more
    # while the SIGTERM's run is paused (on Derby its JVM holds the home's metastore), a second terminal's status
    beside = []

    def beside_the_run():  # status and report from a second terminal; the report's files as they were written then
        beside.extend([_backfill(home, "status", url=url), _backfill(home, "status", "term_me", url=url),
                       _backfill(home, "status", "--json", url=url), _backfill(home, "report", "term_me", url=url)])
        folder = home / "runs" / "term_me"
        beside.extend([(folder / "report.html").read_text(), json.loads((folder / "summary.json").read_text()),
                       _backfill(home, "report", run_id, "--json", url=url)])

    steps["rollback_again_term_and_resume"] = _run_job(
        home, "p3", [["status", run_id], rollback, rollback, [*rollback, "--force"],
                     ["run", str(term), "--run-id", "term_me"], ["resume", "term_me"], ["status", "term_me"]],
        "after_stage:1", signal.SIGTERM, while_paused=beside_the_run, url=url)
    steps["status_beside_the_run"] = beside
    return home, run_id, steps, url is not None


def _table(home: Path, schema: str, name: str) -> str:
    return str(home / "warehouse" / f"{schema}.db" / name)


def _status(spark, home: Path, run_id: str) -> str:
    runs = spark.read.format("delta").load(_table(home, "backfill_ledger", "runs"))
    return runs.where(F.col("run_id") == run_id).orderBy(F.col("seq").desc()).first()["status"]


def _history(spark, path: str) -> list:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()


def test_a_run_killed_right_after_its_id_is_printed_is_found_and_resumed(story):
    _, run_id, steps, _ = story
    assert steps["run"][0] == -signal.SIGKILL
    code, out, err = steps["resume_and_rollback"]
    assert code == -signal.SIGKILL  # killed in its rollback, after status and resume
    assert re.search(rf"run {run_id}: (planned|staging)", out), out[-2000:]
    assert f"run {run_id}: published 1 partitions" in out
    assert f"mart {ROLL}.events_monthly: 1 partitions published as version 1 (was 0)" in out


def test_a_rollback_killed_between_restores_finishes_with_one_restore_per_table(spark, story):
    home, run_id, steps, _ = story
    code, out, err = steps["rollback_again_term_and_resume"]
    assert f"run {run_id}: rolling_back" in out
    assert (f"rollback under way (finish it with `backfill rollback RUN_ID` or `backfill resume RUN_ID`): "
            f"{ROLL}.events_monthly to version 0, {ROLL}.events to version 0") in out
    assert (f"run {run_id}: rolled back; rolled back by ana@example.com: TEST-20-undo; restored "
            f"{ROLL}.events_monthly to version 0 (already restored as version 2), {ROLL}.events to version 0") in out
    # the second and third rollback (with --force) of the rolled-back run: they say so, exit 0, write nothing
    assert out.count(f"run {run_id} was already rolled back; nothing to restore") == 2
    for name in ("events", "events_monthly"):
        path = _table(home, ROLL, name)
        history = _history(spark, path)
        assert [h["operation"] for h in history][1:] == ["WRITE", "RESTORE"]  # published, then one RESTORE
        meta = json.loads(history[2]["userMetadata"])
        assert (meta["run_id"], meta["action"], meta["rolled_back_by"]) == (run_id, "rollback", "ana@example.com")
        assert_df_equality(spark.read.format("delta").load(path),
                           spark.read.format("delta").option("versionAsOf", 0).load(path), ignore_row_order=True)
    assert _status(spark, home, run_id) == "rolled_back"
    assert _status(spark, home, f"{run_id}__m0") == "rolled_back"


def test_status_from_a_second_terminal_answers_while_a_run_holds_the_home(story):
    _, run_id, steps, _ = story
    listed, one, document = steps["status_beside_the_run"][:3]
    assert (listed.returncode, one.returncode, document.returncode) == (0, 0, 0), listed.stderr + one.stderr
    # the run's events reach the ledger behind it, in bursts: planned at least (its ID is printed after that)
    assert re.search(r"term_me\s+│\s+(planned|staging)\s+│", listed.stdout), listed.stdout
    assert re.search(rf"{run_id}\s+│\s+rolled_back\s+│", listed.stdout), listed.stdout
    assert re.search(r"^run term_me: (planned|staging) ", one.stdout, re.M), one.stdout
    assert re.search(r"^(planned|staging): running, or stopped \(.*\); `backfill resume term_me` finishes a stopped run",
                     one.stdout, re.M), one.stdout
    # three partitions planned; those with no step yet are counted as not started
    started = re.search(r"^partitions: 3 planned, (all started|(\d) started \(below\), (\d) not started)", one.stdout, re.M)
    assert started and (started.group(1) == "all started" or int(started.group(2)) + int(started.group(3)) == 3), one.stdout
    runs = {r["run_id"]: r["status"] for r in json.loads(document.stdout)["runs"]}
    assert runs["term_me"] in ("planned", "staging") and runs[run_id] == "rolled_back"


def test_sigterm_to_the_process_group_cancels_and_resume_publishes(spark, story):
    home, _, steps, _ = story
    code, out, err = steps["rollback_again_term_and_resume"]
    assert code == 130, err[-3000:]  # the first non-zero exit code: the cancelled run's
    assert re.search(r"^crash_job: exit 130: run \S+ --run-id term_me$", err, re.M), err[-3000:]
    assert "SIGTERM: finishing the batches in flight, then stopping" in err
    assert "run term_me cancelled" in err + out
    assert "unexpected" not in err
    for command in ("resume term_me", "status term_me"):
        assert re.search(rf"^crash_job: exit 0: {command}$", err, re.M), err[-3000:]
    assert "run term_me: published 3 partitions (9 rows)" in out  # by the resume: the run was cancelled
    assert _status(spark, home, "term_me") == "published"
    path = _table(home, TERM, "events")
    assert_df_equality(spark.read.format("delta").load(path), spark.createDataFrame(FULL_EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    history = _history(spark, path)
    assert [h["version"] for h in history] == [0, 1]  # created, then exactly one publish
    assert json.loads(history[1]["userMetadata"])["run_id"] == "term_me"


def test_report_from_a_second_terminal_answers_while_a_run_holds_the_home(story):
    home, run_id, steps, shared = story
    running, html, summary, finished = steps["status_beside_the_run"][3:]
    assert (running.returncode, finished.returncode) == (0, 0), running.stderr + finished.stderr
    # the running run's report: what the ledger holds so far, and a line saying where it was read from
    assert f"report: {home / 'runs' / 'term_me' / 'report.html'}" in running.stdout
    # Derby admits one JVM, so the report is read from the ledger's files; a shared metastore admits a second
    beside = "read from the ledger&#x27;s files while another process held the home (no Spark session)"
    assert (beside in html) is not shared
    assert (summary["run_id"], summary["target_table"], summary["versions"]["published"]) == (
        "term_me", f"{TERM}.events", None)
    assert summary["status"] in ("planned", "staging")  # paused after its first batch staged
    assert summary["partitions"] and {p["gate"] for p in summary["partitions"]} == {"not_validated"}  # no check yet
    # the rolled-back run's, as --json: its checks and totals from the ledger's files
    doc = json.loads(finished.stdout)
    assert (doc["run_id"], doc["status"], doc["checks_failed"]) == (run_id, "rolled_back", 0)
    assert doc["checks_total"] > 0
    assert doc["report"]["html"] == str(home / "runs" / run_id / "report.html")
