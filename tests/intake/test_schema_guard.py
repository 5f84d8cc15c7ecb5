"""The schema guard: the source's columns aligned with the target's, widening casts allowed, anything else refused
naming the column and both types (no Spark)."""

import pytest

from backfill_lib.core.errors import SchemaMismatchError
from backfill_lib.core.table_state import Column
from backfill_lib.intake.schema_guard import ColumnCast, align


def test_schema_alignment_widens_and_refuses():
    target = (Column("id", "bigint"), Column("amt", "decimal(12,2)"), Column("c", "int"))
    source = (Column("c", "int"), Column("id", "int"), Column("amt", "decimal(10,2)"))
    assert align(source, target, "s.sql") == (
        ColumnCast("id", "bigint", True), ColumnCast("amt", "decimal(12,2)", True), ColumnCast("c", "int", False)
    )
    with pytest.raises(SchemaMismatchError, match="s.sql: column c is STRING in the source but INT in the target"):
        align((Column("id", "bigint"), Column("amt", "decimal(12,2)"), Column("c", "string")), target, "s.sql")
    with pytest.raises(SchemaMismatchError, match="target column c \\(INT\\) is missing from the source"):
        align(source[1:], target, "s.sql")
    with pytest.raises(SchemaMismatchError, match="column amt is DECIMAL\\(12,4\\) in the source but DECIMAL\\(12,2\\)"):
        align((Column("id", "bigint"), Column("amt", "decimal(12,4)"), Column("c", "int")), target, "s.sql")
    added = align(source + (Column("note", "string"),), target, "s.sql")
    assert added[-1] == ColumnCast("note", "string", False, new=True)
    strict = (Column("id", "bigint", nullable=False),) + target[1:]
    with pytest.raises(SchemaMismatchError, match="key column id is nullable in the source but NOT NULL in the target"):
        align(source, strict, "s.sql", keys=("id",))
