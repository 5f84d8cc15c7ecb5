"""Pure schema compatibility: may the rows a source produces be written into the target as they are?

Allowed: identical columns; integer or decimal widening (the source value is cast explicitly to the target's
wider type, which loses nothing); a new column, added to the target as nullable in the publishing commit itself
(Delta ``mergeSchema``), so rows outside the range read NULL. Everything else is an error naming the column and
both types: a missing (dropped) column, a narrowing, a change of kind (for example ``INT`` to ``STRING``), or a
key column that is ``NOT NULL`` in the target but nullable in the source. A target column Delta generates
(``GENERATED ALWAYS AS (expression)``) may be missing: it is then computed from the row by its expression.

A rebuild takes the source's schema instead: :func:`schema_changes` lists every difference it would make, and
:func:`check_schema_changes` refuses the ones that lose data or names unless the request allows them.
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
    generated: Mapping[str, str] | None = None,
) -> tuple[ColumnCast, ...]:
    """Map the source's columns onto the target's: the target's columns in order, then new source columns.

    Parameters
    ----------
    source, target:
        Column lists (names are matched case-sensitively).
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
    by_name = {c.name: c for c in source}
    target_names = {c.name for c in target}
    out = []
    for col in target:
        src = by_name.get(col.name)
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
    out += [ColumnCast(c.name, c.type, False, new=True) for c in source if c.name not in target_names]
    return tuple(out)


#: The kinds of :class:`SchemaChange` that a rebuild makes only with the request's ``schema_changes: allow``:
#: they can lose values (a narrower or other type) or break readers of a column (a name that disappears).
NEEDS_ALLOW = ("narrowed", "retyped", "dropped", "renamed")


@dataclass(frozen=True)
class SchemaChange:
    """One difference between the target's schema and the one a rebuild re-creates it with.

    ``kind`` is ``narrowed`` (an integer or decimal type that holds fewer values, e.g. ``INT`` to ``SMALLINT``,
    or a decimal's scale or integer digits reduced), ``widened`` (the reverse), ``retyped`` (another kind of type,
    e.g. ``INT`` to ``STRING``), ``added``, ``dropped``, ``renamed`` (a dropped column and an added one of the
    same type at the same position; ``after`` is the new name) or ``nullability``. ``before`` and ``after`` are
    the target's and the rebuilt table's types (upper case, as Spark SQL writes them), ``NOT NULL`` or
    ``NULL`` for ``nullability``, ``None`` for a side without the column."""

    kind: str
    column: str
    before: str | None = None
    after: str | None = None

    @property
    def needs_allow(self) -> bool:
        """Whether the rebuild makes it only with ``schema_changes: allow`` (:data:`NEEDS_ALLOW`)."""
        return self.kind in NEEDS_ALLOW

    def describe(self) -> str:
        """``column v narrowed from INT to SMALLINT``, ``column w added (INT)``, ``column a renamed to b (INT)``,
        ``column k nullable (was NOT NULL)``."""
        if self.kind == "added":
            return f"column {self.column} added ({self.after})"
        if self.kind == "dropped":
            return f"column {self.column} dropped ({self.before})"
        if self.kind == "renamed":
            return f"column {self.column} renamed to {self.after} ({self.before})"
        if self.kind == "nullability":
            return f"column {self.column} nullable (was NOT NULL)"
        return f"column {self.column} {self.kind} from {self.before} to {self.after}"


def _type_change(before: str, after: str) -> str:
    if is_widening(before, after):
        return "widened"
    numeric = (before in _INTEGER_RANK or _DECIMAL.match(before)) and (after in _INTEGER_RANK or _DECIMAL.match(after))
    return "narrowed" if numeric else "retyped"


def schema_changes(source: tuple[Column, ...], target: tuple[Column, ...]) -> tuple[SchemaChange, ...]:
    """Every difference between ``target``'s columns and ``source``'s, which a rebuild makes the table's: in the
    target's column order, then the added columns in the source's. Names match case-sensitively. A target column
    the source lacks whose position the source fills with a new column of the same type is ``renamed``; a column
    both have may change its type and its nullability (two changes). The rebuilt table's columns are all nullable
    (Delta's ``CREATE OR REPLACE TABLE ... AS SELECT`` creates them so, whatever the source's nullability), so a
    ``NOT NULL`` column of the target is a ``nullability`` change. Empty when the schemas are equal (column order
    aside)."""
    by_name = {c.name: c for c in source}
    target_names = {c.name for c in target}
    added = [c for c in source if c.name not in target_names]
    renamed: dict[str, Column] = {}
    for i, col in enumerate(target):
        if col.name in by_name or i >= len(source):
            continue
        candidate = source[i]
        if candidate.name not in target_names and candidate.type == col.type and candidate not in renamed.values():
            renamed[col.name] = candidate
    out = []
    for col in target:
        src = by_name.get(col.name)
        if src is None:
            new = renamed.get(col.name)
            out.append(SchemaChange("renamed", col.name, col.type.upper(), new.name) if new
                       else SchemaChange("dropped", col.name, col.type.upper()))
            continue
        if src.type != col.type:
            out.append(SchemaChange(_type_change(col.type, src.type), col.name, col.type.upper(), src.type.upper()))
        if not col.nullable:  # CREATE TABLE ... AS SELECT makes every column nullable, whatever the source's
            out.append(SchemaChange("nullability", col.name, "NOT NULL", "NULL"))
    out += [SchemaChange("added", c.name, None, c.type.upper()) for c in added if c not in renamed.values()]
    return tuple(out)


def changes_line(changes: tuple[SchemaChange, ...], allowed: bool) -> str:
    """One line for the plan, the run and the report: every change, those that need ``schema_changes: allow``
    marked as allowed by the request or refused without it; ``none`` when there are none."""
    if not changes:
        return "none: the rebuilt table keeps the target's columns and types"
    mark = " (allowed by the request)" if allowed else " (refused without schema_changes: allow)"
    return "; ".join(c.describe() + (mark if c.needs_allow else "") for c in changes)


def check_schema_changes(changes: tuple[SchemaChange, ...], allowed: bool, where: str, table: str) -> None:
    """Refuse ``changes`` (from :func:`schema_changes`) of ``table`` that need ``schema_changes: allow`` when
    ``allowed`` is false; ``where`` names the request file.

    Raises
    ------
    SchemaMismatchError
        ``"{where}: a rebuild would change {table}'s schema: column v narrowed from INT to SMALLINT; ...; set
        schema_changes: allow in the request to make these changes"``, listing every change that needs it.
    """
    refused = [c for c in changes if c.needs_allow]
    if refused and not allowed:
        raise SchemaMismatchError(
            f"{where}: a rebuild would change {table}'s schema: {'; '.join(c.describe() for c in refused)}; "
            "set schema_changes: allow in the request to make these changes")
