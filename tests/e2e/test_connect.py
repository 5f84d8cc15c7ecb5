"""Issue 21 item 2: every path the CLI takes runs on a Spark Connect session.

The Connect server runs inside this worker's own JVM (``SparkConnectService`` on the classic test session's
SparkContext, about 1 s to start): its sessions share the classic session's catalog, warehouse and Delta
extension, so no second JVM is started. While a test runs, ``SPARK_CONNECT_MODE_ENABLED`` is set, as
``SparkSession.builder.remote`` sets it in a Connect-only process: pyspark's functions then build Connect
columns and ``SparkSession.getActiveSession`` (what the CLI reuses) is the Connect session. The classic
``spark`` fixture sets up and reads tables only where a test says so."""

from __future__ import annotations

import json
import socket
from datetime import date

import pytest
from chispa import assert_df_equality

from backfill_lib.cli import main
from tests.conftest import write_request

pytestmark = pytest.mark.connect

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
ORDERS = "order_id INT, dt DATE, v INT"
TARGET = [(7, D8, 1), (8, D9, 2), (9, D9, 3), (10, D10, 4)]


@pytest.fixture(scope="session")
def connect_url(spark):
    """``sc://localhost:PORT`` of a Spark Connect server in this worker's JVM (started once per worker)."""
    jvm = spark.sparkContext._jvm
    service = jvm.org.apache.spark.sql.connect.service.SparkConnectService
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the server reads its port from the context's conf when it starts
    jvm.org.apache.spark.SparkEnv.get().conf().set("spark.connect.grpc.binding.port", str(port))
    service.start(spark.sparkContext._jsc.sc())
    clients = []
    yield f"sc://localhost:{port}", clients
    for client in clients:  # released while the server runs: a client left open retries a stopped server at exit
        client.stop()
    service.stop(jvm.scala.Option.empty(), jvm.scala.Option.empty())


@pytest.fixture
def cspark(connect_url, monkeypatch):
    """A Spark Connect session (pyspark's Connect client) on :func:`connect_url`, in Connect mode for one test."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    url, clients = connect_url
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    session = RemoteSparkSession.builder.remote(url).getOrCreate()
    if session not in clients:
        clients.append(session)
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session


def orders(cspark, db, source):
    cspark.createDataFrame(TARGET, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders")
    cspark.createDataFrame(source, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.src")


def request(tmp_path, db, strategy="recompute", **extra):
    sql = tmp_path / "src.sql"
    sql.write_text(f"SELECT * FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    fields = {"owner": "ana@example.com", "reason": "TEST-21: Spark Connect", "strategy": strategy,
              "target": {"table": f"{db}.orders", "partition_column": "dt", "grain": "day"},
              "range": {"start": D9.isoformat(), "end": D9.isoformat()}, "time_zone": "UTC",
              "source": {"sql": str(sql)}, "keys": ["order_id"], **extra}
    return str(write_request(tmp_path / "req.yml", **fields))


def version(cspark, table) -> int:
    return cspark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["version"]


def test_recompute_then_rollback_through_the_cli(cspark, db, tmp_path):
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    assert RemoteSparkSession.getActiveSession() is cspark
    orders(cspark, db, [(8, D9, 20), (11, D9, 30), (10, D10, 99)])
    before = version(cspark, f"{db}.orders")
    path = request(tmp_path, db, gates={"allow_row_growth": True})

    assert main(["plan", path]) == 0
    assert main(["run", path, "--run-id", "c_recompute_1"]) == 0

    assert version(cspark, f"{db}.orders") == before + 1
    expected = cspark.createDataFrame([(7, D8, 1), (8, D9, 20), (11, D9, 30), (10, D10, 4)], ORDERS)
    assert_df_equality(cspark.table(f"{db}.orders"), expected, ignore_row_order=True)
    assert main(["status", "c_recompute_1"]) == 0
    assert main(["history", f"{db}.orders"]) == 0

    assert main(["rollback", "c_recompute_1", "--by", "ana", "--reason", "test"]) == 0
    assert version(cspark, f"{db}.orders") == before + 2
    assert sorted(cspark.table(f"{db}.orders").collect()) == sorted(
        cspark.createDataFrame(TARGET, ORDERS).collect())


def test_patch_then_resume_of_a_validated_run(cspark, db, tmp_path):
    orders(cspark, db, [(8, D9, 20), (12, D9, 5)])
    before = version(cspark, f"{db}.orders")
    path = request(tmp_path, db, strategy="patch")

    assert main(["run", path, "--run-id", "c_patch_1", "--until", "validate"]) == 0
    assert version(cspark, f"{db}.orders") == before  # validated, not published
    assert main(["resume", "c_patch_1"]) == 0

    assert version(cspark, f"{db}.orders") == before + 1
    history = cspark.sql(f"DESCRIBE HISTORY {db}.orders LIMIT 1").first()
    assert history["operation"] == "MERGE" and json.loads(history["userMetadata"])["run_id"] == "c_patch_1"
    # 8 corrected, 12 inserted, 9 (not in the patch) kept
    expected = [(7, D8, 1), (8, D9, 20), (9, D9, 3), (10, D10, 4), (12, D9, 5)]
    assert sorted(tuple(r) for r in cspark.table(f"{db}.orders").collect()) == expected


def test_rebuild_replaces_the_whole_table(cspark, db, tmp_path):
    orders(cspark, db, [(1, D8, 100), (2, D10, 200)])
    (tmp_path / "all.sql").write_text(f"SELECT * FROM {db}.src")
    fields = {"owner": "ana@example.com", "reason": "TEST-21: Spark Connect rebuild", "strategy": "rebuild",
              "target": {"table": f"{db}.orders", "partition_column": "dt", "grain": "day"}, "time_zone": "UTC",
              "source": {"sql": str(tmp_path / "all.sql")}, "keys": ["order_id"],
              "gates": {"allow_row_growth": True, "allow_row_loss": True}}
    path = str(write_request(tmp_path / "rebuild.yml", **fields))
    before = version(cspark, f"{db}.orders")

    assert main(["run", path]) == 0

    assert version(cspark, f"{db}.orders") == before + 1
    assert_df_equality(cspark.table(f"{db}.orders"), cspark.table(f"{db}.src"), ignore_row_order=True)


def test_a_failing_expectation_on_a_connect_dataframe_blocks_the_publish(cspark, db, tmp_path):
    orders(cspark, db, [(8, D9, 20), (9, D9, 999)])
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "connect_suite", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "v", "min_value": 0, "max_value": 100}}]}))
    before = version(cspark, f"{db}.orders")

    assert main(["run", request(tmp_path, db, expectations=str(suite))]) == 3

    assert version(cspark, f"{db}.orders") == before
    assert sorted(tuple(r) for r in cspark.table(f"{db}.orders").collect()) == TARGET


def test_what_needs_the_driver_jvm_is_refused_before_anything_is_written(cspark, db, tmp_path, capsys):
    orders(cspark, db, [(8, D9, 20)])
    before = version(cspark, f"{db}.orders")
    path = request(tmp_path, db)
    text = (tmp_path / "req.yml").read_text().replace("grain: day", "grain: day\n  where: v > 0")
    (tmp_path / "req.yml").write_text(text)

    assert main(["run", path]) == 2
    assert "checking a where needs a session with a driver JVM (not Spark Connect)" in capsys.readouterr().err
    assert version(cspark, f"{db}.orders") == before

    # the reflect check reads the analysed plan's text where there is no JVM plan
    path = request(tmp_path, db)
    (tmp_path / "src.sql").write_text(f"SELECT order_id, dt, length(reflect('java.util.UUID', 'randomUUID')) AS v "
                                      f"FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    assert main(["run", path]) == 2
    assert "uses reflect / java_method / try_reflect (they call JVM methods)" in capsys.readouterr().err
    assert version(cspark, f"{db}.orders") == before


def test_range_parameters_are_bound_as_literals_outside_strings_and_comments():
    from backfill_lib.intake.sql_text import bind_named_parameters
    from backfill_lib.plan.source_query import sql_literal

    text = "SELECT ':range_start', `:range_end`, x::date FROM t -- :range_end\nWHERE d >= :range_start AND d < :range_end"
    bound = bind_named_parameters(text, {"range_start": sql_literal(D9), "range_end": sql_literal(D10)})
    assert bound == ("SELECT ':range_start', `:range_end`, x::date FROM t -- :range_end\n"
                     "WHERE d >= DATE'2024-03-09' AND d < DATE'2024-03-10'")


def test_file_listing_keys_partition_values_by_names_that_need_quoting_or_clash(cspark, db):
    """A partition column named like the listing's own columns (``path``, ``size``) or holding a back-quote
    lists its files like any other (``add_files`` of the Connect log reader, which plan statistics read)."""
    from backfill_lib.adapters.connect_log import connect_snapshot

    cspark.sql(f"CREATE TABLE {db}.odd (id INT, path STRING, `a``b` STRING, size INT) USING delta "
               f"PARTITIONED BY (path, `a``b`, size)")
    cspark.sql(f"INSERT INTO {db}.odd VALUES (1, 'p', 'x', 5), (2, 'p', 'x', 5), (3, 'q', NULL, 6)")

    files = connect_snapshot(cspark, f"{db}.odd").add_files()

    rows: dict = {}  # per partition: its values and the rows of its files (an INSERT may write a file per row)
    for r in files.collect():
        assert r["size"] > 0 and r["path"].endswith(".parquet") and not r["path"].startswith("/")
        values = dict(r["partitionValues"])
        rows[values["path"]] = (values, rows.get(values["path"], (None, 0))[1] + json.loads(r["stats"])["numRecords"])
    assert rows == {"p": ({"path": "p", "a`b": "x", "size": "5"}, 2), "q": ({"path": "q", "a`b": None, "size": "6"}, 1)}


def test_file_listing_of_a_table_with_a_data_column_named_metadata(cspark, db):
    """A bronze table that kept the ``_metadata`` column of its ingestion (an Auto Loader habit) hides Spark's
    file metadata column of that name; the Connect log reader must still list its files."""
    from backfill_lib.adapters.connect_log import connect_snapshot

    cspark.sql(f"CREATE TABLE {db}.bronze (id INT, dt DATE, _metadata STRUCT<file_path: STRING>) USING delta "
               f"PARTITIONED BY (dt)")
    cspark.sql(f"INSERT INTO {db}.bronze VALUES (1, DATE'2024-03-09', named_struct('file_path', 'landing/a.json'))")

    [row] = connect_snapshot(cspark, f"{db}.bronze").add_files().collect()

    assert dict(row["partitionValues"]) == {"dt": "2024-03-09"}
    assert json.loads(row["stats"])["numRecords"] == 1
    assert row["path"].startswith("dt=2024-03-09/") and row["path"].endswith(".parquet")


def test_a_connect_session_gets_the_connect_reader_once(cspark, spark, db):
    """Issue 45 item 5: the reader is chosen once per session, the Connect one on a Connect session (its
    snapshots are read by it too), the classic one on the classic session beside it."""
    from backfill_lib.adapters.connect_log import ConnectSnapshot
    from backfill_lib.adapters.log_reader import ClassicLogReader, ConnectLogReader, log_reader, snapshot_reader

    reader = log_reader(cspark)
    assert type(reader) is ConnectLogReader and log_reader(cspark) is reader and reader.spark is cspark
    assert not reader.pins_session and not reader.named_parameters and not reader.delta_table_api
    assert type(log_reader(spark)) is ClassicLogReader and log_reader(spark) is not reader

    cspark.sql(f"CREATE TABLE {db}.chosen (id INT) USING delta")
    snapshot = reader.latest_snapshot(f"{db}.chosen")
    assert isinstance(snapshot, ConnectSnapshot) and snapshot_reader(snapshot) is reader
