"""``--only changed`` for a source SQL that reads the target itself: the request's own publishes are no change of
its sources."""

from __future__ import annotations

from backfill_lib.plan.selection import prepare_selected
from tests.conftest import write_request
from tests.fixtures import D8, D9, FULL_SOURCE, make_events

KEYS = [D8.isoformat(), D9.isoformat()]


def test_only_changed_leaves_out_the_target_versions_this_requests_runs_published(spark, settings, db, tmp_path,
                                                                                 make_runner):
    make_events(spark, db, FULL_SOURCE)  # every v >= 0 in the target
    sql = tmp_path / "fix.sql"
    # reads the target itself: rows the target marks with a negative v are left out
    sql.write_text(f"SELECT s.id, s.dt, s.v * 10 AS v FROM {db}.events_src s WHERE s.dt >= :range_start AND "
                   f"s.dt < :range_end AND NOT EXISTS (SELECT 1 FROM {db}.events t WHERE t.id = s.id AND t.v < 0)")
    path = write_request(tmp_path / "fix.yml", owner="ana@example.com", reason="TEST-19: reads its target",
                         target={"table": f"{db}.events", "partition_column": "dt", "grain": "day"},
                         range={"start": KEYS[0], "end": KEYS[-1]}, time_zone="UTC", strategy="recompute",
                         source={"sql": str(sql)}, keys=["id"], batch_size=31)
    plan, state = prepare_selected(spark, settings, path, None)
    assert plan.pinned_versions == {f"{db}.events_src": 0, f"{db}.events": 0}
    first = make_runner().run(plan, state)
    assert (first.status, first.published_version) == ("published", 1)

    # only the run's own publish came since (target version 0 -> 1): nothing changed
    plan, _ = prepare_selected(spark, settings, path, "changed")
    assert plan.partitions == ()

    # a source row appended to March 9: March 9 alone, its reason naming that source only
    spark.sql(f"INSERT INTO {db}.events_src VALUES (23, DATE'2024-03-09', 23)")
    plan, _ = prepare_selected(spark, settings, path, "changed")
    assert [(c.key, c.reason) for c in plan.selection.chosen] == [
        (KEYS[1], f"source files changed since run {first.plan.run_id} ({db}.events_src version 0 -> 1)")]

    # another writer marks a row in the target: its files are compared as they are (this request's publish
    # included); the subquery reads the target without a dt bound, so both days read the new file
    spark.sql(f"INSERT INTO {db}.events VALUES (99, DATE'2024-03-08', -1)")
    plan, _ = prepare_selected(spark, settings, path, "changed")
    assert [(c.key, c.reason) for c in plan.selection.chosen] == [
        (key, f"source files changed since run {first.plan.run_id} ({db}.events version 0 -> 2, {db}.events_src "
              "version 0 -> 1)") for key in KEYS]
