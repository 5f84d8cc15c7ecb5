"""Issue 45 item 5: classic or Connect is chosen once per session, when its table-state reader is made.

The Connect side (a Connect session gets the Connect reader, once) is tested on a real Connect server in
tests/e2e/test_connect.py."""

from backfill_lib.adapters.log_reader import ClassicLogReader, ConnectLogReader, log_reader, snapshot_reader


def test_a_classic_session_gets_the_classic_reader_once(spark):
    reader = log_reader(spark)

    assert type(reader) is ClassicLogReader and not isinstance(reader, ConnectLogReader)
    assert log_reader(spark) is reader
    assert reader.spark is spark
    assert reader.pins_session and reader.named_parameters and reader.delta_table_api


def test_a_classic_snapshot_is_read_by_the_classic_reader(spark, db):
    spark.sql(f"CREATE TABLE {db}.chosen (id INT, d STRING) USING delta PARTITIONED BY (d)")
    spark.sql(f"INSERT INTO {db}.chosen VALUES (1, 'a')")
    snapshot = log_reader(spark).latest_snapshot(f"{db}.chosen")

    assert isinstance(snapshot_reader(snapshot), ClassicLogReader)
    assert log_reader(spark).current_version(f"{db}.chosen") == int(snapshot.version()) == 1
    assert snapshot_reader(snapshot).partition_value_key(snapshot, "d") == "d"
