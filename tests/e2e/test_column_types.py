"""Issue 43 item 4: every column type through stage, validate, diff, publish and verify. A target with MAP,
a MAP inside a STRUCT and inside an ARRAY, BINARY, TIMESTAMP_NTZ and VARIANT columns is recomputed, then
patched; the published rows are exactly the staged ones and the diff counts a map whose entries only changed
order as unchanged."""

from __future__ import annotations

import json
from datetime import date, datetime

from backfill_lib.ledger import Ledger
from tests.conftest import write_request
from tests.e2e.test_layouts import run

D9, D10 = date(2024, 3, 9), date(2024, 3, 10)
COLUMNS = ("id INT, dt DATE, m MAP<STRING, INT>, st STRUCT<m: MAP<STRING, INT>>, am ARRAY<MAP<STRING, INT>>, "
           "bin BINARY, ntz TIMESTAMP_NTZ, v VARIANT")


def create(spark, name, rows):
    """A Delta table partitioned by ``dt`` holding ``rows`` (SQL tuples of the eight columns)."""
    spark.sql(f"CREATE TABLE {name} ({COLUMNS}) USING delta PARTITIONED BY (dt)")
    spark.sql(f"INSERT INTO {name} SELECT * FROM VALUES {', '.join(rows)}")


def row(i, day, m, st, am, bin_, ntz, v):
    return (f"({i}, DATE'{day}', map({m}), named_struct('m', map({st})), array({am}), X'{bin_}', "
            f"TIMESTAMP_NTZ'{ntz}', parse_json('{v}'))")


def published(spark, table):
    """The table's rows in id order, the variant as its JSON text."""
    return [tuple(r) for r in spark.sql(f"SELECT id, dt, m, st.m, am, bin, ntz, to_json(v) FROM {table} ORDER BY id").collect()]


def request(tmp_path, db, strategy, source):
    sql = tmp_path / f"{strategy}.sql"
    sql.write_text(f"SELECT * FROM {db}.{source} WHERE dt >= :range_start AND dt < :range_end")
    return write_request(tmp_path / f"{strategy}.yml", owner="ana@example.com", reason="TEST-43: column types",
                         target={"table": f"{db}.t", "partition_column": "dt"}, time_zone="UTC",
                         range={"start": D9.isoformat(), "end": D9.isoformat()}, strategy=strategy,
                         source={"sql": str(sql)}, keys=["id"])


def diffs(spark, settings, result):
    d = {x["partition"]: x for x in Ledger(spark, settings.ledger_schema).diffs(result.plan.run_id)}["2024-03-09"]
    return (d["inserted"], d["deleted"], d["updated"], d["unchanged"]), json.loads(d["changed_columns"])


def test_maps_nested_maps_binary_timestamp_ntz_and_variant_are_recomputed_then_patched(spark, settings, db, tmp_path):
    create(spark, f"{db}.t", [
        row(1, D9, "'a', 1, 'b', 2", "'x', 1, 'y', 2", "map('p', 1, 'q', NULL)", "01", "2024-03-09 01:00:00", '{"a":1}'),
        row(2, D9, "'a', 1", "'x', 1", "map('p', 1)", "02", "2024-03-09 02:00:00", '{"a":2}'),
        row(3, D9, "'a', 3", "'x', 3", "map('p', 3)", "03", "2024-03-09 03:00:00", '{"a":3}'),
        row(4, D10, "'a', 4", "'x', 4", "map('p', 4)", "04", "2024-03-10 04:00:00", '{"a":4}'),
    ])
    create(spark, f"{db}.src", [
        # id 1: every map's entries in another order, the variant's fields too: the same row
        row(1, D9, "'b', 2, 'a', 1", "'y', 2, 'x', 1", "map('q', NULL, 'p', 1)", "01", "2024-03-09 01:00:00", '{"a":1}'),
        row(2, D9, "'a', 9", "'x', 1", "map('p', 1), map()", "02", "2024-03-09 02:00:00", '{"a":2}'),  # m, am changed
        row(5, D9, "'a', 5", "'x', 5", "map('p', 5)", "05", "2024-03-09 05:00:00", '{"a":5}'),  # id 3 deleted
    ])
    create(spark, f"{db}.fix", [
        row(1, D9, "'a', 1, 'b', 2", "'x', 1, 'y', 2", "map('p', 1, 'q', NULL)", "FF01", "2024-03-09 01:30:00",
            '{"a":1,"b":null}'),  # bin, ntz, v changed
        row(6, D9, "", "", "", "", "2024-03-09 06:00:00", "[]"),  # new: empty map, struct of an empty map, ...
    ])

    recomputed = run(spark, settings, request(tmp_path, db, "recompute", "src"))

    assert recomputed.status == "published"
    assert [c.describe() for c in recomputed.checks if not c.success] == []
    assert diffs(spark, settings, recomputed) == (
        (1, 1, 1, 1), {"m": 1, "st": 0, "am": 1, "bin": 0, "ntz": 0, "v": 0})
    assert {c.name for c in recomputed.checks if c.kind == "post_publish"} >= {"written_rows_and_checksum_equal_staging"}
    ntz = lambda h, m=0: datetime(2024, 3, 9, h, m)  # noqa: E731
    assert published(spark, f"{db}.t") == [
        (1, D9, {"a": 1, "b": 2}, {"x": 1, "y": 2}, [{"p": 1, "q": None}], bytearray(b"\x01"), ntz(1), '{"a":1}'),
        (2, D9, {"a": 9}, {"x": 1}, [{"p": 1}, {}], bytearray(b"\x02"), ntz(2), '{"a":2}'),
        (4, D10, {"a": 4}, {"x": 4}, [{"p": 4}], bytearray(b"\x04"), datetime(2024, 3, 10, 4), '{"a":4}'),
        (5, D9, {"a": 5}, {"x": 5}, [{"p": 5}], bytearray(b"\x05"), ntz(5), '{"a":5}'),
    ]

    patched = run(spark, settings, request(tmp_path, db, "patch", "fix"))

    assert patched.status == "published"
    assert [c.describe() for c in patched.checks if not c.success] == []
    assert diffs(spark, settings, patched) == ((1, 0, 1, 0), {"m": 0, "st": 0, "am": 0, "bin": 1, "ntz": 1, "v": 1})
    assert [(c.name, c.success) for c in patched.checks if c.kind == "post_publish"] == [("staged_rows_present", True)]
    assert published(spark, f"{db}.t") == [
        (1, D9, {"a": 1, "b": 2}, {"x": 1, "y": 2}, [{"p": 1, "q": None}], bytearray(b"\xff\x01"), ntz(1, 30),
         '{"a":1,"b":null}'),
        (2, D9, {"a": 9}, {"x": 1}, [{"p": 1}, {}], bytearray(b"\x02"), ntz(2), '{"a":2}'),
        (4, D10, {"a": 4}, {"x": 4}, [{"p": 4}], bytearray(b"\x04"), datetime(2024, 3, 10, 4), '{"a":4}'),
        (5, D9, {"a": 5}, {"x": 5}, [{"p": 5}], bytearray(b"\x05"), ntz(5), '{"a":5}'),
        (6, D9, {}, {}, [], bytearray(b""), ntz(6), "[]"),
    ]
