"""Issue 18 item 6: a target whose name needs back-quotes (a schema starting with a digit, the reserved word
``order`` as its table), recomputed for one day from a source named by a reserved word, then rolled back.

The session catalog takes only letters, digits and ``_`` in a name (Unity Catalog also takes ``-`` and more), so
dashes and dots inside quoted parts are covered by the pure tests of tests/core/test_table_names.py."""

from __future__ import annotations

import uuid
from datetime import date

from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from backfill_lib.core.table_names import check_table_name, split_table_name
from tests.conftest import write_request

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("d", DateType(), True),
                     StructField("v", IntegerType(), True)])


def test_recompute_of_one_day_of_a_table_with_quoted_name_parts_then_rollback(spark, settings, tmp_path, capsys):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare
    from tests.e2e.test_layouts import run

    schema = f"`2024_eu_{uuid.uuid4().hex[:8]}`"
    spark.sql(f"CREATE SCHEMA {schema}")
    try:
        target, source = f"{schema}.`order`", f"{schema}.`select`"
        assert check_table_name(f"{schema}.order") == target  # `order` is reserved: quoted in the canonical name
        before = [(1, D8, 1), (2, D9, 2), (3, D9, 3), (4, D10, 4)]
        spark.createDataFrame(before, SCHEMA).coalesce(1).write.format("delta").partitionBy("d").saveAsTable(target)
        spark.createDataFrame([(2, D9, 20), (5, D9, 50), (4, D10, 99)], SCHEMA).write.format("delta") \
            .saveAsTable(source)
        sql = tmp_path / "q.sql"
        sql.write_text(f"SELECT id, d, v FROM {source} WHERE d >= :range_start AND d < :range_end")
        request = write_request(
            tmp_path / "q.yml", owner="ana@example.com", reason="TEST-18: quoted names",
            target={"table": f"{schema}.order", "partition_column": "d"},  # written unquoted: a reserved word
            range={"start": D9.isoformat(), "end": D9.isoformat()}, time_zone="UTC", strategy="recompute",
            source={"sql": str(sql)}, keys=["id"])

        plan, _ = prepare(spark, settings, request)
        result = run(spark, settings, request)

        assert result.status == "published" and result.plan.target_table == target
        staging = split_table_name(result.plan.staging_table)
        assert staging[0] == settings.staging_schema and staging[1].startswith("q__2024_eu_")
        assert [(s.table, s.version) for s in result.plan.source_versions] == [(source.lower(), 0)]  # pinned
        expected = [(1, D8, 1), (2, D9, 20), (5, D9, 50), (4, D10, 4)]
        assert_df_equality(spark.table(target), spark.createDataFrame(expected, SCHEMA), ignore_row_order=True,
                           ignore_nullable=True)
        assert current_version(spark, target) == 1 == result.published_version

        assert main(["rollback", result.plan.run_id, "--by", "ana@example.com", "--reason", "TEST-18: undo"]) == 0
        assert_df_equality(spark.table(target), spark.createDataFrame(before, SCHEMA), ignore_row_order=True,
                           ignore_nullable=True)
        assert spark.sql(f"DESCRIBE HISTORY {target} LIMIT 1").first()["operation"] == "RESTORE"
        capsys.readouterr()
        assert main(["history", f"{schema}.order"]) == 0
        out = capsys.readouterr().out
        assert result.plan.run_id in out and "rollback" in out
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
