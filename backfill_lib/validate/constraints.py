"""The target's CHECK and NOT NULL constraints, evaluated on the staged rows during validation.

Delta enforces them on every row a commit writes, so a staged row that violates one would fail publishing (for a
recompute, as ``DELTA_REPLACE_WHERE_MISMATCH`` naming the date range). Evaluated here, a violation is a failed
check named by its constraint (``constraint c: CHECK (v >= 0)``, ``constraint NOT NULL v``) with the violating
row count and partitions: the gate fails (exit 3) and nothing is published.

Delta's rule, matched exactly: a row violates ``CHECK (e)`` when ``e`` is false *or NULL*, and ``NOT NULL c``
when ``c`` is NULL. All constraints are counted in one aggregation over the staged rows validation persisted.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_lib.core.checks import Check
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.table_state import Constraint, GeneratedColumn
from backfill_lib.intake.request import Strategy

#: How many partitions a failed constraint check names.
LISTED_PARTITIONS = 5


def applicable(constraints: Sequence[Constraint], strategy: Strategy, keys: Sequence[str]) -> tuple[Constraint, ...]:
    """The constraints the published rows must meet. Recompute and patch write into the target, which enforces
    them all. A rebuild re-creates the table with the target's properties (so its CHECK constraints) but the
    staged schema's nullability, so of the NOT NULL columns only the keys' hold: keys are never NULL where the
    target declared them NOT NULL. Pure."""
    if not strategy.whole_table:
        return tuple(constraints)
    return tuple(c for c in constraints if c.column is None or c.column in keys)


def _violation(constraint: Constraint | GeneratedColumn) -> Column:
    if isinstance(constraint, GeneratedColumn):
        return _generated_violation(constraint)
    if constraint.column is not None:
        return F.col(quote_ident(constraint.column)).isNull()
    return ~F.coalesce(F.expr(f"({constraint.expression})").cast("boolean"), F.lit(False))


def _generated_violation(g: GeneratedColumn) -> Column:
    # Delta's own check of a supplied generated value: column <=> expression (NULL equals NULL).
    return ~F.col(quote_ident(g.name)).eqNullSafe(_generated_value(g))


def _generated_value(g: GeneratedColumn) -> Column:
    return F.expr(f"({g.expression})").cast(g.type)


def constraint_checks(staged: DataFrame, constraints: Sequence[Constraint], keys: PartitionKeys,
                      at: str, generated: Sequence[GeneratedColumn] = ()) -> list[Check]:
    """One ``constraint`` check per constraint of ``constraints`` on ``staged`` (the staged rows of ``at``, a table name for messages):
    passed when no row violates it; failed, it gives the violating rows and up to :data:`LISTED_PARTITIONS`
    partitions (plan keys) with their counts. A NOT NULL column ``staged`` lacks (a rebuild dropped it) is left
    out; a CHECK that does not analyse against ``staged`` fails, naming Spark's error.

    Likewise one ``constraint`` check per generated column of ``generated`` (named by its
    :attr:`~backfill_lib.core.table_state.GeneratedColumn.label`, ``generated: event_date = CAST(ts AS DATE)``):
    a staged row violates it when its value is not ``column <=> expression``, evaluated in the session time zone
    (the run's), as Delta checks it when publishing; a failure also gives one example (the staged value and the
    expression's).

    All constraints are counted in one ``groupBy(partition)`` (one Spark job), ``count_if`` per constraint."""
    checks: list[Check] = []
    counted: list[tuple[Constraint | GeneratedColumn, Column]] = []
    for c in [*constraints, *generated]:
        if (c.name if isinstance(c, GeneratedColumn) else c.column) not in (None, *staged.columns):
            continue  # a column the staged rows lack (a rebuild dropped it)
        violation = _violation(c)
        try:
            staged.select(violation).schema  # analysis only: an expression the staged rows cannot evaluate
        except PySparkException as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            checks.append(Check("constraint", c.label, False, None, None, "not evaluable", "0 rows",
                                f"{at}: the constraint does not evaluate on the staged rows: {first}"))
            continue
        counted.append((c, violation))
    if not counted:
        return checks
    aggs = [F.count_if(v).alias(f"c{i}") for i, (_, v) in enumerate(counted)]
    # One example per generated column: the least (staged value, generated value) pair among its violations.
    aggs += [F.min(F.when(v, F.struct(F.col(quote_ident(c.name)).cast("string").alias("v"),
                                      _generated_value(c).cast("string").alias("g")))).alias(f"e{i}")
             for i, (c, v) in enumerate(counted) if isinstance(c, GeneratedColumn)]
    rows = staged.groupBy(keys.expr().alias("p")).agg(*aggs).collect()
    for i, (c, _) in enumerate(counted):
        bad = sorted(((keys.key(r["p"]) or "NULL", int(r[f"c{i}"])) for r in rows if r[f"c{i}"]),
                     key=lambda kv: kv[0])
        total = sum(n for _, n in bad)
        if not total:
            checks.append(Check("constraint", c.label, True, None, None, "0 rows", "0 rows"))
            continue
        listed = ", ".join(f"{p} ({n} row{'' if n == 1 else 's'})" for p, n in bad[:LISTED_PARTITIONS])
        more = f" and {len(bad) - LISTED_PARTITIONS} more partitions" if len(bad) > LISTED_PARTITIONS else ""
        unit, verb, them = ("row", "violates", "it") if total == 1 else ("rows", "violate", "them")
        if isinstance(c, GeneratedColumn):
            ex = min((r[f"e{i}"] for r in rows if r[f"e{i}"] is not None), key=lambda e: (str(e["v"]), str(e["g"])))
            shown = lambda v: "NULL" if v is None else v  # noqa: E731
            checks.append(Check("constraint", c.label, False, None, None, f"{total} {unit}", "0 rows",
                                f"{total} staged {unit} of {at} {'has' if total == 1 else 'have'} a value of "
                                f"{c.name} other than {c.expression} (Delta would refuse {them} at publish; "
                                f"leave {c.name} out of the source to have it computed), e.g. {c.name} "
                                f"{shown(ex['v'])} where {c.expression} is {shown(ex['g'])}, in partition "
                                f"{listed}{more}"))
            continue
        checks.append(Check("constraint", c.label, False, None, None, f"{total} {unit}", "0 rows",
                            f"{total} staged {unit} of {at} {verb} it (Delta would refuse {them} at publish), "
                            f"in partition {listed}{more}"))
    return checks
