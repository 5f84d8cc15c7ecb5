"""The same run ID run twice at once, past the ledger's own check: the process that finds the run's staging table
created by the other after it looked is refused (exit 2, LeaseError) and writes nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from chispa import assert_df_equality

from backfill_lib.core.errors import LeaseError
from backfill_lib.run.staging import BATCH_COLUMN, StagingTable

SCHEMA = f"k INT, v STRING, {BATCH_COLUMN} INT"


def test_a_staging_table_created_by_another_process_after_the_check_refuses_this_one(spark, db):
    name = f"{db}.stg__events__twin"
    theirs = spark.createDataFrame([(1, "theirs", 0)], SCHEMA)
    # the other process's first batch created the table after this process found it missing
    theirs.writeTo(name).using("delta").partitionedBy(BATCH_COLUMN).create()
    table = StagingTable(SimpleNamespace(staging_table=name, run_id="twin"), exists=False)

    with pytest.raises(LeaseError) as refused:
        table.write(spark.createDataFrame([(1, "mine", 0)], SCHEMA), f"{BATCH_COLUMN} = 0")

    assert str(refused.value) == (
        f"run ID twin was started by another process at the same moment, and it created the run's staging table "
        f"{name} first: that process runs it (`backfill status twin`); this one wrote nothing")
    assert_df_equality(spark.table(name), theirs)
