"""Review before publish: the diff gate, metric rules and the run report, end to end on small tables."""

import json
from datetime import date

import pytest
from pyspark.sql.types import DateType, DecimalType, IntegerType, StructField, StructType

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import GateFailedError
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.strategies.test_strategies import ID_DT_AMT, request, table

D9 = date(2024, 3, 9)


def test_diff_gate_blocks_deletes_and_the_report_shows_why(spark, settings, db, tmp_path, runner):
    table(spark, f"{db}.t", ID_DT_AMT, [(i, D9, i * 10) for i in range(1, 6)])
    table(spark, f"{db}.s", ID_DT_AMT, [(i, D9, 99 if i == 3 else i * 10) for i in range(2, 7)])
    suite = tmp_path / "suite.json"
    suite.write_text('{"name": "t", "expectations": [{"type": "expect_column_values_to_not_be_null", '
                     '"kwargs": {"column": "id"}}]}')
    path = request(tmp_path, f"{db}.t", f"SELECT * FROM {db}.s WHERE dt >= :range_start AND dt < :range_end",
                   diff_gate={"max_deleted": 0}, report_metric="sum(amt)", expectations=str(suite))
    plan, state = prepare(spark, settings, path)
    with pytest.raises(GateFailedError, match=r"2024-03-09: 1 deleted keys, at most 0 allowed"):
        runner.run(plan, state)
    assert current_version(spark, f"{db}.t") == 0
    [diff] = Ledger(spark, settings.ledger_schema).diffs(plan.run_id)
    assert (diff["inserted"], diff["deleted"], diff["updated"], diff["unchanged"]) == (1, 1, 1, 3)
    # the update of key 3 (amt 30 -> 99) is among the samples the ledger keeps, and the report shows it
    samples = {(x["change"], x["key"]["id"]): (x["before"], x["after"]) for x in json.loads(diff["samples"])}
    assert samples[("updated", "3")] == ({"amt": "30"}, {"amt": "99"})
    assert samples[("inserted", "6")] == (None, {"amt": "60"})
    html = (settings.runs_dir / plan.run_id / "report.html").read_text()
    assert plan.run_id in html and "<svg" in html and "2024-03-09" in html
    assert "1 deleted keys, at most 0 allowed" in html
    assert ('<tbody class="sample" data-partition="2024-03-09" data-key="id=3, dt=2024-03-09" data-change="updated">'
            '<tr><td class="key" rowspan="1">id=3, dt=2024-03-09</td><td class="change" rowspan="1">updated</td>'
            '<td class="column">amt</td><td class="before">30</td><td class="after">99</td></tr></tbody>') in html
    assert '<td data-total="updated" data-value="1">1</td>' in html
    assert 'href="data_docs/index.html"' in html
    assert (settings.runs_dir / plan.run_id / "data_docs" / "index.html").exists()  # GX Data Docs
    kept = (settings.runs_dir / plan.run_id / "validation" / "range.json").read_text()
    assert "expect_column_values_to_not_be_null" in kept and '"success": true' in kept
    markdown = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert "| 2024-03-09 | 5 |" in markdown  # rows before


def test_metric_rule_catches_a_decimal_off_by_one(spark, settings, db, tmp_path, runner):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("amt", DecimalType(17, 0))])
    from decimal import Decimal

    table(spark, f"{db}.t", schema, [(1, D9, Decimal(0)), (2, D9, Decimal(0))])
    table(spark, f"{db}.s", schema, [(1, D9, Decimal("12345678901234567")), (2, D9, Decimal("22345678901234567"))])
    sql = f"SELECT id, dt, CAST(CASE WHEN id = 2 THEN amt + 1 ELSE amt END AS DECIMAL(17,0)) AS amt FROM {db}.s " \
          "WHERE dt >= :range_start AND dt < :range_end"
    path = request(tmp_path, f"{db}.t", sql,
                   metric_rules=[{"name": "amounts", "source": {"table": f"{db}.s", "partition_column": "dt"},
                                  "metrics": {"sum": ["amt"]}}])
    plan, state = prepare(spark, settings, path)
    with pytest.raises(GateFailedError) as err:
        runner.run(plan, state)
    [failed] = err.value.failures
    assert failed.name == "amounts.sum(amt)" and failed.partition == "2024-03-09"
    assert "difference 1" in failed.message
    assert current_version(spark, f"{db}.t") == 0
