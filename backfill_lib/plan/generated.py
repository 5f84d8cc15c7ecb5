"""Generated columns of the target (``GENERATED ALWAYS AS (expression)``) in a plan: which plans are refused
(a rebuild, a publish zone other than the staging zone), and how the dry run names them. Pure.

Delta evaluates a generated column's expression whenever it writes a row: it fills the column when the write
omits it, and refuses the write when a supplied value is not ``column <=> expression``. The expression runs in the
writing session's time zone (``CAST(ts AS DATE)`` is the date in that zone). A run computes a column its source
omits when staging, and checks a supplied one when validating, both in the run's zone (the request's
``time_zone``); publishing happens in :attr:`~backfill_lib.plan.model.BackfillPlan.write_time_zone`. The staged
value equals the one Delta generates at publish only when those zones are the same, which
:func:`check_generated_columns` makes sure of.
"""

from __future__ import annotations

from backfill_lib.core.errors import IntakeError
from backfill_lib.plan.model import BackfillPlan


def check_generated_columns(plan: BackfillPlan) -> None:
    """Refuse a plan whose target has generated columns when it is a rebuild (its ``CREATE OR REPLACE TABLE ... AS
    SELECT`` takes the schema of the staged rows, without generation expressions: verified on Delta 4.4), or when
    the run would publish in another time zone than it stages and validates in (the hour grain on a ``TIMESTAMP``
    partition column publishes in UTC, see :attr:`~backfill_lib.plan.model.BackfillPlan.write_time_zone`, so a
    request in any other zone): Delta would evaluate the expressions in another zone than the staged values were
    computed in.

    Raises
    ------
    IntakeError
        Naming the table, the generated column and expression, and the strategy or both zones; nothing is
        written.
    """
    if not plan.target_generated:
        return
    g = plan.target_generated[0]
    if plan.strategy.whole_table:
        raise IntakeError(
            f"table {plan.target_table} column {g.name} is GENERATED ALWAYS AS ({g.expression}): strategy "
            f"{plan.strategy.value} re-creates the table from the staged rows' schema (CREATE OR REPLACE TABLE ... "
            f"AS SELECT), which would drop the generation expression; use strategy recompute over the table's "
            f"range")
    if plan.write_time_zone == plan.session_time_zone:
        return
    raise IntakeError(
        f"table {plan.target_table} column {g.name} is GENERATED ALWAYS AS ({g.expression}): Delta evaluates it "
        f"when publishing, in time zone {plan.write_time_zone} (hour partitions are written in UTC), but the run "
        f"computes and checks it in {plan.session_time_zone} (field time_zone); its staged value could differ "
        f"from Delta's, so the request is refused: use time_zone: UTC for this table")


def generated_line(plan: BackfillPlan) -> str:
    """What the dry run says of the target's generated columns: each with its expression, and what the run does
    with it; ``none`` when there are none."""
    if not plan.target_generated:
        return "none"
    listed = "; ".join(f"{g.name} = {g.expression}" for g in plan.target_generated)
    return (f"{listed} (Delta generates {'it' if len(plan.target_generated) == 1 else 'them'} on write: a source "
            f"that omits such a column gets it computed by its expression when staging, in time zone "
            f"{plan.session_time_zone}; a source that supplies it is checked against the expression at validation)")
