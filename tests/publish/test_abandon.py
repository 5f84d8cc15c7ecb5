"""``backfill abandon`` of a live run: the run's publisher reads the ledger right before its commit and stops."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F


def test_a_run_abandoned_between_validation_and_publish_writes_no_version(spark, settings, db, tmp_path,
                                                                          make_runner):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import AbandonedError
    from backfill_lib.ledger import Ledger
    from backfill_lib.runner import prepare
    from tests.fixtures import D8, D9, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D8, end=D9), run_id="abandon_live")
    runner, elsewhere = make_runner(), make_runner()  # the abandon comes from another process: its own ledger
    seen = {}

    def abandon_when_validated(record, status):
        if status == "validated" and record["run_id"] == plan.run_id:
            seen["said"] = elsewhere.leases.abandon(plan.run_id, "superseded by a newer request")
            # committed when abandon returns: a plain read (no flush of any ledger) sees it
            runs = spark.table(f"{settings.ledger_schema}.runs")
            seen["committed"] = runs.where((F.col("run_id") == plan.run_id) & (F.col("status") == "abandoned")).count()

    runner.ledger.listeners.append(abandon_when_validated)
    with pytest.raises(AbandonedError) as err:
        runner.run(plan, state)

    assert str(err.value) == (f"run abandon_live was abandoned while it ran (abandoned: superseded by a newer "
                              f"request); nothing published to {db}.events")
    assert err.value.exit_code == 4
    assert seen["said"].endswith(f"abandoned: superseded by a newer request; its range of {db}.events is free")
    assert seen["committed"] == 1
    assert current_version(spark, f"{db}.events") == 0  # no table version written
    record = Ledger(spark, settings.ledger_schema).run(plan.run_id)
    # the publisher's own 'publishing' event (queued before the check) is followed by 'abandoned' again
    assert (record["status"], record["message"], record["published_version"]) == (
        "abandoned", "abandoned: superseded by a newer request", None)
