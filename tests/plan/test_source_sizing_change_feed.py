"""Source sizing of a read of a Delta table's Change Data Feed (``table_changes(...)``): Spark plans it as a
``DeltaCDFRelation``, no file scan ``DataFrame.inputFiles()`` lists, so it was sized as 0 files and 0 bytes (alone)
or as the other tables' files only (in a join). It must count at least the files Spark reads: here exactly the
files Spark's own scans of the query read (its ``FileScanRDD`` partitions), and where the sizing cannot be had,
an unknown size, never 0."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from rich.console import Console

from backfill_lib.adapters import kernel_scan
from backfill_lib.adapters.change_feed_files import commit_files
from backfill_lib.adapters.kernel_scan import kernel_input_files
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import SourceInput
from backfill_lib.plan.source_query import source_input
from tests.plan.test_plan import plan_for, state

SCHEMA = "id INT, v INT"


def _spark_reads(spark, query: str) -> tuple[int, int]:
    """Files and bytes Spark's own scans of ``query`` read: the files of every ``FileScanRDD`` in its RDD's
    lineage (the change feed's scans are built by Delta inside the relation's RDD), each file once. Joins are
    planned without broadcasts, whose side would be another RDD's lineage."""
    thresholds = ("spark.sql.autoBroadcastJoinThreshold", "spark.sql.adaptive.autoBroadcastJoinThreshold")
    previous = {key: spark.conf.get(key, None) for key in thresholds}
    for key in thresholds:
        spark.conf.set(key, "-1")
    try:
        rdd = spark.sql(query)._jdf.queryExecution().toRdd()
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    found, stack, seen = {}, [rdd], set()
    while stack:
        rdd = stack.pop()
        if rdd.id() in seen:
            continue
        seen.add(rdd.id())
        if rdd.getClass().getSimpleName() == "FileScanRDD":
            partitions = rdd.filePartitions().iterator()
            while partitions.hasNext():
                for f in partitions.next().files():
                    found[f.filePath().toString()] = f.fileSize()
        dependencies = rdd.dependencies().iterator()
        while dependencies.hasNext():
            stack.append(dependencies.next().rdd())
    return len(found), sum(found.values())


def _sized(spark, query: str) -> tuple[int | None, int | None]:
    found = source_input(spark, spark.sql(query))
    return found.files, found.bytes


def _log_actions(spark, name: str) -> dict[int, list[str]]:
    """Each commit's file actions of ``name`` (``add``, ``remove``, ``cdc``), from its ``_delta_log`` JSON."""
    location = Path(spark.sql(f"DESCRIBE DETAIL {name}").first()["location"].removeprefix("file:"))
    return {int(commit.stem): sorted(next(iter(a)) for a in map(json.loads, commit.read_text().splitlines())
                                     if next(iter(a)) in ("add", "remove", "cdc"))
            for commit in sorted(location.glob("_delta_log/*.json"))}


@pytest.fixture
def changes(spark, db):
    """A table with the Change Data Feed on: two appends (2 files, then 1), an UPDATE (a change file), a DELETE of
    every row (removes only: Delta reads the removed files as the deleted rows)."""
    name = f"{db}.changes"
    spark.sql(f"CREATE TABLE {name} (id INT, v INT) USING delta "
              "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")  # version 0
    spark.createDataFrame([(1, 10), (2, 20)], SCHEMA).repartition(2, "id").writeTo(name).append()  # 1
    spark.createDataFrame([(3, 30)], SCHEMA).coalesce(1).writeTo(name).append()  # 2
    spark.sql(f"UPDATE {name} SET v = 11 WHERE id = 1")  # 3
    spark.sql(f"DELETE FROM {name}")  # 4
    assert _log_actions(spark, name) == {0: [], 1: ["add", "add"], 2: ["add"], 3: ["add", "cdc", "remove"],
                                         4: ["remove", "remove", "remove"]}
    return name


@pytest.fixture
def plain(spark, db):
    name = f"{db}.plain"
    spark.createDataFrame([(1, 1), (2, 2)], SCHEMA).repartition(2, "id").write.format("delta").saveAsTable(name)
    return name


def test_a_change_feed_read_is_sized_by_the_files_of_its_commits(spark, changes):
    cases = {
        # versions 1 and 2: their 3 added files; version 3: its change file only
        f"SELECT * FROM table_changes('{changes}', 1, 3)": 4,
        # version 2's file; version 3's change file; version 4 removes 3 files (2's again, 1's untouched one, 3's
        # rewritten one), each file counted once, as inputFiles() counts them
        f"SELECT * FROM table_changes('{changes}', 2)": 4,
        f"SELECT id FROM table_changes('{changes}', 3, 3) WHERE _change_type = 'update_postimage'": 1,
    }
    found = {query: _sized(spark, query) for query in cases}
    assert found == {query: _spark_reads(spark, query) for query in cases}
    assert {query: files for query, (files, _) in found.items()} == cases


def test_a_join_of_a_table_with_a_change_feed_counts_both(spark, changes, plain):
    query = f"SELECT p.id, c.v FROM {plain} p JOIN table_changes('{changes}', 1, 3) c ON p.id = c.id"
    plain_only = _sized(spark, f"SELECT * FROM {plain}")
    assert plain_only[0] == 2
    assert _sized(spark, query) == _spark_reads(spark, query)
    assert _sized(spark, query)[0] == 2 + 4
    assert kernel_input_files(spark, spark.sql(query)) == _spark_reads(spark, query)  # Kernel's path, no Spark job


def test_a_view_reading_the_change_feed_is_sized_too(spark, changes):
    spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 3) \
        .option("endingVersion", 4).table(changes).createOrReplaceTempView("probe_change_rows")
    try:
        query = "SELECT * FROM probe_change_rows"
        # version 3's change file, version 4's 3 removed files
        assert _sized(spark, query) == _spark_reads(spark, query)
        assert _sized(spark, query)[0] == 4
    finally:
        spark.catalog.dropTempView("probe_change_rows")


def test_without_kernel_a_change_feed_read_has_an_unknown_size_never_zero(spark, changes, plain):
    query = f"SELECT p.id, c.v FROM {plain} p JOIN table_changes('{changes}', 1, 3) c ON p.id = c.id"
    with pytest.MonkeyPatch.context() as m:  # Kernel refusing (Spark Connect, a table above its file limit)
        m.setattr(kernel_scan, "kernel_input_files", lambda spark, df: None)
        found = source_input(spark, spark.sql(query))
    assert found == SourceInput(None, None, "the query reads DeltaCDFRelation, whose files Spark does not list")


def test_a_source_over_an_rdd_has_an_unknown_size_never_zero(spark):
    spark.sparkContext.parallelize([(1, 10)]).toDF(["id", "v"]).createOrReplaceTempView("probe_rdd_rows")
    try:
        found = source_input(spark, spark.sql("SELECT * FROM probe_rdd_rows"))
    finally:
        spark.catalog.dropTempView("probe_rdd_rows")
    assert found == SourceInput(None, None, "the query reads LogicalRDD, whose files Spark does not list")


def test_the_dry_run_says_why_the_source_size_is_unknown():
    unknown = SourceInput(None, None, "the query reads DeltaCDFRelation, whose files Spark does not list")
    console = Console(record=True, width=300, file=open("/dev/null", "w"))
    console.print(explain(dataclasses.replace(plan_for(state()), source_input=unknown)))
    line = next(line for line in console.export_text().splitlines() if line.startswith("source input"))
    assert line.split(None, 2)[2].rstrip() == (
        "unknown: the query reads DeltaCDFRelation, whose files Spark does not list (not 0 files: batches "
        "without a batch_size are sized by the target's bytes in range)")


def test_the_dry_run_does_not_say_no_table_is_named_when_only_a_change_feed_is_read():
    # table_changes('src.events', 1, 4) pins nothing (its range is fixed): "no Delta table named" was false
    console = Console(record=True, width=300, file=open("/dev/null", "w"))
    console.print(explain(dataclasses.replace(plan_for(state()), source_versions=())))
    line = next(line for line in console.export_text().splitlines() if line.startswith("source versions"))
    assert line.split(None, 2)[2].rstrip() == (
        "none (the query names no Delta table outside table_changes, whose version range the query fixes)")


def test_a_commits_change_files_stand_for_its_other_files():
    add = '{"add": {"path": "a", "size": 5, "dataChange": true}}'
    compaction = '{"add": {"path": "b", "size": 7, "dataChange": false}}'
    assert commit_files("\n".join([add, '{"cdc": {"path": "c", "size": 2}}', '{"commitInfo": {}}'])) == {"c": 2}
    assert commit_files("\n".join([add, compaction, '{"remove": {"path": "r", "size": 3}}'])) == {"a": 5, "r": 3}
    # a deletion vector's remove and add of one file: read once
    assert commit_files('{"remove": {"path": "a", "size": 5, "dataChange": true}}\n' + add) == {"a": 5}
    assert commit_files('{"remove": {"path": "r", "dataChange": true}}') is None  # no size: unknown, not 0


def _cdf_request(tmp_path, db, sql: str):
    from backfill_lib.intake.request import load_request
    from tests.conftest import write_request

    (tmp_path / "changes.sql").write_text(sql)
    return load_request(write_request(
        tmp_path / "r.yml", owner="ana@example.com", reason="CDF: latest change per key",
        target={"table": f"{db}.t", "partition_column": "dt", "grain": "day"},
        range={"start": "2024-03-09", "end": "2024-03-09"}, time_zone="UTC", strategy="recompute",
        source={"sql": str(tmp_path / "changes.sql")}, keys=["id"]))


def test_a_change_feed_read_up_to_the_latest_version_is_refused_it_cannot_be_pinned(spark, db, changes, tmp_path):
    """``table_changes(t, 1)`` reads up to the latest version when it is analysed: a commit while the run stages
    or waits to publish would change its rows, the ``VERSION AS OF`` pinning does not reach a table named in a
    string, and nothing reported the change (an e2e run published the rows of version 5 after a commit of
    version 6, all checks passed). An ending version at most the latest is a fixed read and runs."""
    from backfill_lib.core.errors import IntakeError
    from backfill_lib.plan.source_query import source_frame

    for sql in (f"SELECT id, v FROM table_changes('{changes}', 1)",
                f"SELECT id, v FROM table_changes('{changes}', 1, 9)"):  # past the latest version 4
        request = _cdf_request(tmp_path, db, sql)
        with pytest.raises(IntakeError) as err:
            source_frame(spark, request, None, None)
        assert str(err.value) == (
            f"{tmp_path / 'changes.sql'}: reads the Change Data Feed of spark_catalog.{changes} up to its latest "
            "version, 4 (no ending version, or a later one): a commit during the run would change what it reads "
            f"and the run cannot pin it; give an ending version of at most 4, e.g. table_changes('{changes}', 1, 4)")
    request = _cdf_request(tmp_path, db, f"SELECT id, v FROM table_changes('{changes}', 3, 4) "
                                         "WHERE _change_type = 'update_postimage'")
    assert [tuple(r) for r in source_frame(spark, request, None, None).collect()] == [(1, 11)]
