"""Issue 17 items 4 and 6: declared keys are unique in the staged rows for every strategy; the target's CHECK and
NOT NULL constraints are evaluated on the staged rows during validation. (Item 9, dotted and spaced column names
end to end: tests/e2e/test_column_names.py, with this module's helpers.)"""

import re
from datetime import date

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import (
    _snapshot_metadata,
    current_version,
    latest_snapshot,
    live_constraints,
    read_table_state,
)
from backfill_lib.cli import main
from backfill_lib.core.errors import GateFailedError
from backfill_lib.core.table_state import Constraint, constraints_of
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner, write_request

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
ORDERS = "order_id INT, line INT, dt DATE, v INT"
#: the target: two lines of order 7 on 2024-03-09, order 8 on 2024-03-10
TARGET = [(7, 1, D9, 10), (7, 2, D9, 20), (8, 1, D10, 30)]


def run(spark, settings, path):
    plan, state = prepare(spark, settings, path)
    return quiet_runner(spark, settings).run(plan, state)


def orders(spark, db, source, target_ddl=None):
    """``db.orders`` (TARGET; created by ``target_ddl`` when given) and ``db.orders_src`` (``source``), by dt."""
    if target_ddl:
        spark.sql(target_ddl)
        spark.createDataFrame(TARGET, ORDERS).writeTo(f"{db}.orders").append()
    else:
        spark.createDataFrame(TARGET, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders")
    spark.createDataFrame(source, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders_src")


def request(tmp_path, table, sql, strategy="recompute", keys=("order_id", "line"), partition_column="dt",
            start=D9, end=D9, **extra):
    (tmp_path / "src.sql").write_text(sql)
    fields = {
        "owner": "ana@example.com", "reason": "TEST-17: keys and names", "strategy": strategy,
        "target": {"table": table, "partition_column": partition_column, "grain": "day"},
        "time_zone": "UTC", "source": {"sql": str(tmp_path / "src.sql")}, "keys": list(keys),
    }
    if start is not None:
        fields["range"] = {"start": start.isoformat(), "end": end.isoformat()}
    fields.update(extra)
    return write_request(tmp_path / "req.yml", **fields)


def in_range(db):
    return f"SELECT * FROM {db}.orders_src WHERE dt >= :range_start AND dt < :range_end"


def failure(err, kind):
    [check] = [c for c in err.value.failures if c.kind == kind]
    return check


def test_recompute_with_a_duplicate_key_fails_the_gate_naming_the_key(spark, settings, db, tmp_path, capsys):
    orders(spark, db, [(7, 1, D9, 11), (7, 2, D9, 21), (7, 2, D9, 22), (8, 1, D9, 5)])
    path = request(tmp_path, f"{db}.orders", in_range(db))
    before = current_version(spark, f"{db}.orders")
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, path)
    check = failure(err, "key")
    assert check.name == "keys_unique(order_id, line)"
    assert check.observed == "1 key more than once"
    assert check.message.endswith(": (7, 2) 2 times")
    assert current_version(spark, f"{db}.orders") == before

    assert main(["run", str(path)]) == 3  # through the CLI: exit 3, one line naming the key
    err = capsys.readouterr().err
    # the report of the failed run is named, before the error's line
    assert re.search(rf"^report: {re.escape(str(settings.runs_dir))}/bf_\S+/report\.html$", err, re.M), err
    err_line = err.strip().splitlines()[-1]
    assert "key keys_unique(order_id, line) failed on the range: duplicate keys (order_id, line)" in err_line
    assert err_line.endswith(": (7, 2) 2 times")
    assert current_version(spark, f"{db}.orders") == before


def test_a_key_with_a_null_part_twice_is_a_duplicate(spark, settings, db, tmp_path):
    orders(spark, db, [(7, None, D9, 1), (7, None, D9, 2), (7, 1, D9, 3), (None, None, D9, 4), (None, None, D9, 5),
                       (None, None, D9, 6)])
    before = current_version(spark, f"{db}.orders")
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, request(tmp_path, f"{db}.orders", in_range(db)))
    check = failure(err, "key")
    assert check.observed == "2 keys more than once"
    assert check.message.endswith(": (NULL, NULL) 3 times, (7, NULL) 2 times")  # most frequent first
    assert current_version(spark, f"{db}.orders") == before


def test_more_than_ten_duplicate_keys_lists_ten(spark, settings, db, tmp_path):
    orders(spark, db, [(i, 1, D9, n) for i in range(12) for n in (1, 2)])
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, request(tmp_path, f"{db}.orders", in_range(db)))
    check = failure(err, "key")
    assert check.observed == "more than 10 keys more than once"
    assert check.message.endswith(": " + ", ".join(f"({i}, 1) 2 times" for i in range(10))
                                  + " and more (the first 10 listed)")


def test_rebuild_with_a_duplicate_key_is_refused(spark, settings, db, tmp_path):
    orders(spark, db, [(7, 1, D9, 1), (8, 1, D10, 2), (8, 1, D10, 3)])
    before = current_version(spark, f"{db}.orders")
    path = request(tmp_path, f"{db}.orders", f"SELECT * FROM {db}.orders_src", strategy="rebuild", start=None)
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, path)
    assert failure(err, "key").message.endswith(": (8, 1) 2 times")
    assert current_version(spark, f"{db}.orders") == before
    assert_df_equality(spark.table(f"{db}.orders"), spark.createDataFrame(TARGET, ORDERS), ignore_row_order=True)


def test_patch_duplicate_keys_across_batches_fail_the_gate(spark, settings, db, tmp_path):
    # keys without the partition column: order 7 line 1 in two days (two batches) is one key twice
    orders(spark, db, [(7, 1, D9, 1), (7, 1, D10, 2)])
    path = request(tmp_path, f"{db}.orders", in_range(db), strategy="patch", end=D10, batch_size=1)
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, path)
    assert failure(err, "key").message.endswith(": (7, 1) 2 times")
    assert current_version(spark, f"{db}.orders") == 0


def test_the_target_constraints_are_read_with_its_state(spark, db):
    spark.sql(f"CREATE TABLE {db}.orders (order_id INT NOT NULL, line INT, dt DATE, v INT NOT NULL) USING delta "
              "PARTITIONED BY (dt)")
    spark.sql(f"ALTER TABLE {db}.orders ADD CONSTRAINT positive CHECK (v >= 0)")
    spark.sql(f"ALTER TABLE {db}.orders ADD CONSTRAINT a_line CHECK (line IS NULL OR line > 0)")
    state = read_table_state(spark, f"{db}.orders")
    assert state.constraints == (Constraint("a_line", "line IS NULL OR line > 0"), Constraint("positive", "v >= 0"),
                                 Constraint("order_id", column="order_id"), Constraint("v", column="v"))
    assert [c.label for c in state.constraints] == ["a_line: CHECK (line IS NULL OR line > 0)",
                                                    "positive: CHECK (v >= 0)", "NOT NULL order_id", "NOT NULL v"]
    assert state.column_mapping == "none"
    # validation reads them from the latest snapshot's metadata (the Delta log), the same ones
    assert constraints_of(*_snapshot_metadata(latest_snapshot(spark, f"{db}.orders"))) == state.constraints
    assert live_constraints(spark, f"{db}.orders") == state.constraints


def test_a_check_constraint_violated_fails_the_gate_naming_it(spark, settings, db, tmp_path, capsys):
    # Delta refuses a row whose CHECK is NULL as well as false: v = NULL violates CHECK (v >= 0)
    orders(spark, db, [(7, 1, D9, -1), (7, 2, D9, None), (7, 3, D9, 0)])
    spark.sql(f"ALTER TABLE {db}.orders ADD CONSTRAINT non_negative CHECK (v >= 0)")
    before = current_version(spark, f"{db}.orders")
    path = request(tmp_path, f"{db}.orders", in_range(db))
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, path)
    [check] = [c for c in err.value.failures if c.kind == "constraint"]
    assert check.name == "non_negative: CHECK (v >= 0)"
    assert check.observed == "2 rows"
    assert check.message.endswith("violate it (Delta would refuse them at publish), in partition 2024-03-09 (2 rows)")
    assert current_version(spark, f"{db}.orders") == before

    assert main(["run", str(path)]) == 3
    err_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "constraint non_negative: CHECK (v >= 0) failed on the range: 2 staged rows of" in err_line
    run_id = (spark.table(f"{settings.ledger_schema}.runs").where(f"target_table = '{db}.orders'")
              .orderBy("seq").collect()[-1]["run_id"])
    assert Ledger(spark, settings.ledger_schema).run(run_id)["status"] == "failed"  # not left "publishing"
    assert current_version(spark, f"{db}.orders") == before


def test_a_not_null_column_violated_fails_the_gate(spark, settings, db, tmp_path):
    # (a nullable source key for a NOT NULL key column is refused at intake already, by the schema guard)
    orders(spark, db, [(7, 1, D9, None), (7, 2, D9, 2), (7, None, D9, 3)],
           target_ddl=f"CREATE TABLE {db}.orders (order_id INT, line INT NOT NULL, dt DATE, v INT NOT NULL) "
                      "USING delta PARTITIONED BY (dt)")
    before = current_version(spark, f"{db}.orders")
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, request(tmp_path, f"{db}.orders", in_range(db), keys=("order_id",)))
    failed = {c.name: c for c in err.value.failures if c.kind == "constraint"}
    assert sorted(failed) == ["NOT NULL line", "NOT NULL v"]
    assert failed["NOT NULL v"].observed == "1 row"
    assert failed["NOT NULL v"].message.endswith("violates it (Delta would refuse it at publish), in partition "
                                                 "2024-03-09 (1 row)")
    assert current_version(spark, f"{db}.orders") == before


def test_rebuild_keeps_check_constraints_and_not_null_keys(spark, settings, db, tmp_path):
    orders(spark, db, [(7, 1, D9, -5), (8, None, D10, None), (None, 1, D10, 1)],
           target_ddl=f"CREATE TABLE {db}.orders (order_id INT NOT NULL, line INT, dt DATE, v INT NOT NULL) "
                      "USING delta PARTITIONED BY (dt)")
    spark.sql(f"ALTER TABLE {db}.orders ADD CONSTRAINT non_negative CHECK (v >= 0)")
    before = current_version(spark, f"{db}.orders")
    path = request(tmp_path, f"{db}.orders", f"SELECT * FROM {db}.orders_src", strategy="rebuild", start=None)
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, path)
    failed = {c.name: c.observed for c in err.value.failures if c.kind == "constraint"}
    # the rebuilt table keeps the CHECK (its properties) and the key's NOT NULL; v's NOT NULL is the new schema's
    assert failed == {"non_negative: CHECK (v >= 0)": "2 rows", "NOT NULL order_id": "1 row"}
    assert current_version(spark, f"{db}.orders") == before


def test_constraints_that_hold_pass_and_publish(spark, settings, db, tmp_path):
    # order 9, not 8: the target holds order 8 on 2024-03-10, outside the range (a refusal, test_keys_outside_range)
    orders(spark, db, [(7, 1, D9, 1), (9, 2, D9, 2)],
           target_ddl=f"CREATE TABLE {db}.orders (order_id INT, line INT NOT NULL, dt DATE, v INT NOT NULL) "
                      "USING delta PARTITIONED BY (dt)")
    spark.sql(f"ALTER TABLE {db}.orders ADD CONSTRAINT non_negative CHECK (v >= 0)")
    before = current_version(spark, f"{db}.orders")
    result = run(spark, settings, request(tmp_path, f"{db}.orders", in_range(db), keys=("order_id",)))
    assert result.status == "published" and result.published_version == before + 1
    checks = [(c.kind, c.name, c.success, c.observed) for c in result.checks if c.kind in ("key", "constraint")]
    assert checks == [("key", "keys_unique(order_id)", True, "every key once"),
                      ("constraint", "non_negative: CHECK (v >= 0)", True, "0 rows"),
                      ("constraint", "NOT NULL line", True, "0 rows"),
                      ("constraint", "NOT NULL v", True, "0 rows")]


def test_duplicate_keys_of_a_key_named_like_the_count(spark):
    """The count of each key is the audit's own column: a key column may be called ``_n``."""
    from backfill_lib.validate.key_audit import duplicate_keys

    df = spark.createDataFrame([(1, "a"), (1, "b"), (2, "c"), (None, "d"), (None, "e"), (None, "f")],
                               "_n INT, v STRING")

    assert duplicate_keys(df, ["_n"]) == [((None,), 3), ((1,), 2)]
