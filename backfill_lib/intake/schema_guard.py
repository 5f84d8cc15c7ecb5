"""Pure schema compatibility: may the rows a source produces be written into the target as they are?

Allowed: identical columns; integer or decimal widening (the source value is cast explicitly to the target's
wider type, which loses nothing); a new column, added to the target as nullable in the publishing commit itself
(Delta ``mergeSchema``), so rows outside the range read NULL. Everything else is an error naming the column and
both types: a missing (dropped) column, a narrowing, a change of kind (for example ``INT`` to ``STRING``), or a
key column that is ``NOT NULL`` in the target but nullable in the source. A target column Delta generates
(``GENERATED ALWAYS AS (expression)``) may be missing: it is then computed from the row by its expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from backfill_lib.core.errors import SchemaMismatchError
from backfill_lib.core.table_state import Column

_INTEGER_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


def is_widening(source: str, target: str) -> bool:
    """True when every ``source`` value fits ``target`` exactly (integer to wider integer, decimal to wider)."""
    if source in _INTEGER_RANK and target in _INTEGER_RANK:
        return _INTEGER_RANK[source] <= _INTEGER_RANK[target]
    s, t = _DECIMAL.match(source), _DECIMAL.match(target)
    if s and t:
        (sp, ss), (tp, ts) = map(int, s.groups()), map(int, t.groups())
        return ss <= ts and sp - ss <= tp - ts
    if source in _INTEGER_RANK and t:
        digits = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}[source]
        tp, ts = map(int, t.groups())
        return tp - ts >= digits
    return False


@dataclass(frozen=True)
class ColumnCast:
    """How one target column is filled from the source: the source column, cast to ``type`` when widened; or,
    with ``expression`` set, a generated column the source omits, computed as ``CAST((expression) AS type)``
    over the row's other (aligned) columns, as Delta would generate it."""

    name: str
    type: str
    cast: bool
    new: bool = False
    expression: str | None = None


def align(
    source: tuple[Column, ...], target: tuple[Column, ...], where: str, keys: tuple[str, ...] = (),
    generated: Mapping[str, str] | None = None, case_sensitive: bool = True,
) -> tuple[ColumnCast, ...]:
    """Map the source's columns onto the target's: the target's columns in order, then new source columns.

    Parameters
    ----------
    source, target:
        Column lists. Names are matched case-sensitively, or with ``case_sensitive`` false (the session's
        ``spark.sql.caseSensitive`` off, Spark's default) ignoring case, as Spark resolves them; a
        :class:`ColumnCast` always names the target's spelling (a new column the source's).
    where:
        Names the source in error messages (a SQL file path).
    keys:
        Key columns: one that is ``NOT NULL`` in the target must not be nullable in the source.
    generated:
        The target's generated columns, ``{name: expression}``: one the source lacks is computed by its
        expression (a :class:`ColumnCast` with ``expression``); one the source has is aligned like any column
        (validation checks its values against the expression).

    Raises
    ------
    SchemaMismatchError
        On a missing column, a type change that is not a widening, or a nullable key; the message names the
        column and both types (upper case, as Spark SQL writes them).
    """
    fold = (lambda name: name) if case_sensitive else str.lower
    by_name = {fold(c.name): c for c in source}
    target_names = {fold(c.name) for c in target}
    out = []
    for col in target:
        src = by_name.get(fold(col.name))
        if src is None and col.name in (generated or {}):
            out.append(ColumnCast(col.name, col.type, False, expression=generated[col.name]))
            continue
        if src is None:
            raise SchemaMismatchError(
                f"{where}: target column {col.name} ({col.type.upper()}) is missing from the source"
            )
        if col.name in keys and not col.nullable and src.nullable:
            raise SchemaMismatchError(f"{where}: key column {col.name} is nullable in the source but NOT NULL in the target")
        if src.type == col.type:
            out.append(ColumnCast(col.name, col.type, False))
        elif is_widening(src.type, col.type):
            out.append(ColumnCast(col.name, col.type, True))
        else:
            raise SchemaMismatchError(
                f"{where}: column {col.name} is {src.type.upper()} in the source but {col.type.upper()} in the target"
            )
    out += [ColumnCast(c.name, c.type, False, new=True) for c in source if fold(c.name) not in target_names]
    return tuple(out)
