"""Concurrent backfills in real processes on one shared metastore (``metastore_url``: PostgreSQL on loopback).

A PostgreSQL server (tests/pg_server.py) holds the Hive metastore every process's Spark reaches; the processes
share one home (its warehouse). Three rounds, each of processes started together (``tests/crash_job.py``, one
Spark start each; the first two create the tables, and the metastore's own by SchemaTool):

1. two overlapping requests (2024-03-08..09 and 09..10) at once: one stages, the other is refused before
   staging naming it (exit 2); while the winner is paused after staging, ``status`` and ``report`` of it answer
   from other processes;
2. disjoint requests (03-08 and 03-10) and the same request twice with one run ID (03-09), all at once: each
   range published in one commit, one run of the shared ID, no row twice;
3. ``abandon`` of a running run (03-09) from another process, then a new run of its range, beside two runs of
   which one is killed (SIGKILL) right before its commit and the other publishes (03-10); the process of the
   abandoned run then resumes the killed one (03-08).

The metastore then holds one schema version row, though the first processes started together on it.

Tables and ledger are read by path from the test session afterwards (exact rows, statuses and commits).
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

from backfill_lib.core.faults import CRASH_ENV, PAUSE_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV
from tests.conftest import ROOT
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, FULL_SOURCE, TARGET_ROWS, events_request
from tests.pg_server import postgres_server, psql

DB = "sm"
#: at most how many seconds a paused run waits while other processes act beside it (released as soon as they are
#: done; on a loaded 2-core machine two JVMs answering beside it took more than 90)
PAUSE_SECONDS = 300
FAULTS = (CRASH_ENV, PAUSE_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV, "BACKFILL_SIGNAL_AT", "BACKFILL_INJECT_CONFLICT",
          "BACKFILL_FAIL_MONITOR")


class Team:
    """The shared home, metastore URL and requests of the story."""

    def __init__(self, home: Path, url: str, requests: Path):
        self.home, self.url, self.requests = home, url, requests

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in FAULTS}
        env.update(BACKFILL_HOME=str(self.home), BACKFILL_METASTORE_URL=self.url, BACKFILL_SPARK_MASTER="local[2]")
        env.update(extra)
        return env

    def request(self, name: str, start, end, times: int) -> str:
        """A recompute of ``start``..``end`` (inclusive) whose rows are the source's times ``times``."""
        folder = self.requests / name
        folder.mkdir()
        sql = (f"SELECT id, dt, v * {times} AS v FROM {DB}.events_src "
               "WHERE dt >= :range_start AND dt < :range_end")
        return str(events_request(folder, DB, start=start, end=end, sql=sql, batch_size=1))

    def start(self, name: str, commands: list[list[str]], **env: str) -> subprocess.Popen:
        """``commands`` in one crash_job process (its own process group), output in ``<home>/<name>.out|err``."""
        argv = [sys.executable, str(ROOT / "tests" / "crash_job.py"), DB]
        for c in commands:
            argv += ["--", *c]
        with open(self.home / f"{name}.out", "w") as out, open(self.home / f"{name}.err", "w") as err:
            return subprocess.Popen(argv, cwd=ROOT, env=self.env(**env), stdout=out, stderr=err,
                                    start_new_session=True)

    def paused(self, name: str, **env: str) -> dict[str, str]:
        return {PAUSE_ENV: "after_stage:0", PAUSE_FILE_ENV: str(self.home / f"{name}.paused"),
                PAUSE_SECONDS_ENV: str(PAUSE_SECONDS), **env}

    def release(self, name: str) -> bool:
        """End ``name``'s pause (its process goes on); whether it was still paused."""
        marker = self.home / f"{name}.paused"
        paused = marker.exists()
        marker.unlink(missing_ok=True)
        return paused

    def backfill(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(Path(sys.executable).parent / "backfill"), *args], cwd=ROOT, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, procs: dict[str, subprocess.Popen]) -> dict[str, tuple[int, str, str]]:
        done = {}
        for name, proc in procs.items():
            try:
                code = proc.wait(timeout=900)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            done[name] = (code, (self.home / f"{name}.out").read_text(), (self.home / f"{name}.err").read_text())
        return done

    def wait_paused(self, names: list[str], procs: dict[str, subprocess.Popen]) -> str:
        """The first of ``names`` to pause after staging."""
        deadline = time.monotonic() + 600
        while True:
            for name in names:
                if (self.home / f"{name}.paused").exists():
                    return name
            assert any(procs[n].poll() is None for n in names), "every process ended before pausing: " + " | ".join(
                f"{n}: {(self.home / f'{n}.err').read_text()[-2000:]}" for n in names)
            assert time.monotonic() < deadline, "no process paused after staging"
            time.sleep(0.2)


def _answer(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared_metastore")
    with postgres_server() as url:
        home = folder / "home"
        home.mkdir()
        team = Team(home, url, folder / "requests")
        team.requests.mkdir()
        steps = {}
        # 1. overlapping requests at once; status and report of the one that stages, from other processes
        first, second = team.request("ov_one", D8, D9, 10), team.request("ov_two", D9, D10, 10)
        procs = {"ov_one": team.start("ov_one", [["run", first, "--run-id", "ov_one"]], **team.paused("ov_one")),
                 "ov_two": team.start("ov_two", [["run", second, "--run-id", "ov_two"]], **team.paused("ov_two"))}
        winner = team.wait_paused(["ov_one", "ov_two"], procs)
        watchers = {"status": team.backfill("status", winner), "report": team.backfill("report", winner)}
        steps["watch"] = {name: _answer(proc) for name, proc in watchers.items()}
        steps["watch_while_paused"] = procs[winner].poll() is None and team.release(winner)
        steps["overlap"] = (winner, team.finish(procs))

        # 2. disjoint requests, and one request twice with one run ID, all at once
        twin = team.request("twin", D9, D9, 20)
        procs = {"dj_a": team.start("dj_a", [["run", team.request("dj_a", D8, D8, 20), "--run-id", "dj_a"]]),
                 "dj_b": team.start("dj_b", [["run", team.request("dj_b", D10, D10, 20), "--run-id", "dj_b"]]),
                 "twin_1": team.start("twin_1", [["run", twin, "--run-id", "twin"]]),
                 "twin_2": team.start("twin_2", [["run", twin, "--run-id", "twin"]])}
        steps["disjoint"] = team.finish(procs)

        # 3. abandon from another process, then a new run of its range; beside it a run killed right before its
        #    commit (then resumed) and one that publishes
        again = team.request("ab", D9, D9, 30)
        procs = {"ab": team.start("ab", [["run", again, "--run-id", "ab"], ["run", again, "--run-id", "ab2"],
                                         ["resume", "killed"]], **team.paused("ab")),
                 "killed": team.start("killed", [["run", team.request("killed", D8, D8, 30), "--run-id", "killed"]],
                                      **{CRASH_ENV: "before_publish"}),
                 "survivor": team.start("survivor", [["run", team.request("survivor", D10, D10, 30), "--run-id",
                                                      "survivor"]])}
        team.wait_paused(["ab"], procs)
        steps["abandon"] = _answer(team.backfill("abandon", "ab", "--reason", "TEST-46-wrong-range"))
        procs["killed"].wait(timeout=600)  # gone before the process paused at "ab" resumes it
        team.release("ab")
        steps["release"] = team.finish(procs)
        steps["metastore_tables"] = psql(url, 'SELECT "TBL_NAME" FROM "TBLS" ORDER BY 1')
        steps["versions"] = psql(url, 'SELECT * FROM "VERSION"')
        yield team, steps


def _runs(spark, team: Team):
    """The latest status of each run of the ledger (read by path)."""
    runs = spark.read.format("delta").load(str(team.home / "warehouse" / "backfill_ledger.db" / "runs"))
    latest = runs.groupBy("run_id").agg(F.max("seq").alias("seq")).join(runs, ["run_id", "seq"])
    return {r["run_id"]: r["status"] for r in latest.collect()}


def _target(team: Team) -> str:
    return str(team.home / "warehouse" / f"{DB}.db" / "events")


def test_overlapping_requests_at_once_one_stages_the_other_is_refused_naming_it(spark, story):
    team, steps = story
    winner, done = steps["overlap"]
    loser = "ov_two" if winner == "ov_one" else "ov_one"
    assert done[winner][0] == 0, done[winner][2][-3000:]
    assert done[loser][0] == 2, done[loser][2][-3000:]
    assert re.search(rf"run {winner} \(owner ana@example.com, status \w+\) holds", done[loser][2]), done[loser][2][-2000:]
    assert _runs(spark, team).get(loser) in (None, "abandoned")
    staged = team.home / "warehouse" / "backfill_staging.db"
    assert not [p.name for p in staged.glob(f"*{loser}*")]


def test_status_and_report_answer_from_other_processes_while_a_run_stages(story):
    _, steps = story
    winner = steps["overlap"][0]
    code, out, err = steps["watch"]["status"]
    assert (code, err) == (0, ""), err[-2000:]
    assert winner in out and re.search(r"\bstaging\b", out), out
    code, out, err = steps["watch"]["report"]
    assert code == 0, err[-2000:]
    assert winner in out
    assert steps["watch_while_paused"], "the run was no longer paused when status and report answered"


def test_disjoint_runs_each_publish_in_one_commit_and_one_run_id_twice_is_one_run(spark, story):
    team, steps = story
    done = steps["disjoint"]
    assert (done["dj_a"][0], done["dj_b"][0]) == (0, 0), (done["dj_a"][2][-2000:], done["dj_b"][2][-2000:])
    twins = sorted((done[n][0], n) for n in ("twin_1", "twin_2"))
    # The later twin is refused (it met the other's plan or staging table at the same moment), or, when the other's
    # plan was in the ledger when it looked, it resumes the run and finds the run's commit made: one run either way
    # (no process tells a live run from a crashed one yet).
    later = done[twins[1][1]][2]
    if twins[1][0] == 2:
        assert "run ID twin was started by another process at the same moment" in later, later[-2000:]
    else:
        assert [code for code, _ in twins] == [0, 0], (done["twin_1"][2][-2000:], done["twin_2"][2][-2000:])
        found = [n for n in ("twin_1", "twin_2") if "found this run's commit" in done[n][2]]
        assert len(found) == 1, (done["twin_1"][2][-2000:], done["twin_2"][2][-2000:])
    runs = _runs(spark, team)
    assert (runs["dj_a"], runs["dj_b"], runs["twin"]) == ("published", "published", "published")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{_target(team)}`").collect()
    by_run = sorted(json.loads(h["userMetadata"]).get("run_id") for h in history if h["userMetadata"])
    assert [r for r in by_run if r in ("dj_a", "dj_b", "twin")] == ["dj_a", "dj_b", "twin"], by_run


def test_abandon_from_another_process_stops_the_run_and_frees_its_range(spark, story):
    team, steps = story
    code, out, err = steps["abandon"]
    assert code == 0, err[-2000:]
    code, out, err = steps["release"]["ab"]
    assert "crash_job: exit 0: run" in err and re.search(r"crash_job: exit [1-9]\d*: run \S+ --run-id ab$", err,
                                                         re.M), err[-3000:]
    runs = _runs(spark, team)
    assert (runs["ab"], runs["ab2"]) == ("abandoned", "published")


def test_a_run_killed_before_its_commit_resumes_beside_a_survivor_and_nothing_is_lost(spark, story):
    team, steps = story
    done = steps["release"]
    assert done["killed"][0] == -signal.SIGKILL or done["killed"][0] == 137, done["killed"][2][-2000:]
    assert done["survivor"][0] == 0, done["survivor"][2][-2000:]
    assert re.search(r"crash_job: exit 0: resume killed$", done["ab"][2], re.M), done["ab"][2][-3000:]
    runs = _runs(spark, team)
    assert (runs["killed"], runs["survivor"]) == ("published", "published")
    expected = spark.createDataFrame([(i, d, v * 30) for i, d, v in FULL_SOURCE], EVENTS_SCHEMA)
    actual = spark.read.format("delta").load(_target(team))
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert len(TARGET_ROWS) == actual.count() == 9


def test_the_tables_are_in_the_shared_metastore(story):
    _, steps = story
    assert {"events", "events_src", "runs"} <= set(steps["metastore_tables"]), steps["metastore_tables"]


def test_processes_starting_together_leave_one_schema_version_and_a_second_row_is_removed_at_the_next_start(
        story, tmp_path):
    from backfill_lib.adapters.metastore import prepare_metastore
    from backfill_lib.core.settings import Settings

    team, steps = story
    # Hive clients recording the version themselves each added a row when two started together on a new
    # metastore, and every later client failed to start
    assert steps["versions"] == ["1|2.3.0|Set by delta-backfill"]
    psql(team.url, """INSERT INTO "VERSION" VALUES (6, '2.3.0', 'Set by MetaStore UNKNOWN@127.0.0.1')""")
    prepare_metastore(Settings(home=tmp_path, metastore_url=team.url), {})
    assert psql(team.url, 'SELECT * FROM "VERSION"') == ["1|2.3.0|Set by delta-backfill"]
    # a creation stopped before VERSION: SchemaTool adds the missing table, then the row is written
    psql(team.url, 'DROP TABLE "VERSION"')
    prepare_metastore(Settings(home=tmp_path, metastore_url=team.url), {})
    assert psql(team.url, 'SELECT * FROM "VERSION"') == ["1|2.3.0|Set by delta-backfill"]
    assert {"events", "events_src", "runs"} <= set(psql(team.url, 'SELECT "TBL_NAME" FROM "TBLS"'))


def test_a_login_the_database_refuses_is_one_line_before_spark_starts(story, tmp_path):
    from backfill_lib.adapters.metastore import prepare_metastore
    from backfill_lib.core.errors import MetastoreError
    from backfill_lib.core.settings import Settings

    team, _ = story
    wrong = team.url.replace("/hive?", "/nohive?")
    with pytest.raises(MetastoreError, match=r'^metastore_url .*/nohive\?user=postgres&password=\*\*\*: the database '
                                             r'refused the login: database "nohive" does not exist$'):
        prepare_metastore(Settings(home=tmp_path, metastore_url=wrong), {})
