"""Strategies on small real Delta tables: patch, rebuild, row-count gates, schema guard, cost from the log."""

import threading
from dataclasses import replace
from datetime import date

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import GateFailedError, SchemaMismatchError
from backfill_lib.runner import prepare
from backfill_lib.strategies import strategy_for
from backfill_lib.strategies.base import verify_partitions
from backfill_lib.validate.fingerprints import staged_fingerprints
from backfill_lib.strategies.commit_check import Written, verify_commit
from tests.conftest import quiet_runner, write_request

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
ID_DT_AMT = StructType([StructField("id", IntegerType()), StructField("dt", DateType()), StructField("amt", IntegerType())])


def table(spark, name, schema, rows):
    spark.createDataFrame(rows, schema).write.format("delta").partitionBy("dt").saveAsTable(name)


def request(tmp_path, target, sql, strategy="recompute", start=D9, end=D9, keys=("id",), **extra):
    (tmp_path / "src.sql").write_text(sql)
    fields = {
        "owner": "ana@example.com", "reason": "TEST-3", "strategy": strategy,
        "target": {"table": target, "partition_column": "dt", "grain": "day"},
        "time_zone": "UTC", "source": {"sql": str(tmp_path / "src.sql")}, "keys": list(keys),
    }
    if start is not None:
        fields["range"] = {"start": start.isoformat(), "end": end.isoformat()}
    fields.update(extra)
    return write_request(tmp_path / "req.yml", **fields)


def run(spark, settings, path):
    plan, state = prepare(spark, settings, path)
    return quiet_runner(spark, settings).run(plan, state)


def test_patch_duplicate_source_keys_are_named_with_counts(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 10), (2, D9, 20)])
    table(spark, f"{db}.s", ID_DT_AMT, [(1, D9, 11), (1, D9, 12), (3, D9, 30)])
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end", "patch")
    with pytest.raises(GateFailedError, match=r"key keys_unique\(id\) failed on the range: duplicate keys \(id\) in .*: \(1\) 2 times$"):
        run(spark, settings, path)
    assert current_version(spark, f"{db}.t") == 0


def test_patch_duplicate_insert_only_keys(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 10)])
    table(spark, f"{db}.s", ID_DT_AMT, [(2, D9, 20), (2, D9, 20), (3, D9, 30)])
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s", "patch")
    with pytest.raises(GateFailedError, match=r": \(2\) 2 times$"):
        run(spark, settings, path)
    assert current_version(spark, f"{db}.t") == 0


def test_patch_null_key_part_matches_null_safely_and_updates_only_changes(spark, settings, db, tmp_path):
    schema = StructType([StructField("k1", IntegerType()), StructField("k2", IntegerType()),
                         StructField("dt", DateType()), StructField("v", IntegerType())])
    table(spark, f"{db}.t", schema, [(1, None, D9, 10), (2, 2, D9, 5), (7, 7, D10, 70)])
    table(spark, f"{db}.s", schema, [(1, None, D9, 20), (2, 2, D9, 5), (3, None, D9, 30)])
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end",
                   "patch", keys=("k1", "k2"))
    first = run(spark, settings, path)
    second = run(spark, settings, path)
    expected = spark.createDataFrame([(1, None, D9, 20), (2, 2, D9, 5), (3, None, D9, 30), (7, 7, D10, 70)], schema)
    assert_df_equality(spark.table(f"{db}.t"), expected, ignore_row_order=True, ignore_nullable=True)
    metrics = spark.sql(f"DESCRIBE HISTORY {db}.t").where(f"version = {first.published_version}").first()["operationMetrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == ("1", "1")  # (2,2) unchanged
    assert second.status == "unchanged"  # the second run finds nothing to change and commits nothing
    assert current_version(spark, f"{db}.t") == first.published_version


def test_patch_delete_missing_removes_only_in_range(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 10), (2, D9, 20), (3, D10, 30)])
    table(spark, f"{db}.s", ID_DT_AMT, [(1, D9, 11)])
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end",
                   "patch", delete_missing=True)
    run(spark, settings, path)
    assert sorted(spark.table(f"{db}.t").collect()) == [(1, D9, 11), (3, D10, 30)]


def _events(spark, db):
    table(spark, f"{db}.events", ID_DT_AMT, [(i, D9, i) for i in (1, 2, 3)] + [(i, D10, i) for i in (4, 5, 6, 7)])


def test_shrinking_partition_is_blocked_then_allowed_explicitly(spark, settings, db, tmp_path):
    _events(spark, db)
    sql = f"SELECT * FROM {db}.events WHERE dt >= :range_start AND dt < :range_end AND id NOT IN (6, 7)"
    path = request(tmp_path, f"{db}.events", sql, start=D10, end=D10)
    with pytest.raises(GateFailedError, match=r"partition 2024-03-10 loses 50% of its rows \(4 -> 2 rows\)"):
        run(spark, settings, path)
    assert current_version(spark, f"{db}.events") == 0
    path = request(tmp_path, f"{db}.events", sql, start=D10, end=D10, gates={"allow_row_loss": True})
    run(spark, settings, path)
    ids = {d: sorted(r.id for r in spark.table(f"{db}.events").where(f"dt = DATE'{d}'").collect()) for d in (D9, D10)}
    assert ids == {D9: [1, 2, 3], D10: [4, 5]}


def test_recompute_one_partition_among_three(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D8, 0), (2, D8, 0)] + [(i, D9, 0) for i in range(3, 6)]
          + [(i, D10, 0) for i in range(6, 10)])
    sql = "SELECT CAST(id AS INT) AS id, DATE'2024-03-10' AS dt, 1 AS amt FROM range(5)"
    # keys (id, dt): ids 0..4 live on other days too, which keys (id) refuses (test_keys_outside_range.py)
    run(spark, settings, request(tmp_path, f"{db}.t", sql, start=D10, end=D10, keys=("id", "dt")))
    counts = {r.dt: r["count"] for r in spark.table(f"{db}.t").groupBy("dt").count().collect()}
    assert counts == {D8: 2, D9: 3, D10: 5}


def test_the_post_publish_check_reads_the_commit_from_the_log_and_falls_back_to_reading_the_data(spark, settings, db, tmp_path):
    # The run's own commit is checked from its write's observation and its log entry: the rows it added and the
    # files it removed per partition. Anything the log cannot prove sends the check to the data, read back.
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D8, 0), (2, D9, 0)])
    sql = "SELECT CAST(id AS INT) AS id, DATE'2024-03-09' AS dt, 7 AS amt FROM range(3)"
    result = run(spark, settings, request(tmp_path, f"{db}.t", sql, keys=("id", "dt"),  # id 1 also lives on 03-08
                                          staging="durable"))  # the staged fingerprints are read back below
    plan, version = result.plan, result.published_version
    staged = staged_fingerprints(spark, plan, plan.predicate())
    rows, checksum = staged["2024-03-09"]
    post = [c for c in result.checks if c.kind == "post_publish"]
    assert [(c.name, c.partition, c.success, c.observed) for c in post] == [
        ("written_rows_and_checksum_equal_staging", None, True, f"3 rows, checksum {checksum} (observed in the write)"),
        ("rows_equal_staging_and_files_replaced", "2024-03-09", True, "3 rows added, 1 files removed (Delta log, version 1)"),
    ]
    assert verify_commit(spark, plan, version, staged, Written(rows, checksum)) == post

    read_back = verify_partitions(spark, plan, version, plan.predicate(), staged)
    assert [(c.name, c.partition, c.success) for c in read_back] == [("rows_and_checksum_equal_staging", "2024-03-09", True)]
    other_rows = Written(rows, checksum + 1)  # the write saw other rows than validation did
    assert verify_commit(spark, plan, version, staged, other_rows) is None
    assert strategy_for(plan.strategy).verify(spark, plan, version, staged, other_rows) == read_back
    other_files = replace(plan, batches=tuple(  # the plan read a file the commit did not remove
        replace(b, partitions=tuple(replace(p, current=replace(p.current, fingerprint="0" * 16)) for p in b.partitions))
        for b in plan.batches))
    assert verify_commit(spark, other_files, version, staged, Written(rows, checksum)) is None

    more = {"2024-03-09": (rows + 1, checksum)}  # staging holds a row the commit did not add
    assert verify_commit(spark, plan, version, more, Written(rows + 1, checksum)) is None
    tampered = strategy_for(plan.strategy).verify(spark, plan, version, more, Written(rows + 1, checksum))
    assert [(c.partition, c.success, c.message.split(" (")[0]) for c in tampered] == [
        ("2024-03-09", False, "published 3 rows")]


def test_schema_guard_names_column_and_types_then_accepts_a_new_column(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 10), (2, D10, 20)])
    bad = "SELECT id, dt, CAST(amt AS STRING) AS amt FROM {t} WHERE dt >= :range_start AND dt < :range_end"
    with pytest.raises(SchemaMismatchError, match=r"column amt is STRING in the source but INT in the target"):
        run(spark, settings, request(tmp_path, f"{db}.t", bad.format(t=f"{db}.t")))
    assert current_version(spark, f"{db}.t") == 0
    new = "SELECT id, dt, amt, 'fixed' AS note FROM {t} WHERE dt >= :range_start AND dt < :range_end"
    run(spark, settings, request(tmp_path, f"{db}.t", new.format(t=f"{db}.t")))
    rows = {r.id: r.note for r in spark.table(f"{db}.t").collect()}
    assert rows == {1: "fixed", 2: None}


def test_rebuild_swaps_atomically_and_readers_see_old_or_new(spark, settings, db, tmp_path, runner):
    table(spark, f"{db}.t", ID_DT_AMT, [(i, D9, i) for i in range(3)])
    sql = "SELECT CAST(id AS INT) AS id, DATE'2024-03-09' + CAST(id % 2 AS INT) AS dt, CAST(id AS STRING) AS label FROM range(7)"
    path = request(tmp_path, f"{db}.t", sql, "rebuild", start=None, schema_changes="allow")  # amt dropped
    plan, state = prepare(spark, settings, path)
    seen, stop = set(), threading.Event()

    def poll():
        while not stop.is_set():
            seen.add(spark.table(f"{db}.t").count())

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        result = runner.run(plan, state)
    finally:
        stop.set()
        reader.join()
    assert seen <= {3, 7} and 3 in seen
    assert spark.table(f"{db}.t").count() == 7
    assert spark.table(f"{db}.t").columns == ["id", "dt", "label"]
    assert result.published_version == 1
    spark.sql(f"RESTORE TABLE {db}.t TO VERSION AS OF 0")  # history kept: the old table comes back
    assert sorted(r.amt for r in spark.table(f"{db}.t").collect()) == [0, 1, 2]


def test_rebuild_failing_validation_changes_nothing(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(i, D9, i) for i in range(3)])
    sql = ("SELECT 1 AS id, DATE'2024-03-09' AS dt, 5 AS amt UNION ALL SELECT 1, DATE'2024-03-09', 6 "
           "UNION ALL SELECT 2, DATE'2024-03-09', 7")
    suite = tmp_path / "suite.json"
    suite.write_text('{"name": "s", "expectations": [{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "id"}}]}')
    path = request(tmp_path, f"{db}.t", sql, "rebuild", start=None, expectations=str(suite))
    with pytest.raises(GateFailedError, match=r"expect_column_values_to_be_unique\(id\) failed on partition 2024-03-09"):
        run(spark, settings, path)
    assert current_version(spark, f"{db}.t") == 0
    assert spark.table(f"{db}.t").count() == 3


def test_plan_cost_equals_describe_detail_and_count(spark, settings, db, tmp_path):
    table(spark, f"{db}.t", ID_DT_AMT, [(i, D8 if i < 4 else D9, i) for i in range(10)])
    spark.createDataFrame([(99, D9, 1)], ID_DT_AMT).write.format("delta").mode("append").saveAsTable(f"{db}.t")
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.t WHERE dt >= :range_start AND dt < :range_end",
                   start=D8, end=D10)
    plan, _ = prepare(spark, settings, path)
    detail = spark.sql(f"DESCRIBE DETAIL {db}.t").first()
    assert plan.total.bytes == detail["sizeInBytes"]
    assert plan.total.files == detail["numFiles"]
    assert plan.total.rows == spark.table(f"{db}.t").count() == 11
    by_key = {p.key: p.current.rows for p in plan.partitions}
    assert by_key == {"2024-03-08": 4, "2024-03-09": 7, "2024-03-10": 0}
    assert plan.source_input.files == detail["numFiles"] and plan.source_input.bytes == detail["sizeInBytes"]
