"""Issue 18 item 6: catalog names with back-quoted parts (``sales.`order-lines```, ```my-cat`.sales.orders``,
``sales.`a.b```, ``sales.`select```): parsed, spelt one way, staged under a valid unique name, compared
case-insensitively. Pure (no Spark)."""

from __future__ import annotations

import hashlib

import pytest

from backfill_lib.core.table_names import (
    catalog_staging_table,
    catalog_table,
    check_table_name,
    quote_part,
    same_table_key,
    split_table_name,
)
from backfill_lib.intake.request import Mart, mart_order
from backfill_lib.plan.builder import staging_table_name


@pytest.mark.parametrize("written, canonical, parts", [
    ("sales.orders", "sales.orders", ["sales", "orders"]),  # as written: nothing changes for plain names
    ("Sales.Orders", "Sales.Orders", ["Sales", "Orders"]),  # case kept as written
    ("main.sales.orders", "main.sales.orders", ["main", "sales", "orders"]),
    ("orders", "orders", ["orders"]),
    ("sales.`order-lines`", "sales.`order-lines`", ["sales", "order-lines"]),
    ("`my-cat`.sales.orders", "`my-cat`.sales.orders", ["my-cat", "sales", "orders"]),
    ("sales.`a.b`", "sales.`a.b`", ["sales", "a.b"]),  # a dot inside a quoted part does not split it
    ("sales.`a``b`", "sales.`a``b`", ["sales", "a`b"]),  # a back-quote inside is doubled
    ("sales.select", "sales.`select`", ["sales", "select"]),  # a reserved word is quoted
    ("sales.`Order`", "sales.`Order`", ["sales", "Order"]),
    ("`sales`.`orders`", "sales.orders", ["sales", "orders"]),  # quotes it does not need are dropped
    ("sales.`1x`", "sales.`1x`", ["sales", "1x"]),
    ("sales.`été`", "sales.`été`", ["sales", "été"]),  # Spark reads unquoted identifiers as ASCII words only
])
def test_a_catalog_name_is_parsed_and_spelt_one_way(written, canonical, parts):
    assert check_table_name(written) == canonical
    assert split_table_name(canonical) == parts
    assert catalog_table(parts) == canonical
    assert check_table_name(canonical) == canonical  # canonical is a fixed point


@pytest.mark.parametrize("written, message", [
    ("a.b.c.d", "is not a table name of the form [catalog.]schema.table"),
    ("sales.", "is not a table name of the form"),
    ("sales..orders", "is not a table name of the form"),
    ("sales.order-lines", "(quote a part with back-quotes: sales.`order-lines`)"),
    ("sales.`x", "is not a table name of the form"),
    ("sales. orders", "is not a table name of the form"),
    ("sales.1x", "is not a table name of the form"),
    ("sales.``", "'sales.``': a back-quoted name part is empty"),
    ("parquet.`/data/t`", "(a part holding '/' reads files: name a Delta table by its path as delta.`<absolute"),
    ("`csv`.`s3://b/t`", "is not a table name of the form"),
    ("sales.`a\nb`", "a name part holds a control character"),
    ("`delta`.`data/events`", "'delta.`data/events`': the path 'data/events' is not absolute"),  # as a path
])
def test_a_malformed_catalog_name_is_refused_naming_it(written, message):
    with pytest.raises(ValueError) as err:
        check_table_name(written)
    assert message in str(err.value)


def test_a_quoted_delta_namespace_with_an_absolute_path_is_the_path_table():
    assert check_table_name("`delta`.`/wh/t/`") == "delta.`/wh/t`"
    assert check_table_name("`delta`.`events`") == "delta.events"  # a catalog table of a schema named delta


def test_quote_part_quotes_exactly_what_needs_it():
    assert [quote_part(p) for p in ("orders", "_x1", "select", "Select", "order", "a-b", "a b", "a.b", "a`b")] == [
        "orders", "_x1", "`select`", "`Select`", "`order`", "`a-b`", "`a b`", "`a.b`", "`a``b`"]


def test_a_quoted_target_stages_under_a_valid_name_unique_per_table():
    assert staging_table_name("sales.orders", "stg", "r") == "stg.sales__orders__r"  # unchanged
    assert staging_table_name("main.sales.orders", "stg", "r") == "main.stg.sales__orders__r"  # unchanged
    assert staging_table_name("sales.`select`", "stg", "r") == "stg.sales__select__r"  # a plain identifier
    digest = hashlib.sha256(b"sales.`a.b`").hexdigest()[:10]
    name = staging_table_name("`my-cat`.sales.`a.b`", "stg", "bf_1")
    assert name == f"`my-cat`.stg.q__sales_a_b__{digest}__bf_1"
    assert split_table_name(name) == ["my-cat", "stg", f"q__sales_a_b__{digest}__bf_1"]  # three parts, valid
    # same slug, different tables: different staging tables; one table however cased: the same one
    assert catalog_staging_table("sales.`a-b`", "s", "r") != catalog_staging_table("sales.`a b`", "s", "r")
    assert catalog_staging_table("sales.`a-b`", "s", "r") != catalog_staging_table("sales.a_b", "s", "r")
    assert catalog_staging_table("Sales.`A-B`", "s", "r") == catalog_staging_table("sales.`a-b`", "s", "r")
    assert catalog_staging_table("sales.`%%`", "s", "r").startswith("s.q__sales__")


def test_names_compare_however_spelt_and_cased():
    assert same_table_key("`Sales`.`ORDERS`") == same_table_key("sales.orders") == "sales.orders"
    assert same_table_key("sales.`Order-Lines`") == same_table_key("SALES.`order-lines`")
    assert same_table_key("sales.`a.b`") != same_table_key("sales.a.b")  # two parts against three


def test_a_protected_quoted_table_is_protected_however_it_is_spelt():
    from backfill_lib.core.errors import PublishError
    from backfill_lib.publish.safety import check_protected

    with pytest.raises(PublishError, match=r"table sales.`order-lines` is protected"):
        check_protected(("SALES.`Order-Lines`",), ["sales.`order-lines`"], None)
    check_protected(("sales.`order-lines`",), ["sales.`order`", "sales.order_lines"], None)


def test_a_mart_depends_on_a_quoted_mart_however_spelt(tmp_path):
    def mart(table, *deps):
        return Mart.model_validate({"table": table, "partition_column": "d", "sql": str(tmp_path / "m.sql"),
                                    "keys": ["id"], "depends_on": list(deps)})

    daily, monthly = mart("`sales-eu`.`daily`"), mart("`sales-eu`.monthly", "`Sales-EU`.Daily")
    assert (daily.table, monthly.depends_on) == ("`sales-eu`.daily", ("`Sales-EU`.Daily",))
    assert [m.table for m in mart_order((monthly, daily))] == ["`sales-eu`.daily", "`sales-eu`.monthly"]


def test_backfill_plan_prints_a_quoted_target_and_its_staging_table_as_spelt(tmp_path):
    from datetime import datetime, timezone

    from rich.console import Console

    from backfill_lib.core.table_state import Column, PartitionStats, TableState
    from backfill_lib.intake.request import BackfillRequest
    from backfill_lib.plan.builder import build_plan
    from backfill_lib.plan.explain import explain

    (tmp_path / "q.sql").write_text("SELECT 1 AS id")
    name = "`sales-eu`.`order[x]`"  # [x] would be console markup if printed as such
    request = BackfillRequest.model_validate({
        "name": "q", "owner": "ana@example.com", "reason": "TEST-18: names",
        "target": {"table": name, "partition_column": "d"}, "range": {"start": "2024-03-09", "end": "2024-03-09"},
        "strategy": "recompute", "source": {"sql": str(tmp_path / "q.sql")}, "keys": ["id"]})
    state = TableState(name, "file:/wh/t", 3, (Column("id", "int"), Column("d", "date")), ("d",),
                       {"2024-03-09": PartitionStats(1, 10, 2, "x")})
    plan = build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None,
                      now=datetime(2026, 12, 1, 12, tzinfo=timezone.utc), run_id="bf_q")
    digest = hashlib.sha256(b"`sales-eu`.`order[x]`").hexdigest()[:10]
    assert (plan.target_table, plan.staging_table) == (name, f"stg.q__sales_eu_order_x__{digest}__bf_q")
    console = Console(record=True, width=400)
    console.print(explain(plan))
    text = console.export_text()
    assert f"target                 {name} at version 3" in text
    assert f"staging                durable: staging table stg.q__sales_eu_order_x__{digest}__<run ID> (kept" in text
    assert f"replaceWhere on {name}: (`d` >= DATE'2024-03-09' AND `d` < DATE'2024-03-10')" in text
