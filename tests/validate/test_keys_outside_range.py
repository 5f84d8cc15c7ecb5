"""Issue 43 item 1: a staged key the target also holds outside the run's range (the event date was wrong, the
corrected row moves into the range) is refused before publishing, exit 2, naming the keys and their partitions;
publishing writes only the range, so it would leave the key twice."""

from datetime import date
from decimal import Decimal

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.cli import main
from backfill_lib.core.errors import KeysOutsideRangeError
from backfill_lib.core.partition_keys import keys_of
from backfill_lib.runner import prepare
from backfill_lib.validate import key_audit
from tests.conftest import quiet_runner, write_request

M20, M21, J1, J2, J3, J5 = (date(2024, 5, 20), date(2024, 5, 21), date(2024, 6, 1), date(2024, 6, 2),
                            date(2024, 6, 3), date(2024, 6, 5))
ORDERS = "order_id INT, dt DATE, v INT"


def run(spark, settings, path):
    plan, state = prepare(spark, settings, path)
    return quiet_runner(spark, settings).run(plan, state)


def orders(spark, db, target, source):
    """``db.orders`` (``target``) and ``db.orders_src`` (``source``), both partitioned by dt."""
    spark.createDataFrame(target, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders")
    spark.createDataFrame(source, ORDERS).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders_src")


def request(tmp_path, db, strategy, keys=("order_id",), **extra):
    (tmp_path / "src.sql").write_text(
        f"SELECT * FROM {db}.orders_src WHERE dt >= :range_start AND dt < :range_end")
    return write_request(
        tmp_path / "req.yml", owner="ana@example.com", reason="TEST-43: a key crosses the range edge",
        strategy=strategy, target={"table": f"{db}.orders", "partition_column": "dt", "grain": "day"},
        range={"start": J1.isoformat(), "end": J3.isoformat()}, time_zone="UTC",
        source={"sql": str(tmp_path / "src.sql")}, keys=list(keys), **extra)


def test_patch_moving_a_key_into_the_range_from_outside_is_refused_naming_it(spark, settings, db, tmp_path, capsys):
    # order 77 was filed on 2024-05-20; its corrected row falls on 2024-06-02, inside the range
    orders(spark, db, [(77, M20, 1), (78, J1, 2)], [(77, J2, 10), (78, J1, 20)])
    path = request(tmp_path, db, "patch")
    before = current_version(spark, f"{db}.orders")
    message = (f"{db}.orders: 1 staged key (order_id) lives in the target outside the run's range "
               "[2024-06-01, 2024-06-04) too: order_id=77 in partition 2024-05-20; publishing writes only the range "
               "and would leave a second row for each, so nothing was published (widen the range to those "
               "partitions, or remove the old rows first)")
    with pytest.raises(KeysOutsideRangeError) as err:
        run(spark, settings, path)
    assert str(err.value) == message
    assert current_version(spark, f"{db}.orders") == before

    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)
    assert current_version(spark, f"{db}.orders") == before
    assert_df_equality(spark.table(f"{db}.orders"), spark.createDataFrame([(77, M20, 1), (78, J1, 2)], ORDERS),
                       ignore_row_order=True)


def test_recompute_names_five_keys_their_partitions_and_the_count(spark, settings, db, tmp_path):
    # keys 71..77 live after the range (77 in two partitions); the recompute stages all of them on 2024-06-01
    outside = [(k, J5, 0) for k in range(71, 78)] + [(77, M21, 0)]
    orders(spark, db, outside + [(80, J1, 0)], [(k, J1, 1) for k in (*range(71, 78), 80)])
    before = current_version(spark, f"{db}.orders")
    with pytest.raises(KeysOutsideRangeError) as err:
        run(spark, settings, request(tmp_path, db, "recompute"))
    assert str(err.value).startswith(
        f"{db}.orders: 7 staged keys (order_id) live in the target outside the run's range [2024-06-01, 2024-06-04) "
        "too: order_id=71 in partition 2024-06-05; order_id=72 in partition 2024-06-05; order_id=73 in partition "
        "2024-06-05; order_id=74 in partition 2024-06-05; order_id=75 in partition 2024-06-05; and 2 more; ")
    assert current_version(spark, f"{db}.orders") == before


def test_recompute_names_every_partition_outside_where_a_key_lives(spark, settings, db, tmp_path):
    orders(spark, db, [(77, M20, 0), (77, M21, 0), (77, J5, 0)], [(77, J2, 1)])
    with pytest.raises(KeysOutsideRangeError) as err:
        run(spark, settings, request(tmp_path, db, "recompute"))
    assert ": order_id=77 in partitions 2024-05-20, 2024-05-21, 2024-06-05; publishing" in str(err.value)
    assert current_version(spark, f"{db}.orders") == 0


def test_keys_that_hold_the_partition_column_are_distinct_outside_the_range(spark, settings, db, tmp_path):
    # (order_id, dt): order 77 on 2024-05-20 is another key than order 77 on 2024-06-02; both rows stay
    orders(spark, db, [(77, M20, 1), (78, J1, 2)], [(77, J2, 10), (78, J1, 20)])
    result = run(spark, settings, request(tmp_path, db, "recompute", keys=("order_id", "dt")))
    assert result.status == "published"
    assert current_version(spark, f"{db}.orders") == 1
    assert_df_equality(spark.table(f"{db}.orders"),
                       spark.createDataFrame([(77, M20, 1), (77, J2, 10), (78, J1, 20)], ORDERS), ignore_row_order=True)


@pytest.mark.parametrize("strategy", ["patch", "recompute"])
def test_a_key_moved_within_the_range_publishes_once(spark, settings, db, tmp_path, strategy):
    # order 77 moves from 2024-06-01 to 2024-06-02, both inside the range; order 90 lives outside, not staged
    orders(spark, db, [(77, J1, 1), (90, M20, 9)], [(77, J2, 10)])
    # 2024-06-01 empties: a recompute's row-count gate would stop it
    result = run(spark, settings, request(tmp_path, db, strategy, gates={"allow_row_loss": True}))
    assert result.status == "published"
    assert current_version(spark, f"{db}.orders") == 1
    assert_df_equality(spark.table(f"{db}.orders"), spark.createDataFrame([(77, J2, 10), (90, M20, 9)], ORDERS),
                       ignore_row_order=True)


def test_a_key_rewritten_in_place_is_not_looked_for_outside(spark, settings, db, tmp_path):
    # The target already held order 77 twice (2024-06-01 and 2024-05-20) before the run. The recompute rewrites
    # 77 where it was, adding no row for it, so the run publishes and leaves the row outside the range alone;
    # order 78, new on 2024-06-02 and living on 2024-05-21, is still refused. Only keys the run inserts can
    # land a second row.
    orders(spark, db, [(77, J1, 1), (77, M20, 2)], [(77, J1, 10)])
    result = run(spark, settings, request(tmp_path, db, "recompute"))
    assert result.status == "published"
    assert_df_equality(spark.table(f"{db}.orders"), spark.createDataFrame([(77, J1, 10), (77, M20, 2)], ORDERS),
                       ignore_row_order=True)
    spark.createDataFrame([(78, M21, 3)], ORDERS).write.format("delta").mode("append").saveAsTable(f"{db}.orders")
    spark.createDataFrame([(78, J2, 30)], ORDERS).write.format("delta").mode("append").saveAsTable(f"{db}.orders_src")
    with pytest.raises(KeysOutsideRangeError) as err:
        run(spark, settings, request(tmp_path, db, "recompute"))
    assert ": 1 staged key (order_id) lives in the target outside the run's range [2024-06-01, 2024-06-04) too: " \
           "order_id=78 in partition 2024-05-21; publishing" in str(err.value)


@pytest.mark.parametrize("literal_keys, literal_rows", [(1_000, 10_000), (1, 10_000), (1_000, 1)])
def test_keys_known_in_the_driver_are_looked_for_as_literals_and_found_as_a_join_finds_them(spark, monkeypatch,
                                                                                            literal_keys, literal_rows):
    # (order_id, line) with a NULL part; rows outside the range [J1, J3] on two days and on a NULL day.
    # Limits of 1 key or 1 row send the lookup back to the join (from a DataFrame made of the keys).
    monkeypatch.setattr(key_audit, "LITERAL_TUPLES", literal_keys)
    monkeypatch.setattr(key_audit, "LITERAL_ROWS", literal_rows)
    target = spark.createDataFrame(
        [(7, None, M20), (7, None, J5), (7, 1, M21), (8, 2, None), (9, 3, M20), (5, 5, J2)],
        "order_id INT, line INT, dt DATE")
    inside = f"dt >= DATE'{J1}' AND dt <= DATE'{J3}'"
    wanted = [(7, None), (8, 2), (5, 5), (7, None), (6, 6)]
    as_join = key_audit.keys_outside(spark.createDataFrame(wanted, "order_id INT, line INT"), target,
                                     ["order_id", "line"], inside, keys_of("dt"), few=True)
    as_literals = key_audit.keys_outside(wanted, target, ["order_id", "line"], inside, keys_of("dt"))
    # (5, 5) lives inside only; (6, 6) nowhere; (7, 1) is another key than (7, NULL)
    assert as_literals == as_join == ([((7, None), ["2024-05-20", "2024-06-05"]), ((8, 2), [None])], 2)
    assert key_audit.keys_outside(wanted, target, ["order_id", "line"], inside, keys_of("dt"), limit=1) == (
        [((7, None), ["2024-05-20", "2024-06-05"])], 2)


@pytest.mark.parametrize("one_column", [True, False])
def test_date_keys_of_any_year_are_looked_for_as_the_dates_they_are(spark, db, one_column):
    # 1582-10-10 is a day of the proleptic Gregorian calendar Spark uses (PySpark's own date literal would move it
    # ten days, onto 1582-10-20); 0001-01-01 is a common placeholder (PySpark's literal refuses its year)
    keys = ["k"] if one_column else ["id", "k"]
    schema = "k DATE, dt DATE" if one_column else "id INT, k DATE, dt DATE"
    rows = [(date(1582, 10, 20), M20), (date(1, 1, 1), M21), (date(2020, 1, 1), J5)]
    # a Delta table: Spark's Parquet filter push-down reads 1582-10-10 as another day
    spark.createDataFrame(rows + [(date(1582, 10, 10), J5)] if one_column else
                          [(1, *r) for r in rows + [(date(1582, 10, 10), J5)]], schema) \
        .write.format("delta").saveAsTable(f"{db}.dated")
    target = spark.table(f"{db}.dated")
    wanted = [(date(1582, 10, 10),), (date(1, 1, 1),), (date(2020, 1, 1),)]
    wanted = wanted if one_column else [(1, *k) for k in wanted]
    found = key_audit.keys_outside(wanted, target, keys, f"dt >= DATE'{J1}' AND dt <= DATE'{J3}'", keys_of("dt"))
    first = (lambda k: (k,)) if one_column else (lambda k: (1, k))
    assert found == ([(first(date(1, 1, 1)), ["2024-05-21"]), (first(date(1582, 10, 10)), ["2024-06-05"]),
                      (first(date(2020, 1, 1)), ["2024-06-05"])], 3)
    # after the gap, as literals: one Spark job, and the same answer
    assert key_audit.keys_outside([first(date(2020, 1, 1))], target, keys, f"dt >= DATE'{J1}' AND dt <= DATE'{J3}'",
                                  keys_of("dt")) == ([(first(date(2020, 1, 1)), ["2024-06-05"])], 1)


def test_more_keys_of_several_columns_than_a_literal_filter_takes_are_joined(spark):
    # 40 keys (id, line) > LITERAL_TUPLES: the join finds the same 40 outside, and not (i, 1) of another line
    target = spark.createDataFrame([(i, 0, M20) for i in range(40)] + [(i, 1, J5) for i in range(40, 45)],
                                   "id INT, line INT, dt DATE")
    wanted = [(i, 0) for i in range(45)]
    listed, total = key_audit.keys_outside(wanted, target, ["id", "line"], f"dt >= DATE'{J1}' AND dt <= DATE'{J3}'",
                                           keys_of("dt"))
    assert (total, listed[0], listed[-1]) == (40, ((0, 0), ["2024-05-20"]), ((4, 0), ["2024-05-20"]))


@pytest.mark.parametrize("literal_keys", [1_000, 0])
def test_keys_are_compared_in_their_own_type_not_the_targets(spark, monkeypatch, literal_keys):
    # a staged 1.234 is not the target's DECIMAL(10,2) 1.23, by literal or by the join (0: every key joined)
    monkeypatch.setattr(key_audit, "LITERAL_KEYS", literal_keys)
    target = spark.createDataFrame([(Decimal("1.23"), M20), (Decimal("2.50"), M21)], "k DECIMAL(10,2), dt DATE")
    wanted = [(Decimal("1.234"),), (Decimal("2.5"),), (None,)]
    found = key_audit.keys_outside(wanted, target, ["k"], f"dt >= DATE'{J1}' AND dt <= DATE'{J3}'", keys_of("dt"),
                                   few=True)
    assert found == ([((Decimal("2.50"),), ["2024-05-21"])], 1)
